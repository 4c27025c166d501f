"""--decode: a chat answer's decode tok/s (the default model, 256 tokens greedy), with drafts and
without, and llama-server's on the same GGUF when LLAMA_SERVER names its binary, one after another
in each round (goal: localchat with drafts >= llama-server)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from localchat.models import ModelSpec
from localchat.models.paths import step_costs_file
from localchat.serve_process import Server

from .common import LlamaServer, http_stream, story


def measured(spec: ModelSpec) -> bool:
    """Whether this machine's step costs for the model's file are kept (draft_cost.py's file): the
    server then measures nothing while idle. (Any thread count's figures count: a guard, not the key.)"""
    file = spec.file()
    try:
        known = json.loads(step_costs_file().read_text())
    except (OSError, ValueError):
        return False
    return isinstance(known, dict) and any(k.startswith(f"{file.name}|{file.stat().st_size}|") for k in known)


def decode_bench(config: Path, spec: ModelSpec, n: int, rounds: int) -> None:
    """The shipped default answering a prose question, n tokens greedy past any end of turn: localchat
    with its drafts (the default) and without (ngram_draft 0), and llama-server on the same GGUF
    with its defaults, as people start it (`llama-server -m FILE`: no drafts), the three one after
    another in each round,
    so a machine's drift lands on all three. Goal: localchat (drafts on) >= llama-server. llama-server
    starts once localchat's step costs are kept: a first load measures them while idle, and beside
    llama-server's runs on two cores each crushed the other (llama-server 3.6 tok/s; localchat kept
    one token at 2.69 s)."""
    import os
    import statistics

    body = {**story(spec.name, n, "decode"), "cache_prompt": True}
    server = Server(config, "--model", spec.name)
    their = None
    runs: dict[str, list[float]] = {"localchat": [], "localchat, no drafts": [], "llama-server": []}
    try:
        http_stream(server.url, {**body, "max_tokens": 8})  # warm: the prompt read once, the model's pages in
        if not measured(spec):  # a first load measures its step costs while idle: not beside llama-server's runs
            deadline = time.monotonic() + 120
            while not measured(spec) and time.monotonic() < deadline:
                time.sleep(1)
        their = LlamaServer(spec) if os.environ.get("LLAMA_SERVER") else None  # (its defaults, as people start it)
        if their is not None:
            http_stream(their.url, {**body, "max_tokens": 8})
        for _ in range(rounds):
            runs["localchat"].append(http_stream(server.url, body)["tps"])
            runs["localchat, no drafts"].append(http_stream(server.url, {**body, "ngram_draft": 0})["tps"])
            if their is not None:
                runs["llama-server"].append(http_stream(their.url, body)["tps"])
    finally:
        server.stop()
        if their is not None:
            their.stop()
    print(f"model {spec.name}: decode tok/s of a chat answer, {n} tokens greedy, {rounds} rounds "
          "(median, min-max); goal: localchat >= llama-server")
    base = statistics.median(runs["llama-server"]) if runs["llama-server"] else None
    for name, tps in runs.items():
        if not tps:
            print(f"  {name:<22} -  (LLAMA_SERVER not set)")
            continue
        mid = statistics.median(tps)
        ratio = f"{mid / base:5.2f}x" if base else "     -"
        print(f"  {name:<22} {mid:6.1f}  ({min(tps):.1f}-{max(tps):.1f})  {ratio}")
    if base:
        ratio = statistics.median(runs["localchat"]) / base
        print(f"decode: localchat {ratio:.2f}x llama-server: {'PASS' if ratio >= 1 else 'FAIL'}")
