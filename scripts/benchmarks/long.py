"""--long: decode tok/s after a prompt of ~2k and ~8k tokens (read first, then the decode measured),
greedy past any end of turn, no drafts, against llama-server's (goal: >= it)."""

from __future__ import annotations

from pathlib import Path

from localchat.models import ModelSpec
from localchat.serve_process import Server

from .common import LlamaServer, long_run


def long_bench(config: Path, spec: ModelSpec, n: int) -> None:
    import os

    contexts = (2048, 8192)
    server = Server(config, "--model", spec.name)
    try:
        ours = long_run(server.url, spec.name, contexts, n)
    finally:
        server.stop()
    theirs = None
    if os.environ.get("LLAMA_SERVER"):
        their = LlamaServer(spec, "-c", "16384", "-np", "1")
        try:
            theirs = long_run(their.url, spec.name, contexts, n)
        finally:
            their.stop()
    print(f"model {spec.name}: decode tok/s after a long prompt, {n} tokens, greedy, no drafts "
          "(goal: >= llama-server's)")
    print(f"{'context':>8} {'prompt':>7} {'localchat':>10} {'llama-server':>13} {'ratio':>6}  goal")
    for i, context in enumerate(contexts):
        mine = ours[i]
        prompt = (mine["usage"] or {}).get("prompt_tokens", 0)
        if theirs is None:
            print(f"{context:8} {prompt:7} {mine['tps']:10.1f} {'-':>13} {'-':>6}")
            continue
        ratio = mine["tps"] / theirs[i]["tps"] if theirs[i]["tps"] else 0.0
        print(f"{context:8} {prompt:7} {mine['tps']:10.1f} {theirs[i]['tps']:13.1f} {ratio:5.2f}x  "
              f"{'PASS' if ratio >= 1 else 'FAIL'}")
