"""localchat benchmark: HTTP streaming against direct llama.cpp decoding, measured side by side.

    scripts/bench [--tokens N] [--rounds R] [--model NAME] [--config PATH]
    scripts/bench --json-schema [--rounds R]
    scripts/bench --concurrency [--tokens N] [--rounds R]
    scripts/bench --worker [--tokens N] [--rounds R]
    scripts/bench --tools [--rounds R]
    scripts/bench --lora [--tokens N] [--rounds R] [--model NAME]
    scripts/bench --vision [--rounds R] [--model NAME]
    scripts/bench --edit [--model NAME] [--tokens N]  (default: qwen2.5-coder-1.5b, 1200 tokens)
    scripts/bench --agent [--model NAME]            (LLAMA_SERVER=path/to/llama-server: side by side)
    scripts/bench --rpc [--model NAME] [--tokens N] [--rounds R]   (root; builds an RPC llama-cpp-python once)
    scripts/bench --upstream [--model NAME] [--tokens N] [--rounds R]
    scripts/bench --decode [--model NAME] [--tokens N] [--rounds R]  (LLAMA_SERVER: side by side)
    scripts/bench --long [--model NAME] [--tokens N]  (default: the default model, 128 tokens)
    scripts/bench --fim [--model NAME]              (default: qwen2.5-coder-1.5b and -0.5b)
    scripts/bench --kv [--model NAME] [--tokens N]  (default: qwen2.5-coder-0.5b, 64 tokens)

Prints decode tokens/s through the server (SSE, official-client framing) and through
llama-cpp-python directly (no HTTP, same prompt tokens, same greedy sampling), their ratio,
time to first token, and a multi-turn chat's second-turn time to first token with prefix reuse
against a cold start. With --json-schema: tokens/s of output constrained by a small JSON object
schema against free output, same prompt, same length, greedy and sampled. With --concurrency:
the aggregate decode tokens/s of 1, 2 and 4 streams at once (and each against 1 stream), a short
request's time to first token alone and during a long stream, the single-stream HTTP/direct
ratio, and whether each meets its goal. With --lora: two random LoRA adapters made for the model,
two streams at once with one adapter against two streams with different adapters (and none).
With --vision: what an image costs, in prompt tokens and time to first token (the tiny test
projector, or the model's own `mmproj`), cold and read again from the prompt cache.
With --edit: a 121-line file returned with a variable renamed throughout, greedy: decode tok/s without drafts
(ngram_draft 0) and with them (the default), the text asserted identical; the module case again with
the file as the prediction (OpenAI's Predicted Outputs: goals >= 2x without drafts, >= drafts from
the prompt, identical, and the prediction's accepted/rejected tokens from usage); llama-server's
tok/s with --spec-type ngram-mod when LLAMA_SERVER names its binary (goals: >= 1.5x without
drafts, >= llama-server's), and what drafts could give at best here: a step of k tokens' cost
against one token's (a compute-bound CPU pays nearly k times for k).
With --agent: an agent-like prompt of 10k+ tokens (long instructions, 24 tools, an environment
block), time to first token cold, then the next turn, a new session, a new session after a
restart, after an unload, and a new session whose environment block moved (written after the
user's prompt inside its text), and the same on /v1/messages as Claude Code 2.1.3xx sends it (the
block a system message after the user's): each against cold (goal <= 5%), and llama-server's
figures for the same requests when LLAMA_SERVER names its binary (--cache-reuse 256, --cache-ram).
With --rpc: the model with all its layers on a `localchat rpc-worker` in a network namespace joined by
a veth pair (localchat/devtools/rpclink.py) against the same model loaded directly: decode tok/s and time to first
token, rounds interleaved. Both run on this machine's CPU, so this is the link's cost, not a GPU's gain.
With --decode: a chat answer's decode tok/s (the default model, 256 tokens greedy), with drafts and
without, and llama-server's on the same GGUF when LLAMA_SERVER names its binary, one after another
in each round (goal: localchat with drafts >= llama-server).
With --long: decode tok/s after a prompt of ~2k and ~8k tokens (read first, then the decode
measured), greedy past any end of turn, no drafts, against llama-server's (goal: >= it).
With --fim: llama.vscode's /infill requests (16 chunks of other files, the lines around the
cursor, the typed part of the line; n_predict 128, t_max_predict_ms 500, n_indent): one cold,
then one a keystroke; time to the answer, p50 against llama-server's as llama.vscode's README
starts it (goal: p50 <= llama-server's).
With --upstream: a localchat (serve --peer) and a second one serving its model through an
`upstream =` entry (token mode), the same request to each in turn: tok/s and ttft (goal: >= 0.95
of direct tok/s).
With --kv: f16, q8_0 and q4_0 K/V cache cells (serve -ctk/-ctv): the context that fits the memory
32k tokens of f16 cells need, decode tok/s after an ~8k-token prompt, and the mean absolute
difference of the top-token log-probabilities from f16's over a ~2k-token text (goal: q8_0 fits
>= 1.8x the context with decode within 10%).
A benchmark, not a test: figures vary with the machine's load.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import io
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import llama_cpp as C

from localchat.devtools import isolate_home  # noqa: E402
from localchat.serve_process import Server  # noqa: E402  (the same server launcher the tests use)

isolate_home()  # (the servers it starts keep away from the user's registry and prompt store)

from localchat.models.host import load_model  # noqa: E402
from localchat.engine.llama.model import quiet_progress as _quiet_progress  # noqa: E402
from localchat.families import render_prompt  # noqa: E402
from localchat.models import ModelSpec, Registry, Settings, shipped_config  # noqa: E402

PROMPT = [{"role": "user", "content": "Write a long story about a lighthouse keeper and the sea."}]


def direct_decode(path: Path, tokens: list[int], n: int, n_ctx: int, threads: int) -> tuple[float, float]:
    """Greedy decode of n tokens with llama-cpp-python's low-level API. Returns (ttft s, decode tok/s)."""
    mp = C.llama_model_default_params()
    mp.use_extra_bufts = False  # as the engine does (see localchat/engine/llama/model.py)
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
    """Stream one chat completion; returns ttft, decode tok/s, chunk count and usage, the text, and
    the perf_counter times of the request's start and of its first and last content chunks."""
    start = time.perf_counter()
    first = last = None
    chunks, usage, parts = 0, None, []
    with httpx.stream("POST", url + "/v1/chat/completions", json={**body, "stream": True,
                      "stream_options": {"include_usage": True}}, timeout=3600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            if data.get("usage"):
                usage = data["usage"]
            elif data["choices"] and (text := _streamed(data["choices"][0]["delta"])):
                now = time.perf_counter()
                first = first or now
                last = now
                chunks += 1
                parts.append(text)
    if first is None:
        raise RuntimeError(f"no content streamed for {body['messages'][-1]['content']!r}")
    n = usage["completion_tokens"] if usage else chunks
    return {"ttft": first - start, "tps": (n - 1) / (last - first) if last > first else 0.0, "usage": usage,
            "chunks": chunks, "start": start, "first": first, "last": last, "text": "".join(parts), "tokens": n}


def _streamed(delta: dict) -> str:
    """A chunk's text: its content, or the arguments of the tool calls it streams."""
    return (delta.get("content") or "") + "".join((c.get("function") or {}).get("arguments") or ""
                                                  for c in delta.get("tool_calls") or ())


def slots(url: str, model: str) -> dict:
    """The model's entry in GET /health: slots, busy_slots, queued..."""
    health = httpx.get(url + "/health", timeout=60).json()
    return next(m for m in health["loaded"] if m["name"] == model)


def flush(url: str, model: str) -> None:
    """A short unrelated request in every slot at once (n = slots), so the next request finds
    nothing useful in any slot's KV cache. Two tokens: llama.cpp copies the shared prompt's
    cache streams at the next decode, which must be this request's, not the measured one's."""
    n = slots(url, model)["slots"]
    httpx.post(url + "/v1/chat/completions", timeout=600, json={
        "model": model, "messages": [{"role": "user", "content": "Unrelated."}], "max_tokens": 2,
        "n": n}).raise_for_status()


def wait_idle(url: str, model: str) -> None:
    """Until no slot of the model is busy and nothing waits (a cancelled stream stops within a step)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        s = slots(url, model)
        if not s["busy_slots"] and not s["queued"]:
            return
        time.sleep(0.02)
    raise RuntimeError(f"{model} still busy after 60 s: {s}")


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


def served_vs_direct(url: str, spec: ModelSpec, tokens: list[int], n: int, rounds: int, n_ctx: int,
                     threads: int) -> float:
    """One stream of PROMPT through the server against direct_decode; prints both, returns HTTP / direct."""
    body = {"model": spec.name, "messages": PROMPT, "max_tokens": n, "temperature": 0, "ignore_eos": True}
    direct, served = [], []
    for _ in range(rounds):
        direct.append(direct_decode(spec.file(), tokens, n, n_ctx, threads))
        flush(url, spec.name)
        served.append(http_stream(url, body))
    d_tps = statistics.median(t for _, t in direct)
    d_ttft = statistics.median(f for f, _ in direct)
    h_tps = statistics.median(s["tps"] for s in served)
    h_ttft = statistics.median(s["ttft"] for s in served)
    print(f"direct llama-cpp-python : {d_tps:6.1f} tok/s   ttft {d_ttft * 1000:6.1f} ms")
    print(f"localchat HTTP stream   : {h_tps:6.1f} tok/s   ttft {h_ttft * 1000:6.1f} ms   "
          f"({served[-1]['chunks']} SSE content chunks)")
    print(f"ratio HTTP / direct     : {h_tps / d_tps:6.3f}")
    return h_tps / d_tps


def story(model: str, n: int, tag: str) -> dict:
    """PROMPT with a tag at its end (streams share the prefix, not everything): n tokens, greedy, past EOS."""
    messages = [{"role": "user", "content": f"{PROMPT[0]['content']} ({tag})"}]
    return {"model": model, "messages": messages, "max_tokens": n, "temperature": 0, "ignore_eos": True}


def short(model: str, k: int) -> dict:
    """A ~16-token request; k leads the prompt so no slot holds more of it than the template's head."""
    return {"model": model, "messages": [{"role": "user", "content": f"{k}. Say hi."}], "max_tokens": 4,
            "temperature": 0, "ignore_eos": True}


def concurrent_streams(url: str, bodies: list[dict]) -> dict:
    """Stream the bodies at once, one thread each. Aggregate tok/s: the tokens after the first
    content token of any stream over the time from it to the last token of any stream."""
    with ThreadPoolExecutor(len(bodies)) as pool:
        runs = list(pool.map(lambda body: http_stream(url, body), bodies))
    tokens = sum(r["usage"]["completion_tokens"] for r in runs)
    window = max(r["last"] for r in runs) - min(r["first"] for r in runs)
    return {"tps": (tokens - 1) / window, "tokens": tokens, "ttft": max(r["ttft"] for r in runs)}


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


def tools_bench(spec: ModelSpec, rounds: int) -> None:
    """An agent's request: 100 tools, ~200 KB of schemas. Preparing it (checking every schema,
    rendering the prompt, building the grammar, tokenizing) the first time and the next times,
    when the compiled grammar and the tokens of the tool descriptions are reused."""
    from localchat.devtools.agent_tools import agent_tools, size

    from localchat.generation.constraints import OutputRules, ToolSpec
    from localchat.generation import ChatMessage, GenerationRequest
    from localchat.generation.prepare import prepare
    from localchat.grammars.metaschema import schema_problem

    tools = agent_tools()
    rules = OutputRules(tools=tuple(ToolSpec(t["function"]["name"], t["function"]["description"],
                                             t["function"]["parameters"]) for t in tools), tool_choice="auto")
    loaded = load_model(spec, settings=Settings(parallel=1, worker=False))
    messages = (ChatMessage.of("system", "You are a coding agent."), ChatMessage.of("user", "Fix the bug."))
    times = []
    for r in range(rounds + 1):
        start = time.perf_counter()
        assert all(schema_problem(t["function"]["parameters"]) is None for t in tools)
        prepared = prepare(GenerationRequest(messages=(*messages, ChatMessage.of("user", f"turn {r}")), output=rules),
                           loaded, None)
        times.append(time.perf_counter() - start)
    loaded.engine.close()
    print(f"model {spec.name}: {len(tools)} tools, {size(tools) / 1000:.0f} KB of schemas, "
          f"{len(prepared.generate.tokens)} prompt tokens")
    first, later = times[0] * 1000, statistics.median(times[1:]) * 1000
    print(f"prepared, first time : {first:7.1f} ms   (goal <= 1000 ms)  {'PASS' if first <= 1000 else 'MISS'}")
    print(f"prepared, next times : {later:7.1f} ms   (goal <= 50 ms)    {'PASS' if later <= 50 else 'MISS'}")


def lora_targets(path: Path) -> tuple[str, dict[str, tuple[int, int]]]:
    """The model's architecture and its attention weights' shapes (llama.cpp's order: n_in, n_out)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    arch = str(reader.fields["general.architecture"].contents())
    return arch, {t.name: (int(t.shape[0]), int(t.shape[1])) for t in reader.tensors
                  if t.name.endswith((".attn_q.weight", ".attn_v.weight"))}


def lora_bench(spec: ModelSpec, n: int, rounds: int) -> None:
    """Two streams at once: without adapters, both with one adapter, each with its own. llama.cpp
    applies adapters to the whole context, so two adapter sets decode in two batches a step."""
    from localchat.devtools.tinymodels import write_lora

    folder = Path(tempfile.mkdtemp(prefix="localchat-bench-lora-"))
    arch, targets = lora_targets(spec.file())
    loras = [write_lora(folder / f"lora-{k}.gguf", arch, targets, seed=k, rank=8, alpha=8.0, std=0.02)
             for k in (1, 2)]
    config = folder / "models.toml"
    config.write_text(f'[models.{spec.name}]\npath = "{spec.file()}"\n'
                      + (f"context_length = {spec.context_length}\n" if spec.context_length else "")
                      + "loras = [" + ", ".join(f'{{name = "{k}", path = "{p}", scale = 0}}'
                                                for k, p in zip(("one", "two"), loras)) + "]\n")
    cases = {"no adapter": (None, None), "one adapter, both": ("one", "one"), "two adapters": ("one", "two")}
    print(f"model {spec.name}: 2 streams at once, {n} tokens each, greedy, ignore_eos, rank-8 adapters on "
          f"{len(targets)} attention weights, {rounds} rounds (median)")
    server = Server(config, "--model", spec.name)
    try:
        url = server.url
        concurrent_streams(url, [{**story(spec.name, 8, f"warm-up {i}"), "lora": "one"} for i in range(2)])
        tps: dict[str, list[float]] = {k: [] for k in cases}
        for r in range(rounds):
            for label, choice in cases.items():
                wait_idle(url, spec.name)
                bodies = [{**story(spec.name, n, f"{label} {i}, round {r}"), "lora": [] if c is None else c}
                          for i, c in enumerate(choice)]
                tps[label].append(concurrent_streams(url, bodies)["tps"])
        agg = {k: statistics.median(v) for k, v in tps.items()}
        for label in cases:
            print(f"  {label:18}: {agg[label]:6.1f} tok/s aggregate   x{agg[label] / agg['no adapter']:5.2f} "
                  "the no-adapter aggregate")
        print(f"mixing two adapters / one adapter: {agg['two adapters'] / agg['one adapter, both']:.3f} "
              "(the cost of a batch per adapter set)")
    finally:
        server.stop()


def vision_bench(config: Path, spec: ModelSpec, rounds: int) -> None:
    """Time to first token of a short question alone, with a new 640×480 image, and with the
    same image again (read from the slot's prompt cache)."""
    import numpy as np
    from PIL import Image

    if spec.mmproj is None:  # the tiny model and projector the tests use
        from localchat.families import FAMILIES
        from localchat.devtools.tinymodels import write_tiny_mmproj, write_tiny_model

        folder = Path(tempfile.mkdtemp(prefix="localchat-bench-vision-"))
        model = write_tiny_model(folder / "tiny-vision.gguf", FAMILIES["gemma"], n_ctx=2048,
                                 extra=("<start_of_image>", "<end_of_image>"))
        mmproj = write_tiny_mmproj(folder / "tiny-vision-mmproj.gguf")
        config = folder / "models.toml"
        config.write_text(f'[models.tiny-vision]\npath = "{model}"\nmmproj = "{mmproj}"\ncontext_length = 2048\n')
        name = "tiny-vision"
    else:
        name = spec.name

    def image(seed: int) -> str:
        pixels = np.random.default_rng(seed).integers(0, 256, (480, 640, 3), dtype=np.uint8)
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, "JPEG", quality=90)
        return "data:image/jpeg;base64," + __import__("base64").b64encode(out.getvalue()).decode()

    def body(k: int, url: str | None) -> dict:
        parts = [{"type": "text", "text": f"{k}. What is in this picture?"}]
        parts += [{"type": "image_url", "image_url": {"url": url}}] if url else []
        return {"model": name, "messages": [{"role": "user", "content": parts}], "max_tokens": 4,
                "temperature": 0, "ignore_eos": True}

    server = Server(config, "--model", name)
    try:
        http_stream(server.url, body(-1, image(1000)))  # warm-up
        runs: dict[str, list[dict]] = {"text only": [], "a new image": [], "the same image again": []}
        for r in range(rounds):
            url = image(r)
            for label, b in (("text only", body(2 * r, None)), ("a new image", body(2 * r + 1, url)),
                             ("the same image again", body(2 * r + 1, url))):
                wait_idle(server.url, name)
                runs[label].append(http_stream(server.url, b))
        print(f"model {name}: a 640×480 JPEG in a short question, {rounds} rounds (median)")
        for label, rs in runs.items():
            u = rs[-1]["usage"]
            print(f"  {label:22}: ttft {statistics.median(x['ttft'] for x in rs) * 1000:7.1f} ms   prompt "
                  f"{u['prompt_tokens']} tokens, {u['prompt_tokens_details']['cached_tokens']} cached")
        extra = runs["a new image"][-1]["usage"]["prompt_tokens"] - runs["text only"][-1]["usage"]["prompt_tokens"]
        print(f"an image costs {extra} prompt tokens (its own and the model's markers around it)")
    finally:
        server.stop()


# -- --agent: an agent's long prompt, read once -----------------------------------------------

AGENT_TOOLS = [{"type": "function", "function": {
    "name": f"tool_{i}", "description": f"Tool {i}: reads, edits or searches files in group {i} and reports what it found.",
    "parameters": {"type": "object", "properties": {
        "path": {"type": "string", "description": "Absolute path of the file."},
        "pattern": {"type": "string", "description": "What to look for."},
        "limit": {"type": "integer", "minimum": 1, "description": "At most this many results."}},
        "required": ["path"]}}} for i in range(24)]


def agent_body(model: str, session: str, moved: bool = False, turns: tuple = ()) -> dict:
    """An agent-like request of ~10k tokens: ~6k of instructions, 24 tools, an environment block
    (~1.5k tokens) before the user's task, or after it with `moved` (Claude Code's order); each
    session's task is of another length."""
    rules = "\n".join(f"{i}. When a task touches file group {i}, read the files first, keep the style you find, "
                      f"make the smallest change that works, run the tests for group {i}, and say what changed."
                      for i in range(140))
    env = "<environment>\n" + "\n".join(f"  <file path=\"src/module_{i}.py\" lines=\"{100 + i}\" />"
                                         for i in range(90)) + "\n</environment>"
    task = f"Session {session}: find where the configuration is parsed and explain it" + " in detail" * len(session) + "."
    user = f"{task}\n\n{env}" if moved else f"{env}\n\n{task}"
    return {"model": model, "temperature": 0, "max_tokens": 1, "tools": AGENT_TOOLS,
            "messages": [{"role": "system", "content": "You are a coding agent.\n" + rules},
                         {"role": "user", "content": user}, *turns]}


def claude_code_body(model: str, session: str) -> dict:
    """The same agent prompt as Claude Code (2.1.3xx) sends it on /v1/messages: the instructions
    as the system prompt, the tools, the user's task, then the environment block as a system
    message *after* it (Anthropic's mid-conversation system messages)."""
    body = agent_body(model, session)
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    env, task = user.split("\n\n", 1)
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in AGENT_TOOLS]
    return {"model": model, "temperature": 0, "max_tokens": 1, "system": system, "tools": tools,
            "messages": [{"role": "user", "content": task}, {"role": "system", "content": env}]}


