"""--concurrency: the aggregate decode tokens/s of 1, 2 and 4 streams at once (and each against 1
stream), a short request's time to first token alone and during a long stream, a code completion's
alone and while a chat streams, the single-stream HTTP/direct ratio, and whether each meets its goal
(ttft during / alone <= 2, 4-stream / 1-stream aggregate >= 1.15, HTTP / direct >= 0.97)."""

from __future__ import annotations

import json
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from localchat.models import ModelSpec
from localchat.serve_process import Server

from .common import concurrent_streams, http_stream, served_vs_direct, slots, story, wait_idle


def short(model: str, k: int) -> dict:
    """A ~16-token request; k leads the prompt so no slot holds more of it than the template's head."""
    return {"model": model, "messages": [{"role": "user", "content": f"{k}. Say hi."}], "max_tokens": 4,
            "temperature": 0, "ignore_eos": True}


def long_stream(url: str, body: dict, going: threading.Event, stop: threading.Event, after: int = 20) -> int:
    """Stream body, set `going` after `after` content chunks, hang up once `stop` is set; returns chunks read."""
    chunks = 0
    with httpx.stream("POST", url + "/v1/chat/completions", json={**body, "stream": True}, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["delta"].get("content"):
                chunks += 1
                if chunks == after:
                    going.set()
            if stop.is_set():
                break
    going.set()  # never leave the caller waiting, even on a stream shorter than `after`
    return chunks


def completion_ttft(url: str, body: dict) -> dict:
    """Stream one /v1/completions request (an editor's code completion); returns its ttft."""
    start = time.perf_counter()
    with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["text"]:
                return {"ttft": time.perf_counter() - start}
    raise RuntimeError("the completion streamed no text")


def code(model: str, k: int) -> dict:
    """A short code completion; k leads the prompt, so no slot holds it already."""
    return {"model": model, "prompt": f"# {k}\ndef fibonacci(n):\n", "max_tokens": 8, "temperature": 0,
            "ignore_eos": True}


def ttft_during(url: str, long_body: dict, short_body: dict, send=None) -> tuple[dict, int]:
    """The short request's stream (`send`, default a chat stream), sent once the long stream has
    produced its first 20 tokens; the long stream is then cancelled. Returns the short run and
    how many chunks the long one read."""
    going, stop = threading.Event(), threading.Event()
    with ThreadPoolExecutor(1) as pool:
        background = pool.submit(long_stream, url, long_body, going, stop)
        going.wait(600)
        try:
            run = (send or http_stream)(url, short_body)
        finally:
            stop.set()
        long_chunks = background.result()
    return run, long_chunks


def concurrency_bench(config: Path, spec: ModelSpec, tokens: list[int], n: int, rounds: int, n_ctx: int,
                      threads: int) -> None:
    levels, long_tokens = (1, 2, 4), max(512, n)
    print(f"model {spec.name}: concurrency, {n} tokens per stream, greedy, ignore_eos, "
          f"{rounds} rounds (median)")
    server = Server(config, "--model", spec.name)
    try:
        url, model = server.url, spec.name
        print(f"server: {slots(url, model)['slots']} slots")
        concurrent_streams(url, [story(model, 8, f"warm-up {i}") for i in range(max(levels))])  # warm-up
        http_stream(url, short(model, 999))

        aggregate: dict[int, list[float]] = {k: [] for k in levels}
        for r in range(rounds):
            for k in levels:
                wait_idle(url, model)
                run = concurrent_streams(url, [story(model, n, f"version {i}, round {r}") for i in range(k)])
                aggregate[k].append(run["tps"])
        agg = {k: statistics.median(v) for k, v in aggregate.items()}
        print("aggregate decode tok/s (all streams' tokens after the first content token, over the time\n"
              "from the first stream's first content token to the last stream's last token):")
        for k in levels:
            print(f"  {k} stream{'s' if k > 1 else ' '}: {agg[k]:6.1f} tok/s   x{agg[k] / agg[1]:5.2f} the 1-stream "
                  f"aggregate   ({k * n} tokens)")

        alone, during = [], []
        for r in range(rounds):
            wait_idle(url, model)
            alone.append(http_stream(url, short(model, 2 * r)))
            wait_idle(url, model)
            run, long_chunks = ttft_during(url, story(model, long_tokens, f"long {r}"), short(model, 2 * r + 1))
            during.append(run)
            if long_chunks >= long_tokens:
                print(f"  (round {r}: the long stream ended before the short request did)")
            wait_idle(url, model)
        a_ttft = statistics.median(x["ttft"] for x in alone)
        d_ttft = statistics.median(x["ttft"] for x in during)
        cached = [x["usage"]["prompt_tokens_details"]["cached_tokens"] for x in (alone[-1], during[-1])]
        print(f"short request ttft ({during[-1]['usage']['prompt_tokens']} prompt tokens, a different one each "
              f"time; cached: alone {cached[0]}, during {cached[1]}):")
        print(f"  alone                 : {a_ttft * 1000:7.1f} ms")
        print(f"  during a long stream  : {d_ttft * 1000:7.1f} ms   (sent after its first 20 tokens; "
              f"{long_tokens} max_tokens, cancelled after)")
        print(f"  ratio during / alone  : {d_ttft / a_ttft:7.2f}")

        c_alone, c_during = [], []
        for r in range(rounds):
            wait_idle(url, model)
            c_alone.append(completion_ttft(url, code(model, 2 * r)))
            wait_idle(url, model)
            c_during.append(ttft_during(url, story(model, long_tokens, f"chat {r}"), code(model, 2 * r + 1),
                                        completion_ttft)[0])
            wait_idle(url, model)
        ca, cd = (statistics.median(x["ttft"] for x in runs) for runs in (c_alone, c_during))
        print("code completion (/v1/completions) ttft:")
        print(f"  alone                 : {ca * 1000:7.1f} ms")
        print(f"  while a chat streams  : {cd * 1000:7.1f} ms   (ratio {cd / ca:.2f}: it does not wait for the chat)")

        print(f"single stream, {n} tokens, {len(tokens)} prompt tokens, {threads} threads:")
        single = served_vs_direct(url, spec, tokens, n, rounds, n_ctx, threads)
    finally:
        server.stop()

    goals = (("ttft during / alone", d_ttft / a_ttft, "<=", 2.0),
             ("4-stream / 1-stream aggregate", agg[4] / agg[1], ">=", 1.15),
             ("single stream HTTP / direct", single, ">=", 0.97))
    print("goals:")
    for label, value, op, goal in goals:
        met = value <= goal if op == "<=" else value >= goal
        print(f"  {label:30}: {value:6.3f}  (goal {op} {goal:.2f})  {'PASS' if met else 'MISS'}")
