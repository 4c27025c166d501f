"""What several of the benchmarks share: the story prompt (PROMPT) and the requests made of it, a
streamed request timed (http_stream), a server's slots (slots, flush, wait_idle), the same prompt
decoded by llama-cpp-python directly (direct_decode, served_vs_direct), streams at once
(concurrent_streams), the --edit file (edit_file) and a long prompt made of it (long_body, long_run),
and llama-server on the same GGUF (LlamaServer, where LLAMA_SERVER names its binary).

The package imports this module before any of its others (benchmarks/__init__.py): isolate_home()
runs here, before localchat.models.host and the rest are imported, as scripts/bench.py always did.
"""

from __future__ import annotations

import ctypes
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import llama_cpp as C

from localchat.devtools import isolate_home

isolate_home()  # (the servers it starts keep away from the user's registry and prompt store)

from localchat.engine.llama.model import quiet_progress as _quiet_progress  # noqa: E402
from localchat.models import ModelSpec  # noqa: E402


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


def concurrent_streams(url: str, bodies: list[dict]) -> dict:
    """Stream the bodies at once, one thread each. Aggregate tok/s: the tokens after the first
    content token of any stream over the time from it to the last token of any stream."""
    with ThreadPoolExecutor(len(bodies)) as pool:
        runs = list(pool.map(lambda body: http_stream(url, body), bodies))
    tokens = sum(r["usage"]["completion_tokens"] for r in runs)
    window = max(r["last"] for r in runs) - min(r["first"] for r in runs)
    return {"tps": (tokens - 1) / window, "tokens": tokens, "ttft": max(r["ttft"] for r in runs)}


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