def timed(url: str, body: dict) -> tuple[float, dict]:
    start = time.perf_counter()
    anthropic = "system" in body  # a Messages request (claude_code_body); its usage in chat's words
    r = httpx.post(url + ("/v1/messages" if anthropic else "/v1/chat/completions"), json=body, timeout=3600,
                   headers={"anthropic-version": "2023-06-01"})
    r.raise_for_status()
    usage = r.json().get("usage") or {}
    if anthropic:
        cached = usage.get("cache_read_input_tokens") or 0
        usage = {"prompt_tokens": (usage.get("input_tokens") or 0) + cached,
                 "prompt_tokens_details": {"cached_tokens": cached}}
    return time.perf_counter() - start, usage


def agent_cases(url: str, model: str, restart: Callable[[], str] | None, unload: Callable[[], None] | None):
    """(case, seconds, usage) for each case, in order; a case the server cannot do is None."""
    out = []
    seconds, usage = timed(url, agent_body(model, "A"))
    out.append(("cold", seconds, usage))
    turn = agent_body(model, "A", turns=({"role": "assistant", "content": "I will look at the parser."},
                                         {"role": "user", "content": "Go on."}))
    out.append(("next turn", *timed(url, turn)))
    out.append(("new session", *timed(url, agent_body(model, "B"))))
    if restart is not None:
        url = restart()
        out.append(("after a restart", *timed(url, agent_body(model, "C"))))
    else:
        out.append(("after a restart", None, {}))
    if unload is not None:
        unload()
        out.append(("after an unload", *timed(url, agent_body(model, "D"))))
    else:
        out.append(("after an unload", None, {}))
    timed(url, agent_body(model, "EE", moved=True))  # the environment block after the task, once
    out.append(("env block moved", *timed(url, agent_body(model, "F", moved=True))))
    try:  # as Claude Code sends it: the block a system message after the task (one session first)
        timed(url, claude_code_body(model, "GG"))
        out.append(("env after, Claude", *timed(url, claude_code_body(model, "H"))))
    except httpx.HTTPError:  # a server without Anthropic's route or its late system messages
        out.append(("env after, Claude", None, {}))
    return out


