"""--upstream: a localchat (serve --peer) and a second one serving its model through an `upstream =`
entry (token mode), the same request to each in turn: tok/s and ttft (goal: >= 0.95 of direct
tok/s)."""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from localchat.models import ModelSpec
from localchat.serve_process import Server

from .common import PROMPT, http_stream


def upstream_bench(config: Path, spec: ModelSpec, n: int, rounds: int) -> None:
    """The same streamed request to a localchat (serve --peer) and to a second one whose models.toml
    names the first's model `upstream =` (token mode: rendered here, decoded there), alternately."""
    folder = Path(tempfile.mkdtemp(prefix="localchat-bench-upstream-"))
    peer = Server(config, "--peer", "--model", spec.name)
    front = None
    try:
        (folder / "front.toml").write_text(f'default = "remote"\n[models.remote]\nupstream = "{peer.url}/v1"\n'
                                           f'upstream_model = "{spec.name}"\n')
        front = Server(folder / "front.toml")
        body = {"messages": PROMPT, "max_tokens": n, "temperature": 0, "ignore_eos": True, "ngram_draft": 0}
        http_stream(peer.url, {**body, "model": spec.name, "max_tokens": 2})  # loaded, the prompt cached on both paths
        http_stream(front.url, {**body, "model": "remote", "max_tokens": 2})
        direct, through = [], []
        for _ in range(rounds):
            direct.append(http_stream(peer.url, {**body, "model": spec.name}))
            through.append(http_stream(front.url, {**body, "model": "remote"}))
    finally:
        if front is not None:
            front.stop()
        peer.stop()
    tps = [statistics.median(r["tps"] for r in runs) for runs in (direct, through)]
    ttft = [statistics.median(r["ttft"] for r in runs) * 1000 for runs in (direct, through)]
    ratio = tps[1] / tps[0] if tps[0] else 0.0
    print(f"model {spec.name}: {n} tokens, greedy, {rounds} rounds (median), through an upstream localchat on loopback")
    print(f"direct   : {tps[0]:6.1f} tok/s   ttft {ttft[0]:7.1f} ms")
    print(f"upstream : {tps[1]:6.1f} tok/s   ttft {ttft[1]:7.1f} ms   {ratio:.2f}x of direct  (goal >= 0.95)  "
          f"{'PASS' if ratio >= 0.95 else 'FAIL'}")
