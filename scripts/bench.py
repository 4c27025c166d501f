"""localchat benchmark: HTTP streaming against direct llama.cpp decoding, measured side by side.

    scripts/bench [--tokens N] [--rounds R] [--model NAME] [--config PATH]
    scripts/bench --json-schema [--rounds R]

Prints decode tokens/s through the server (SSE, official-client framing) and through
llama-cpp-python directly (no HTTP, same prompt tokens, same greedy sampling), their ratio,
time to first token, and a multi-turn chat's second-turn time to first token with prefix reuse
against a cold start. With --json-schema: tokens/s of output constrained by a small JSON object
schema against free output, same prompt, same length, greedy and sampled.
A benchmark, not a test: figures vary with the machine's load.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from pathlib import Path

import httpx
import llama_cpp as C

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from conftest import Server  # noqa: E402  (the same server launcher the tests use)

from localchat.chat.models import load_model  # noqa: E402
from localchat.engine.llama import _quiet_progress  # noqa: E402
from localchat.families import render_prompt  # noqa: E402
from localchat.registry import Registry, shipped_config  # noqa: E402

PROMPT = [{"role": "user", "content": "Write a long story about a lighthouse keeper and the sea."}]


def direct_decode(path: Path, tokens: list[int], n: int, n_ctx: int, threads: int) -> tuple[float, float]:
    """Greedy decode of n tokens with llama-cpp-python's low-level API. Returns (ttft s, decode tok/s)."""
    mp = C.llama_model_default_params()
    mp.use_extra_bufts = False  # as the engine does (see localchat/engine/llama.py)
    mp.progress_callback = _quiet_progress
    model = C.llama_model_load_from_file(str(path).encode(), mp)
    cp = C.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = n_ctx, 512, 512
    cp.n_threads = cp.n_threads_batch = threads
    ctx = C.llama_init_from_model(model, cp)
    vocab = C.llama_model_get_vocab(model)
    sampler = C.llama_sampler_chain_init(C.llama_sampler_chain_default_params())
    C.llama_sampler_chain_add(sampler, C.llama_sampler_init_greedy())
    buf = ctypes.create_string_buffer(64)
    start = time.perf_counter()
    arr = (C.llama_token * len(tokens))(*tokens)
    C.llama_decode(ctx, C.llama_batch_get_one(arr, len(tokens)))
    one = (C.llama_token * 1)()
    for i in range(n):
        tok = C.llama_sampler_sample(sampler, ctx, -1)
        C.llama_token_to_piece(vocab, tok, buf, 64, 0, False)
        if i == 0:
            first = time.perf_counter()
        one[0] = tok
        C.llama_decode(ctx, C.llama_batch_get_one(one, 1))
    end = time.perf_counter()
    C.llama_sampler_free(sampler)
    C.llama_free(ctx)
    C.llama_model_free(model)
    return first - start, (n - 1) / (end - first)


def http_stream(url: str, body: dict) -> dict:
    """Stream one chat completion; returns ttft, decode tok/s, chunk count and usage."""
    start = time.perf_counter()
    first = last = None
    chunks, usage = 0, None
    with httpx.stream("POST", url + "/v1/chat/completions", json={**body, "stream": True,
                      "stream_options": {"include_usage": True}}, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            if data.get("usage"):
                usage = data["usage"]
            elif data["choices"] and data["choices"][0]["delta"].get("content"):
                now = time.perf_counter()
                first = first or now
                last = now
                chunks += 1
    n = usage["completion_tokens"]
    return {"ttft": first - start, "tps": (n - 1) / (last - first), "usage": usage, "chunks": chunks}


def flush(url: str, model: str) -> None:
    """A short unrelated request, so the next one finds nothing useful in the KV cache."""
    httpx.post(url + "/v1/chat/completions", timeout=600, json={
        "model": model, "messages": [{"role": "user", "content": "Unrelated."}], "max_tokens": 1}).raise_for_status()


PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "city": {"type": "string", "maxLength": 40}, "email": {"type": "string", "format": "email"}},
    "required": ["name", "age", "city", "email"]}


def json_schema_bench(config: Path, model: str, rounds: int) -> None:
    ask = [{"role": "user", "content": "Describe a person as a JSON object with name, age, city and email."}]
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    server = Server(config, "--model", model)
    try:
        print(f"model {model}: a small JSON object schema (4 properties), {rounds} rounds (median)")
        for label, sampling in (("greedy", {"temperature": 0}), ("sampled", {"temperature": 1.0, "seed": 7})):
            body = {"model": model, "messages": ask, **sampling}
            http_stream(server.url, {**body, "response_format": fmt, "max_tokens": 64})  # warm-up
            constrained, free = [], []
            for _ in range(rounds):
                flush(server.url, model)
                c = http_stream(server.url, {**body, "response_format": fmt, "max_tokens": 256})
                flush(server.url, model)
                n = c["usage"]["completion_tokens"]
                f = http_stream(server.url, {**body, "max_tokens": n, "ignore_eos": True})
                constrained.append(c["tps"])
                free.append(f["tps"])
            c_tps, f_tps = statistics.median(constrained), statistics.median(free)
            print(f"{label:8}: constrained {c_tps:5.1f} tok/s   free {f_tps:5.1f} tok/s   "
                  f"ratio {c_tps / f_tps:.3f}   ({n} tokens)")
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", default=None)
    ap.add_argument("--config", type=Path, default=None)
    ap.add_argument("--json-schema", action="store_true", help="constrained against free decoding")
    args = ap.parse_args()

    config = (args.config or shipped_config()).resolve()
    registry = Registry.load(config)
    spec = registry.resolve(args.model)
    loaded = load_model(spec)  # only to render and tokenize the prompt exactly as the server does
    prompt = render_prompt(loaded.template, PROMPT, bos_token=loaded.bos_token, eos_token=loaded.eos_token)
    tokens = loaded.engine.tokenize(prompt.segments)
    n_ctx, threads = loaded.engine.n_ctx, spec.threads or __import__("os").cpu_count()
    loaded.engine.close()

    if args.json_schema:
        return json_schema_bench(config, spec.name, args.rounds)
    print(f"model {spec.name}: {len(tokens)} prompt tokens, {args.tokens} generated, greedy, "
          f"{threads} threads, {args.rounds} rounds (median)")
    server = Server(config, "--model", spec.name)
    try:
        body = {"model": spec.name, "messages": PROMPT, "max_tokens": args.tokens, "temperature": 0, "ignore_eos": True}
        direct, served = [], []
        for _ in range(args.rounds):
            direct.append(direct_decode(spec.file(), tokens, args.tokens, n_ctx, threads))
            flush(server.url, spec.name)
            served.append(http_stream(server.url, body))
        d_tps = statistics.median(t for _, t in direct)
        d_ttft = statistics.median(f for f, _ in direct)
        h_tps = statistics.median(s["tps"] for s in served)
        h_ttft = statistics.median(s["ttft"] for s in served)
        print(f"direct llama-cpp-python : {d_tps:6.1f} tok/s   ttft {d_ttft * 1000:6.1f} ms")
        print(f"localchat HTTP stream   : {h_tps:6.1f} tok/s   ttft {h_ttft * 1000:6.1f} ms   "
              f"({served[-1]['chunks']} SSE content chunks)")
        print(f"ratio HTTP / direct     : {h_tps / d_tps:6.3f}")

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


if __name__ == "__main__":
    main()