def agent_bench(config: Path, spec: ModelSpec) -> None:
    import os

    folder = Path(tempfile.mkdtemp(prefix="localchat-bench-prompts-"))
    os.environ["LOCALCHAT_PROMPT_CACHE_DIR"] = str(folder)  # a cold cache for this run
    state = {"server": Server(config, "--model", spec.name)}

    def restart() -> str:
        state["server"].stop()
        state["server"] = Server(config, "--model", spec.name)
        return state["server"].url

    def unload() -> None:
        httpx.post(state["server"].url + "/api/generate", json={"model": spec.name, "keep_alive": 0},
                   timeout=120).raise_for_status()

    try:
        ours = agent_cases(state["server"].url, spec.name, restart, unload)
    finally:
        state["server"].stop()
    theirs = None
    if os.environ.get("LLAMA_SERVER"):
        their = LlamaServer(spec, "-c", str(4 * 32768), "-np", "4", "--cache-reuse", "256", "--cache-ram", "8192")

        def restart_theirs() -> str:
            their.stop()
            their.start()
            return their.url

        try:
            theirs = agent_cases(their.url, spec.name, restart_theirs, None)
        finally:
            their.stop()
    cold = ours[0][1]
    print(f"model {spec.name}: an agent's prompt of {ours[0][2].get('prompt_tokens')} tokens, 24 tools; "
          "time to first token (goal: <= 5% of cold for all but cold and the moved block: "
          "the last message is read from its first difference)")
    print(f"{'case':18} {'localchat':>10} {'cached':>7} {'of cold':>8}  {'llama-server':>12} {'ratio':>6}  goal")
    for i, (case, seconds, usage) in enumerate(ours):
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        if seconds is None:
            print(f"{case:18} {'-':>10}")
            continue
        share = seconds / cold
        them = theirs[i][1] if theirs else None
        ratio = f"{them / seconds:5.1f}x" if them else "     -"
        # the block after the task in the last message: read from the message's first difference, by design
        goal = "" if case in ("cold", "env block moved") else ("PASS" if share <= 0.05 else "FAIL")
        print(f"{case:18} {seconds:9.2f}s {cached:7} {share:7.1%}  "
              f"{(f'{them:11.2f}s' if them else '           -')} {ratio}  {goal}")


