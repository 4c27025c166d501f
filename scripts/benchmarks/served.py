"""The default benchmark (`scripts/bench [--tokens N] [--rounds R] [--model NAME] [--config PATH]`):
decode tokens/s through the server (SSE, official-client framing) and through llama-cpp-python
directly (no HTTP, same prompt tokens, same greedy sampling), their ratio, time to first token, and a
multi-turn chat's second-turn time to first token with prefix reuse against a cold start."""

from __future__ import annotations

from pathlib import Path

import httpx

from localchat.models import ModelSpec
from localchat.serve_process import Server

from .common import flush, http_stream, served_vs_direct


def served_bench(config: Path, spec: ModelSpec, tokens: list[int], n: int, rounds: int, n_ctx: int,
                 threads: int) -> None:
    """PROMPT through the server against llama-cpp-python directly (served_vs_direct; `tokens` is PROMPT
    rendered and tokenized as the server does), n tokens; then a chat's second turn with its prefix
    still in a slot against the same turn after a flush (cold)."""
    print(f"model {spec.name}: {len(tokens)} prompt tokens, {n} generated, greedy, "
          f"{threads} threads, {rounds} rounds (median)")
    server = Server(config, "--model", spec.name)
    try:
        served_vs_direct(server.url, spec, tokens, n, rounds, n_ctx, threads)

        system = {"role": "system", "content": "You are a helpful assistant. " * 40}
        turn1 = [system, {"role": "user", "content": "Tell me about lighthouses."}]
        reply = httpx.post(server.url + "/v1/chat/completions", timeout=600, json={
            "model": spec.name, "messages": turn1, "max_tokens": 48, "temperature": 0}).json()
        turn2 = turn1 + [{"role": "assistant", "content": reply["choices"][0]["message"]["content"]},
                         {"role": "user", "content": "And who keeps them today?"}]
        warm = http_stream(server.url, {"model": spec.name, "messages": turn2, "max_tokens": 8, "temperature": 0})
        flush(server.url, spec.name)
        cold = http_stream(server.url, {"model": spec.name, "messages": turn2, "max_tokens": 8, "temperature": 0})
        for label, run in (("second turn, prefix reused", warm), ("same turn, cold start   ", cold)):
            u = run["usage"]
            cached = u["prompt_tokens_details"]["cached_tokens"]
            print(f"{label}: ttft {run['ttft'] * 1000:7.1f} ms   prompt {u['prompt_tokens']} tokens, "
                  f"{cached} cached, {u['prompt_tokens'] - cached} processed")
        print(f"second-turn ttft speed-up: {cold['ttft'] / warm['ttft']:.1f}x")
    finally:
        server.stop()
