"""--kv: f16, q8_0 and q4_0 K/V cache cells (serve -ctk/-ctv): the context that fits the memory 32k
tokens of f16 cells need, decode tok/s after an ~8k-token prompt, and the mean absolute difference of
the top-token log-probabilities from f16's over a ~2k-token text (goal: q8_0 fits >= 1.8x the
context with decode within 10%)."""

from __future__ import annotations

from pathlib import Path

import httpx

from localchat.models import ModelSpec
from localchat.serve_process import Server

from .common import long_body, long_run


def top_logprobs(url: str, model: str, text: str) -> list[float]:
    """The most likely token's log-probability at each position of `text` (vLLM's prompt_logprobs)."""
    body = {"model": model, "prompt": text, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 1,
            "cache_prompt": False}
    r = httpx.post(url + "/v1/completions", json=body, timeout=3600)
    r.raise_for_status()
    return [next(e["logprob"] for e in entry.values() if e["rank"] == 1)
            for entry in r.json()["choices"][0]["prompt_logprobs"] if entry]


def kv_bench(config: Path, spec: ModelSpec, n: int) -> None:
    """f16, q8_0 and q4_0 cells (K and V alike): the context that fits the memory 32k tokens of f16
    cells need (one slot), decode tok/s after an ~8k-token prompt, and the mean absolute difference
    of each position's top-token log-probability from f16's over a fixed ~2k-token text."""
    from localchat.models import fit, inspect

    shape = fit.MemoryShape.of(inspect(spec.file()))
    budget = fit.need(shape, 32768, 1).total
    text = long_body(spec.name, 2048, 1)["messages"][0]["content"]
    rows, base = [], None
    for cache in ("f16", "q8_0", "q4_0"):
        server = Server(config, "--model", spec.name, "-c", "9216", "-np", "1", "-ctk", cache, "-ctv", cache)
        try:
            tops = top_logprobs(server.url, spec.name, text)
            decode = long_run(server.url, spec.name, (8192,), n)[0]
        finally:
            server.stop()
        base = base or tops
        diff = sum(abs(a - b) for a, b in zip(base, tops)) / min(len(base), len(tops))
        rows.append((cache, fit.largest_context(shape, budget, 1, (cache, cache)), decode, diff, len(tops)))
    f16 = rows[0]
    print(f"model {spec.name}: K/V cache types; memory budget {fit.human(budget)} (32768 tokens of f16 cells, one "
          f"slot); decode after ~8k tokens, {n} tokens, greedy; log-probabilities over {f16[4]} positions")
    print(f"the cells alone: q8_0 {shape.kv_per_token() / shape.kv_per_token(('q8_0', 'q8_0')):.2f}x as many per "
          f"byte, q4_0 {shape.kv_per_token() / shape.kv_per_token(('q4_0', 'q4_0')):.2f}x")
    print(f"{'cache':>6} {'fitted context':>15} {'vs f16':>7} {'decode tok/s':>13} {'vs f16':>7} "
          f"{'mean |Δ top logprob|':>21}")
    for cache, context, decode, diff, _ in rows:
        print(f"{cache:>6} {context:15} {context / f16[1]:6.2f}x {decode['tps']:13.1f} "
              f"{decode['tps'] / f16[2]['tps']:6.2f}x {diff:21.4f}")
    q8 = rows[1]
    print(f"goal (q8_0: >= 1.8x the context, decode within 10%): "
          f"{'PASS' if q8[1] >= 1.8 * f16[1] and q8[2]['tps'] >= 0.9 * f16[2]['tps'] else 'FAIL'}")