# -- --edit: a file returned with one rename, drafts from the text --------------------------------

def edit_file() -> str:
    """A 121-line Python module (settings loading and checking), the same every run."""
    out = ['"""Configuration: read, check and merge the settings of a small service."""', "",
           "from __future__ import annotations", "", "import json", "import os", "from pathlib import Path", ""]
    for i in range(10):
        out += ["", f"def check_{i}(settings: dict) -> list[str]:",
                f'    """Problems with the settings of part {i}."""',
                "    problems = []",
                f'    value = settings.get("part_{i}", {{}})',
                '    if not isinstance(value, dict):',
                f'        problems.append("part_{i} must be a table")',
                f'    elif value.get("size", 0) > {100 * (i + 1)}:',
                f'        problems.append("part_{i}.size is over {100 * (i + 1)}")',
                "    return problems"]
    out += ["", "", "def load_config(path: Path) -> dict:", '    """The settings in a JSON file, with defaults."""',
            "    settings = json.loads(path.read_text())",
            '    settings.setdefault("name", os.environ.get("SERVICE_NAME", "service"))',
            "    problems = [p for check in CHECKS for p in check(settings)]",
            "    if problems:", '        raise ValueError("; ".join(problems))', "    return settings", "",
            "", "CHECKS = [" + ", ".join(f"check_{i}" for i in range(10)) + "]"]
    return "\n".join(out) + "\n"


def pinned_source(name: str) -> str:
    """A module of llama-cpp-python, which pyproject.toml pins (0.3.36): the same text on every machine."""
    import hashlib

    path = Path(C.__file__).parent / name
    text = path.read_text()
    want = PINNED_SOURCES[name]
    if hashlib.sha256(text.encode()).hexdigest()[:16] != want:
        raise SystemExit(f"{path} is not llama-cpp-python 0.3.36's {name} (sha256 {want}...): the --edit cases "
                         "need the pinned version")
    return text


