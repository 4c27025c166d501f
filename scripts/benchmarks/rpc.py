"""--rpc: the model with all its layers on a `localchat rpc-worker` in a network namespace joined by a
veth pair (localchat/devtools/rpclink.py) against the same model loaded directly: decode tok/s and
time to first token, rounds interleaved. Both run on this machine's CPU, so this is the link's cost,
not a GPU's gain (no goal). scripts/bench --rpc builds an RPC-enabled llama-cpp-python once and, as
root, gives the run a network namespace of its own."""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from localchat.models import ModelSpec
from localchat.serve_process import Server

from .common import PROMPT, flush, http_stream


def rpc_bench(spec: ModelSpec, n: int, rounds: int) -> None:
    """llama.cpp RPC over a veth pair against the model loaded directly (same file, same slots)."""
    import os

    from localchat.devtools import rpclink

    if why := rpclink.missing():
        raise SystemExit(f"--rpc: {why}")
    path, ctx = spec.file(), max(2048, n + 512)
    print(f"model {spec.name}: over RPC (a veth pair) against direct, {n} tokens, greedy, {rounds} rounds (median)")
    with tempfile.TemporaryDirectory() as tmp, rpclink.namespace() as ns:
        config = Path(tmp) / "models.toml"
        config.write_text(f'default = "direct"\nmax_loaded_models = 2\n'
                          f'[models.direct]\npath = "{path}"\ncontext_length = {ctx}\nparallel = 1\n'
                          f'[models.over-rpc]\npath = "{path}"\ncontext_length = {ctx}\nparallel = 1\n'
                          f'rpc = ["{rpclink.ENDPOINT}"]\n')
        worker = rpclink.Worker(ns, Path(tmp) / "rpc-worker.log", threads=spec.threads or os.cpu_count() or 1)
        server = None
        try:
            server = Server(config)
            runs: dict[str, list[dict]] = {"direct": [], "over-rpc": []}
            for label in runs:  # warm-up (and the RPC model's load)
                http_stream(server.url, {"model": label, "messages": PROMPT, "max_tokens": 8, "temperature": 0})
            for r in range(rounds):
                for label in (list(runs) if r % 2 == 0 else list(reversed(runs))):
                    flush(server.url, label)
                    runs[label].append(http_stream(server.url, {"model": label, "messages": PROMPT, "max_tokens": n,
                                                                "temperature": 0, "ignore_eos": True}))
            tps = {k: statistics.median(x["tps"] for x in v) for k, v in runs.items()}
            ttft = {k: statistics.median(x["ttft"] for x in v) for k, v in runs.items()}
            for label in runs:
                print(f"{label:9}: {tps[label]:6.1f} tok/s   ttft {ttft[label] * 1000:7.1f} ms")
            print(f"over-rpc / direct tok/s: {tps['over-rpc'] / tps['direct']:6.3f}   "
                  f"ttft {(ttft['over-rpc'] - ttft['direct']) * 1000:+7.1f} ms")
        finally:
            if server is not None:
                server.stop()
            worker.stop()
