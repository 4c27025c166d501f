"""--worker: the cost of the process boundary: the same stream through a server whose llama.cpp runs
in a worker process (the default) and through one running it in-process (--in-process), rounds
interleaved (goals: worker / in-process tok/s >= 0.98, the worker's ttft at most 5 ms more)."""

from __future__ import annotations

import statistics
from pathlib import Path

from localchat.models import ModelSpec
from localchat.serve_process import Server

from .common import PROMPT, flush, http_stream


def worker_bench(config: Path, spec: ModelSpec, n: int, rounds: int) -> None:
    """The cost of the process boundary: the same stream through a server whose llama.cpp runs in
    a worker process and through one running it in-process, rounds interleaved."""
    print(f"model {spec.name}: worker process against in-process, {n} tokens, greedy, {rounds} rounds (median)")
    servers = {"in-process": Server(config, "--model", spec.name, "--in-process"),
               "worker": Server(config, "--model", spec.name)}
    try:
        runs: dict[str, list[dict]] = {k: [] for k in servers}
        body = {"model": spec.name, "messages": PROMPT, "max_tokens": n, "temperature": 0, "ignore_eos": True}
        for label, server in servers.items():  # warm-up
            http_stream(server.url, {**body, "max_tokens": 8})
        for r in range(rounds):
            for label, server in (servers.items() if r % 2 == 0 else reversed(servers.items())):
                flush(server.url, spec.name)
                runs[label].append(http_stream(server.url, body))
        tps = {k: statistics.median(x["tps"] for x in v) for k, v in runs.items()}
        ttft = {k: statistics.median(x["ttft"] for x in v) for k, v in runs.items()}
        for label in servers:
            print(f"{label:11}: {tps[label]:6.1f} tok/s   ttft {ttft[label] * 1000:6.1f} ms")
        ratio, extra = tps["worker"] / tps["in-process"], (ttft["worker"] - ttft["in-process"]) * 1000
        print(f"worker / in-process tok/s: {ratio:6.3f}   (goal >= 0.98)  {'PASS' if ratio >= 0.98 else 'MISS'}")
        print(f"worker ttft - in-process : {extra:+6.1f} ms (goal <= 5 ms)  {'PASS' if extra <= 5 else 'MISS'}")
    finally:
        for server in servers.values():
            server.stop()