PINNED_SOURCES = {"llama_cache.py": "fe9e5fdad7c3e67e", "llama_tokenizer.py": "482e57da563dd537"}
RENAME = ("Rename the {what} `{old}` to `{new}` everywhere in this file and return the whole file, every line "
          "of it. Output only the code.\n\n```python\n{text}```")
FILE_TOOLS = [{"type": "function", "function": {
    "name": name, "description": what, "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, **({"content": {"type": "string"}} if both else {})},
        "required": ["path", *(["content"] if both else [])]}}}
    for name, what, both in (("read_file", "Read a file of the project.", False),
                             ("write_file", "Write a whole file of the project (every line of it).", True))]


def edit_messages(case: str) -> tuple[list[dict], dict]:
    """The conversation of an --edit case, and the request's other fields.
    module: a real module (llama-cpp-python's llama_cache.py, 155 lines) with a method renamed (7 lines touched);
    synthetic: edit_file(), ten near-identical blocks that differ in their digits (every few tokens a match breaks);
    patch: the file read by a tool call earlier in the conversation, written back whole in a forced write_file call
    (its content a JSON string, as Claude Code's Write and Codex's apply_patch write it);
    prose: an explanation, nothing to copy."""
    if case == "module":
        return [{"role": "user", "content": RENAME.format(what="method", old="_find_longest_prefix_key",
                                                          new="_longest_prefix", text=pinned_source("llama_cache.py"))}], {}
    if case == "synthetic":
        return [{"role": "user", "content": RENAME.format(what="variable", old="settings", new="config",
                                                          text=edit_file())}], {}
    if case == "patch":
        path = "llama_cpp/llama_tokenizer.py"
        call = {"id": "call_1", "type": "function", "function": {"name": "read_file",
                                                                 "arguments": json.dumps({"path": path})}}
        return [{"role": "user", "content": f"In {path}, rename `hf_tokenizer` to `tokenizer` everywhere, then write "
                                            "the whole file back."},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": pinned_source("llama_tokenizer.py")}], \
            {"tools": FILE_TOOLS, "tool_choice": {"type": "function", "function": {"name": "write_file"}}}
    if case == "prose":
        return [{"role": "user", "content": "Explain in detail how a CPU's memory caches work: the levels, lines, "
                                            "associativity, write policies and coherence between cores."}], {}
    raise ValueError(case)


EDIT_CASES = ("module", "synthetic", "patch", "prose")


def edit_body(model: str, n: int, draft: int | None, case: str = "synthetic") -> dict:
    messages, extra = edit_messages(case)
    body = {"model": model, "temperature": 0, "max_tokens": n, "messages": messages, **extra}
    if draft is not None:
        body["ngram_draft"] = draft
    return body


# Two tokens this close in log-probability may swap places between batch sizes (see parting): over 256
# tokens of the 1.5B's prose here, the margin between the two best tokens moved by up to 0.45 (median
# 0.07) between a batch of 1 and batches of 4, 16 and 64.
TIE = 0.45
PROSE_2 = [{"role": "user", "content": "Explain how a compiler turns source code into machine code: parsing, "
                                        "intermediate forms, optimization passes, register allocation."}]


def step_costs(spec: ModelSpec, threads: int, wait: float = 180.0) -> str:
    """This machine's step costs as the server measured them (engine/drafting/draft_cost.py): it measures
    while idle and keeps them in the cache folder; waits for them up to `wait` seconds."""
    from localchat.engine.drafting import draft_cost
    from localchat.models.paths import step_costs_file

    key = draft_cost.machine_key(spec.file(), threads, spec.gpu_layers)
    deadline = time.monotonic() + wait
    while (cost := draft_cost.load(step_costs_file(), key)) is None and time.monotonic() < deadline:
        time.sleep(1)
    return cost.describe() if cost else "not measured yet (the stand-in CPU figures were used)"


def edit_bench(config: Path, spec: ModelSpec, n: int, draft_model: str | None = None, rounds: int = 3) -> None:
    """--edit: each case without drafts and with them (the default), the text compared; llama-server
    --spec-type ngram-mod on the same requests when LLAMA_SERVER is set; four streams at once."""
    import os

    threads = spec.threads or os.cpu_count() or 1
    four = [edit_body(spec.name, n, None, case) for case in ("module", "synthetic", "prose")] + \
        [{**edit_body(spec.name, n, None, "prose"), "messages": PROSE_2}]
    theirs: dict[str, dict] = {}
    if os.environ.get("LLAMA_SERVER"):
        their = LlamaServer(spec, "-c", "8192", "-np", "1", "--spec-type", "ngram-mod")
        try:
            for case in EDIT_CASES:
                http_stream(their.url, edit_body(spec.name, 8, None, case))
                theirs[case] = http_stream(their.url, edit_body(spec.name, n, None, case))
        finally:
            their.stop()

    ours: dict[str, tuple[dict, dict]] = {}
    partings: dict[str, str] = {}
    server = Server(config, "--model", spec.name, "-c", "8192", "-np", "4")
    try:
        costs = step_costs(spec, threads)
        for case in EDIT_CASES:
            http_stream(server.url, edit_body(spec.name, 8, 0, case))  # the prompt read once, cached for both runs
            tries = rounds if case == "prose" else 1  # prose's goal is a few per cent: the best of a few runs
            runs = [(http_stream(server.url, edit_body(spec.name, n, 0, case)),
                     _logged(server, http_stream(server.url, edit_body(spec.name, n, None, case))))
                    for _ in range(tries)]
            ours[case] = (max((r[0] for r in runs), key=lambda r: r["tps"]),
                          max((r[1] for r in runs), key=lambda r: r["tps"]))
            if ours[case][0]["text"] != ours[case][1]["text"]:
                partings[case] = parting(server.url, edit_body(spec.name, n, None, case))
        # the module case again with the file as the prediction (OpenAI's Predicted Outputs), as a client sends it
        predicted = _logged(server, http_stream(server.url, {**edit_body(spec.name, n, None, "module"),
                                                             "prediction": {"type": "content",
                                                                            "content": pinned_source("llama_cache.py")}}))
        http_stream(server.url, {**four[3], "max_tokens": 8, "ngram_draft": 0})
        alone = http_stream(server.url, {**four[3], "ngram_draft": 0})
        together_plain = _together(server.url, [{**b, "ngram_draft": 0} for b in four])
        together = _together(server.url, four)
    finally:
        server.stop()
    by_model = None
    if draft_model:  # the same with a draft model (docs/operations.md "Drafts from a smaller model")
        server = Server(config, "--model", spec.name, "--draft-model", draft_model)
        try:
            http_stream(server.url, edit_body(spec.name, 8, None, "module"))  # both models read the prompt once
            by_model = http_stream(server.url, edit_body(spec.name, n, None, "module"))
        finally:
            server.stop()
    print(f"model {spec.name}: {n} tokens a case, greedy; tok/s without drafts, with them (the default), and "
          f"llama-server --spec-type ngram-mod")
    print(f"this machine's step costs (k tokens: x one token's): {costs}")
    print(f"{'case':10s} {'no drafts':>9s} {'drafts':>7s} {'ratio':>6s} {'kept/drafted':>13s} {'same':>5s} "
          f"{'llama-server':>12s} {'ours/theirs':>11s}  goals")
    for case in EDIT_CASES:
        plain, drafted = ours[case]
        ratio = drafted["tps"] / plain["tps"] if plain["tps"] else 0.0
        same = plain["text"] == drafted["text"]
        their = theirs.get(case)
        versus = drafted["tps"] / their["tps"] if their and their["tps"] else None
        tie = partings.get(case, ("", None))[1]
        goals = [("identical", same)] if tie is None else [(f"identical up to a near-tie (< {TIE})", tie < TIE)]
        if case == "prose":
            goals.append(("drafts >= 0.97x none", ratio >= 0.97))
        else:
            if case != "synthetic":
                goals.append(("drafts >= 2.0x none", ratio >= 2.0))
            if versus is not None:
                goals.append(("drafts >= llama-server", versus >= 1.0))
        print(f"{case:10s} {plain['tps']:9.1f} {drafted['tps']:7.1f} {ratio:5.2f}x {drafted.get('drafts', '-'):>13s} "
              f"{'yes' if same else 'NO':>5s} {their['tps'] if their else float('nan'):12.1f} "
              f"{f'{versus:.2f}x' if versus is not None else '-':>11s}  "
              + ", ".join(f"{name} {'PASS' if ok else 'FAIL'}" for name, ok in goals))
    for case, (why, _) in partings.items():
        print(f"  {case}: {why}")
    plain, drafted = ours["module"]
    details = (predicted["usage"] or {}).get("completion_tokens_details") or {}
    goals = [("identical", predicted["text"] == plain["text"]), (">= 2.0x none", predicted["tps"] >= 2 * plain["tps"]),
             (">= drafts from the prompt", predicted["tps"] >= drafted["tps"])]
    print(f"module with the file as the prediction: {predicted['tps']:.1f} tok/s  "
          f"{predicted['tps'] / plain['tps'] if plain['tps'] else 0.0:.2f}x none, "
          f"{predicted['tps'] / drafted['tps'] if drafted['tps'] else 0.0:.2f}x drafts from the prompt; kept/drafted "
          f"{predicted['drafts']}; prediction accepted {details.get('accepted_prediction_tokens')}, rejected "
          f"{details.get('rejected_prediction_tokens')}  " + ", ".join(f"{g} {'PASS' if ok else 'FAIL'}" for g, ok in goals))
    total_plain = _total(together_plain)
    total = _total(together)
    print(f"four streams at once (module, synthetic, two prose): {total_plain:.1f} tok/s without drafts, {total:.1f} with "
          f"them: {total / total_plain:.2f}x (goal >= 1)  {'PASS' if total >= total_plain else 'FAIL'}")
    for name, a, b in zip(("module", "synthetic", "prose", "prose 2"), together_plain, together):
        slower = _per_token(b) / _per_token(a)
        print(f"  {name:10s} ms/token {1000 * _per_token(a):6.1f} without drafts, {1000 * _per_token(b):6.1f} with: "
              f"{slower:.2f}x (goal <= 1.5x)  {'PASS' if slower <= 1.5 else 'FAIL'}; {b['tokens']} tokens "
              f"({a['tokens']} without drafts)")
    print(f"  (prose 2 alone, without drafts: {1000 * _per_token(alone):.1f} ms/token; four streams share 2 cores)")
    if by_model is not None:
        plain = ours["module"][0]
        model_same = by_model["text"] == plain["text"]
        print(f"draft model {draft_model} (module): {by_model['tps']:6.1f} tok/s   "
              f"{by_model['tps'] / plain['tps'] if plain['tps'] else 0.0:.2f}x without drafts; identical text: "
              f"{'yes' if model_same else 'NO'}   {'PASS' if model_same else 'FAIL'}")


def edit_record(config: Path, spec: ModelSpec, n: int, path: Path) -> None:
    """The prompt's and the greedy answer's token ids of the module, patch and prose cases, without
    drafts; for the patch (a tool call), the prompt as a JSON string writes it, tokenized, too."""
    from localchat.engine.drafting.drafts import json_view

    out = {}
    server = Server(config, "--model", spec.name)
    try:
        def tokens(text: str, special: bool) -> list[int]:
            return httpx.post(server.url + "/tokenize", timeout=600, json={
                "model": spec.name, "content": text, "add_special": False, "parse_special": special}).json()["tokens"]

        @functools.lru_cache(maxsize=None)
        def piece(token: int) -> bytes:
            return httpx.post(server.url + "/detokenize", timeout=600, json={"model": spec.name, "tokens": [token]}).json()[
                "content"].encode()
        for case in ("module", "patch", "prose"):
            body = edit_body(spec.name, n, 0, case)
            answer = httpx.post(server.url + "/v1/chat/completions", timeout=3600, json={
                **body, "logprobs": True, "top_logprobs": 0, "return_tokens_as_token_ids": True}).json()
            ids = [int(t["token"].split(":")[1]) for t in answer["choices"][0]["logprobs"]["content"]]
            shaped = {k: body[k] for k in ("messages", "tools") if k in body}
            prompt = tokens(httpx.post(server.url + "/apply-template", timeout=600,
                                       json={"model": spec.name, **shaped}).json()["prompt"], True)
            out[case] = {"prompt": prompt, "output": ids}
            if case == "patch":
                out[case]["view"] = json_view(prompt, piece, lambda b: tokens(b.decode(), False))
            print(f"{case}: {len(prompt)} prompt tokens, {len(ids)} written", flush=True)
    finally:
        server.stop()
    path.write_text(json.dumps({"model": spec.name, "tokens": n, **out}, separators=(",", ":")) + "\n")


def parting(url: str, body: dict) -> tuple[str, float | None]:
    """Where greedy text with drafts parts from the text without them, and how close the two best
    tokens were there: the same request twice more, with log-probabilities (not timed). A step that
    verifies a draft decodes several tokens in one batch, and llama.cpp's CPU kernels sum a batch of
    1, of 2-7 and of 8+ tokens in other orders (logits apart by up to ~0.5 here), so a near-tie can
    fall the other way."""
    def run(draft: int | None) -> list[dict]:
        extra = {"ngram_draft": draft} if draft is not None else {}
        answer = httpx.post(url + "/v1/chat/completions", timeout=3600, json={
            **body, **extra, "stream": False, "logprobs": True, "top_logprobs": 2}).json()
        return answer["choices"][0]["logprobs"]["content"] or []
    plain, drafted = run(0), run(None)
    at = next((i for i, (a, b) in enumerate(zip(plain, drafted)) if a["token"] != b["token"]), None)
    if at is None:
        return "parted where no log-probabilities are given (a tool call's arguments)", None
    top = plain[at]["top_logprobs"]
    margin = top[0]["logprob"] - top[1]["logprob"] if len(top) > 1 else float("inf")
    return (f"parted at token {at}: {plain[at]['token']!r} without drafts, {drafted[at]['token']!r} with them; "
            f"the two best tokens {margin:.3f} apart in log-probability there"), margin


def _together(url: str, bodies: list[dict]) -> list[dict]:
    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda body: http_stream(url, body), bodies))


def _total(runs: list[dict]) -> float:
    tokens = sum(r["tokens"] for r in runs)
    return (tokens - len(runs)) / (max(r["last"] for r in runs) - min(r["first"] for r in runs))


def _per_token(run: dict) -> float:
    return (run["last"] - run["first"]) / max(run["tokens"] - 1, 1)


def _logged(server: Server, run: dict) -> dict:
    """The run, with what the access log says of its drafts (drafts=KEPT/DRAFTED)."""
    import re

    time.sleep(0.2)
    lines = [line for line in server.output().splitlines() if "POST /v1/chat/completions" in line]
    found = re.search(r"drafts=(\d+/\d+)", lines[-1]) if lines else None
    return {**run, "drafts": found.group(1) if found else "0/0"}


# -- --long: decode speed with a long context ------------------------------------------------------

def long_body(model: str, context: int, n: int) -> dict:
    """A chat request whose prompt is about `context` tokens of code (the edit file, repeated with
    other names), then n tokens to write, greedy, past any end of turn, no drafts."""
    files, size = [], 0
    while size < context * 2.4:  # ~2.4 characters a token of this code for Qwen's vocabulary (measured)
        text = edit_file().replace("check_", f"check{len(files)}_")
        files.append(f"# file {len(files)}\n{text}")
        size += len(text)
    return {"model": model, "temperature": 0, "max_tokens": n, "ignore_eos": True, "ngram_draft": 0,
            "messages": [{"role": "user", "content": "\n".join(files) + "\nExplain what these files do."}]}


def long_run(url: str, model: str, contexts: tuple[int, ...], n: int) -> list[dict]:
    out = []
    for context in contexts:
        body = long_body(model, context, n)
        http_stream(url, {**body, "max_tokens": 1})  # the prompt read once; the decode is what is measured
        out.append(http_stream(url, body))
    return out


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


# -- --decode: a chat answer's decode speed, side by side with llama-server ---------------------------

def decode_bench(config: Path, spec: ModelSpec, n: int, rounds: int) -> None:
    """The shipped default answering a prose question, n tokens greedy past any end of turn: localchat
    with its drafts (the default) and without (ngram_draft 0), and llama-server on the same GGUF
    with its defaults, as people start it (`llama-server -m FILE`: no drafts), the three one after
    another in each round,
    so a machine's drift lands on all three. Goal: localchat (drafts on) >= llama-server."""
    import os
    import statistics

    body = {**story(spec.name, n, "decode"), "cache_prompt": True}
    server = Server(config, "--model", spec.name)
    their = LlamaServer(spec) if os.environ.get("LLAMA_SERVER") else None  # (its defaults, as people start it)
    runs: dict[str, list[float]] = {"localchat": [], "localchat, no drafts": [], "llama-server": []}
    try:
        for url in (server.url, *([their.url] if their else [])):
            http_stream(url, {**body, "max_tokens": 8})  # warm: the prompt read once, the model's pages in
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


# -- --kv: quantized K/V cache cells (cache_type_k / cache_type_v) -----------------------------

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


# -- --fim: an editor's completion requests (llama.vscode's shape) -------------------------------

def fim_bodies(model: str, keystrokes: int) -> list[dict]:
    """llama.vscode's /infill requests while someone types a line: 16 chunks of other files as
    `input_extra`, the lines above the cursor, the typed part of the line as `prompt`, the rest
    below; n_predict 128, t_max_predict_ms 500, n_indent, its samplers; one request a keystroke."""
    lines = edit_file().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "problems = [p for check" in line)
    typed = "    problems = [p for check in CHECKS for p in check(settings)]"
    chunks = [{"filename": f"service/part_{k}.py",
               "text": "".join(edit_file().replace("check_", f"part{k}_").splitlines(keepends=True)[k * 6:k * 6 + 32])}
              for k in range(16)]
    base = {"model": model, "input_prefix": "".join(lines[:at]), "input_suffix": "\n" + "".join(lines[at + 1:]),
            "input_extra": chunks, "n_predict": 128, "top_k": 40, "top_p": 0.99, "stream": False,
            "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True, "t_max_prompt_ms": 500,
            "t_max_predict_ms": 500, "n_indent": 4, "seed": 1}
    return [{**base, "prompt": typed[:len("    problems = ") + k]} for k in range(keystrokes + 1)]


def fim_run(url: str, bodies: list[dict]) -> list[tuple[float, dict]]:
    out = []
    for body in bodies:
        start = time.perf_counter()
        r = httpx.post(url + "/infill", json=body, timeout=3600)
        r.raise_for_status()
        out.append((time.perf_counter() - start, r.json()))
    return out


def fim_bench(config: Path, specs: list[ModelSpec], keystrokes: int) -> None:
    import os

    os.environ["LOCALCHAT_PROMPT_CACHE_DIR"] = tempfile.mkdtemp(prefix="localchat-bench-prompts-")  # cold is cold
    print(f"llama.vscode's /infill requests: 16 chunks of context, n_predict 128, t_max_predict_ms 500; "
          f"a cold request, then {keystrokes} keystrokes (goal: p50 <= llama-server's)")
    print(f"{'model':20} {'server':13} {'cold':>7} {'p50':>7} {'max':>7} {'tokens':>7} {'cached':>7}")
    for spec in specs:
        bodies = fim_bodies(spec.name, keystrokes)
        runs = {}
        server = Server(config, "--model", spec.name)
        try:
            runs["localchat"] = fim_run(server.url, bodies)
        finally:
            server.stop()
        if os.environ.get("LLAMA_SERVER"):  # as llama.vscode's README starts it
            their = LlamaServer(spec, "-c", "16384", "-np", "1", "-ub", "1024", "-b", "1024", "--cache-reuse", "256")
            try:
                runs["llama-server"] = fim_run(their.url, bodies)
            finally:
                their.stop()
        p50 = {}
        for name, run in runs.items():
            warm = [seconds for seconds, _ in run[1:]]
            p50[name] = statistics.median(warm)
            tokens = statistics.median(answer.get("tokens_predicted", 0) for _, answer in run[1:])
            cached = statistics.median(answer.get("tokens_cached", 0) for _, answer in run[1:])
            print(f"{spec.name:20} {name:13} {run[0][0]:6.2f}s {p50[name]:6.2f}s {max(warm):6.2f}s "
                  f"{tokens:7.0f} {cached:7.0f}")
        if "llama-server" in p50:
            ratio = p50["llama-server"] / p50["localchat"] if p50["localchat"] else 0.0
            print(f"{spec.name:20} p50 llama-server/localchat {ratio:.2f}x  {'PASS' if ratio >= 1 else 'FAIL'}")


# -- --upstream: a model served through another localchat ------------------------------------------

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


class LlamaServer:
    """llama-server (the binary LLAMA_SERVER names) on the same GGUF, on a free port, with these flags."""

    def __init__(self, spec: ModelSpec, *flags: str) -> None:
        import os

        from localchat.serve_process import free_port
        self.url = ""
        self.argv = [os.environ["LLAMA_SERVER"], "-m", str(spec.file()), "--port", str(free_port()), "--jinja",
                     "-t", str(spec.threads or os.cpu_count()), *flags]
        self.log = tempfile.NamedTemporaryFile("w+", prefix="llama-server-", suffix=".log")
        self.start()

    def start(self) -> None:
        import subprocess

        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.argv[self.argv.index('--port') + 1]}"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        if self.proc.returncode == -4 and "--no-repack" not in self.argv:
            # SIGILL: ggml's AMX kernels (weight repacking) on a VM whose CPU reports AMX (seen here, Intel Xeon):
            # repacking off, as localchat runs (use_extra_bufts = False)
            print("llama-server: illegal instruction with weight repacking (AMX?); again with --no-repack", file=sys.stderr)
            self.argv.append("--no-repack")
            return self.start()
        self.log.seek(0)
        raise RuntimeError("llama-server did not come up: " + self.log.read()[-2000:])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", default=None)
    ap.add_argument("--config", type=Path, default=None)
    ap.add_argument("--json-schema", action="store_true", help="constrained against free decoding")
    ap.add_argument("--decode", action="store_true",
                    help="a chat answer's decode tok/s, drafts on and off, beside llama-server's (LLAMA_SERVER)")
    ap.add_argument("--concurrency", action="store_true",
                    help="1, 2 and 4 streams at once; a short request's ttft during a long stream")
    ap.add_argument("--tools", action="store_true", help="preparing an agent's 100-tool, 200 KB request")
    ap.add_argument("--lora", action="store_true", help="two streams with one LoRA adapter against two adapters")
    ap.add_argument("--vision", action="store_true", help="what an image costs: prompt tokens, time to first token")
    ap.add_argument("--edit", action="store_true",
                    help="a file returned with one rename: decode tok/s with and without drafts from the text")
    ap.add_argument("--draft-model", default=None, help="with --edit: also with this model drafting (same vocabulary)")
    ap.add_argument("--record", type=Path, default=None,
                    help="with --edit: only write the prompt's and the greedy answer's token ids of each case to this "
                         "file (tests/fixtures/drafts-*.json, which tests/test_draft_replay.py replays)")
    ap.add_argument("--agent", action="store_true",
                    help="an agent's 10k-token prompt: cold, next turn, new session, restart, unload, moved block")
    ap.add_argument("--upstream", action="store_true", help="tok/s and ttft through an upstream localchat against direct")
    ap.add_argument("--long", action="store_true", help="decode tok/s after 2k and 8k tokens of prompt")
    ap.add_argument("--kv", action="store_true", help="f16, q8_0 and q4_0 K/V cells: fitted context, decode tok/s "
                    "at 8k, log-probabilities against f16")
    ap.add_argument("--fim", action="store_true", help="llama.vscode's /infill requests while typing: p50 latency")
    ap.add_argument("--worker", action="store_true",
                    help="the worker process (the default) against llama.cpp inside the server (--in-process)")
    ap.add_argument("--rpc", action="store_true",
                    help="all layers on an rpc-worker across a veth pair against the model loaded directly")
    args = ap.parse_args()

    config = (args.config or shipped_config()).resolve()
    registry = Registry.load(config)
    spec = registry.resolve(args.model)
    if args.lora:
        return lora_bench(spec, args.tokens, args.rounds)
    if args.vision:
        return vision_bench(config, spec, args.rounds)
    if args.agent:
        return agent_bench(config, spec)
    if args.rpc:
        return rpc_bench(spec, args.tokens, args.rounds)
    if args.upstream:
        return upstream_bench(config, spec, args.tokens, args.rounds)
    if args.decode:
        return decode_bench(config, spec, args.tokens, args.rounds)
    if args.long:
        return long_bench(config, spec, args.tokens if args.tokens != 256 else 128)
    if args.kv:
        return kv_bench(config, registry.resolve(args.model or "qwen2.5-coder-0.5b"), args.tokens if args.tokens != 256 else 64)
    if args.fim:
        names = [args.model] if args.model else ["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"]
        return fim_bench(config, [registry.resolve(name) for name in names], 10)
    if args.edit:
        spec = registry.resolve(args.model or "qwen2.5-coder-1.5b")
        n = args.tokens if args.tokens != 256 else 1200
        if args.record:
            return edit_record(config, spec, n, args.record)
        return edit_bench(config, spec, n, args.draft_model)
    # only to render and tokenize the prompt exactly as the server does (one slot: a small context)
    loaded = load_model(spec, settings=Settings(parallel=1, worker=False))
    prompt = render_prompt(loaded.template, PROMPT, bos_token=loaded.bos_token, eos_token=loaded.eos_token)
    tokens = loaded.engine.tokenizer.tokenize(prompt.segments)
    n_ctx, threads = loaded.engine.n_ctx, spec.threads or __import__("os").cpu_count()
    loaded.engine.close()

    if args.json_schema:
        return json_schema_bench(config, spec.name, args.rounds)
    if args.concurrency:
        return concurrency_bench(config, spec, tokens, args.tokens, args.rounds, n_ctx, threads)
    if args.worker:
        return worker_bench(config, spec, args.tokens, args.rounds)
    if args.tools:
        return tools_bench(spec, args.rounds)
    print(f"model {spec.name}: {len(tokens)} prompt tokens, {args.tokens} generated, greedy, "
          f"{threads} threads, {args.rounds} rounds (median)")
    server = Server(config, "--model", spec.name)
    try:
        served_vs_direct(server.url, spec, tokens, args.tokens, args.rounds, n_ctx, threads)

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
