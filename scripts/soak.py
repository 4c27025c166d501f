"""localchat soak test: a real server on the default model under mixed concurrent traffic.

    scripts/soak [--seconds S] [--seed K] [--threads T]
    scripts/soak --agents [--seconds S] [--seed K] [--sessions N] [--store-bytes B]
    scripts/soak --fixtures-from <client>-tool-1.requests.jsonl ...

Starts `localchat serve --model gemma-3-270m` on a free loopback port, and runs T client
threads (default 8) for S seconds (default 300), each sending, at random (seeded): plain
streams, non-streamed chats, tool calls (tool_choice auto, required, named), json_object and
json_schema output, n=2, logprobs, streams the client hangs up on after a few chunks, and bad
input (a prompt longer than the context, a bad field, a body over the size limit, an unknown
model). Every answer is checked: no 5xx, streams well formed, bodies OpenAI-shaped, the
expected 4xx with OpenAI's error shape, JSON and tool arguments valid for their schemas.
Prints the server's and the worker's RSS at the start (after a warm-up) and the end, counts
by kind and status, throughput, and `soak: PASS` or `soak: FAIL (reasons)`; exit 0 on PASS.
Run by hand, not part of the test suite.

--agents: eight coding agents at once. Replays the recorded sessions in tests/fixtures/agents/
(one per client of scripts/acceptance: its first, cold, request, then its follow-up turns; paths
scrubbed) as eight concurrent sessions against `localchat serve --model qwen2.5-coder-0.5b` with
parallel = 4 and the prompt store on in a temporary folder, limited to --store-bytes (2 GiB).
Each session sends its requests in order (answers capped at 48 tokens, the prompts as recorded,
streamed when the client streamed), then its follow-ups again, until --seconds after the warm-up
(every session's first request answered); 1 in 10 of the later streamed turns is hung up on after
a few content events (seeded). Checks: no 5xx, every stream ends with its protocol's end ([DONE],
message_stop, response.completed/incomplete) or an error event unless hung up on, every session's
warm turns read (prompt minus cached tokens, from usage) at most 5% of its cold read (its first
request's prompt): a follow-up sent again, all it reads; a follow-up sent the first time, what it
reads beyond what it adds to the turn before (the recorded answer and tool result, which no cache
can hold: the soak's own answer was another; on chat completions, its tokens past the longest prefix
it shares with the turn before, by the server's /apply-template and /tokenize, where that is more:
aider rewrites the end of its prompt each turn), the server's and the worker's RSS (every 30 s after
the warm-up) flat: the least-squares line grows less than 100 MB (server) / 200 MB (worker) over
the run, the prompt store (every 5 s) within its limit.
Prints each session's cold read and worst warm read, the RSS slopes in MB/min, the store's size,
and `soak --agents: PASS` or `FAIL (reasons)`. --fixtures-from rebuilds the fixtures from
scripts/acceptance's recordings.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import jsonschema

from localchat.devtools import isolate_home  # noqa: E402
from localchat.serve_process import Server  # noqa: E402  (the same server launcher the tests use)

isolate_home()  # (the servers it starts keep away from the user's registry and prompt store)

from localchat.models import shipped_config  # noqa: E402

MODEL = "gemma-3-270m"
CONTEXT = 8192  # the shipped gemma-3-270m's context_length
REQUEST_LIMIT = 300  # seconds: a request still going after this is a failure (a hang)
TIMEOUT = httpx.Timeout(REQUEST_LIMIT, connect=10)  # per read: a non-streamed answer's whole wait
MAX_RSS_GROWTH_MB = {"server": 100, "worker": 200}

PROMPTS = ["Write one sentence about the sea.", "Tell me a short story about a fox.",
           "List three colours.", "What is the capital of France?", "Explain rain to a child."]
WEATHER_ASK = "What is the weather in Paris?"
PERSON_ASK = "Describe a person as a JSON object with a name and an age."

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
           "required": ["city"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                           "parameters": WEATHER}}]
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 24},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}

BAD_FIELDS = [{"temperature": 5}, {"top_p": -1}, {"max_tokens": 0}, {"n": 0}, {"messages": []},
              {"logprobs": True, "top_logprobs": 21}, {"stream": "yes please"},
              {"messages": [{"role": "wizard", "content": "x"}]}]
TOO_LONG = "the sea " * CONTEXT  # about twice the context in tokens
HUGE_BODY = b'{"messages": [{"role": "user", "content": "' + b"a" * (33 * 2**20) + b'"}]}'  # > 32 MiB


# -- results ------------------------------------------------------------------------------

@dataclass
class Result:
    """What one request came to. problems: (category, text), category one of
    'malformed', 'unexpected status', 'server error', 'transport'."""
    status: int | None = None
    problems: list[tuple[str, str]] = field(default_factory=list)
    tokens: int = 0  # completion tokens from usage, when the answer had usage
    completed_stream: bool = False
    disconnected: bool = False
    json_checked: int = 0  # JSON answers that ended with "stop" and were validated
    calls_checked: int = 0  # tool calls (of answers that ended with "tool_calls") validated

    def bad(self, text: str, category: str = "malformed") -> None:
        self.problems.append((category, text))


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.kinds: Counter[str] = Counter()
        self.statuses: Counter[int] = Counter()
        self.problems: Counter[str] = Counter()
        self.examples: list[str] = []
        self.tokens = self.completed_streams = self.disconnects = self.json_checked = self.calls_checked = 0

    def record(self, kind: str, r: Result) -> None:
        with self.lock:
            self.kinds[kind] += 1
            if r.status is not None:
                self.statuses[r.status] += 1
            self.tokens += r.tokens
            self.completed_streams += r.completed_stream
            self.disconnects += r.disconnected
            self.json_checked += r.json_checked
            self.calls_checked += r.calls_checked
            for category, text in r.problems:
                self.problems[category] += 1
                if len(self.examples) < 20:
                    self.examples.append(f"{kind}: {category}: {text}")


# -- request bodies -------------------------------------------------------------------------

def chat_body(rng: random.Random, prompt: str | None = None, **extra) -> dict:
    """A small request: max_tokens ≤ 64 (a base model rambles), a temperature and a seed."""
    return {"model": MODEL, "messages": [{"role": "user", "content": prompt or rng.choice(PROMPTS)}],
            "max_tokens": rng.randint(16, 64), "temperature": rng.choice([0, 0.7, 1.0]),
            "seed": rng.randrange(2**31), **extra}


def maybe_stream(rng: random.Random, body: dict) -> dict:
    if rng.random() < 0.5:
        body["stream"] = True
        if rng.random() < 0.5:
            body["stream_options"] = {"include_usage": True}
    return body


# -- reading answers ------------------------------------------------------------------------

@dataclass
class Answer:
    """A completion, streamed or not, as per-choice dicts {content, tool_calls, finish_reason, logprobs}."""
    choices: list[dict]
    usage: dict | None


def read_events(response: httpx.Response, r: Result, deadline: float,
                hang_up_after: int | None = None) -> tuple[list[dict], bool]:
    """The JSON events of an SSE stream, checking its framing, and whether it ended (with
    [DONE], as it must unless we hang up after `hang_up_after` events)."""
    events, done = [], False
    for line in response.iter_lines():
        if time.monotonic() > deadline:
            r.bad(f"stream still going after {REQUEST_LIMIT} s", "transport")
            return events, False
        if not line:
            continue
        if done:
            r.bad(f"a line after [DONE]: {line[:80]!r}")
        if not line.startswith("data: "):
            r.bad(f"not a data line: {line[:80]!r}")
            continue
        if line == "data: [DONE]":
            done = True
            continue
        try:
            event = json.loads(line[6:])
        except ValueError:
            r.bad(f"data line is not JSON: {line[:80]!r}")
            continue
        if "error" in event:  # an error after the stream started; a server_error is a 5xx in-band
            server_side = isinstance(event["error"], dict) and event["error"].get("type") == "server_error"
            r.bad(f"error event: {line[:200]}", "server error" if server_side else "malformed")
            continue
        events.append(event)
        if hang_up_after is not None and len(events) >= hang_up_after:
            return events, False
    if not done:
        r.bad("the stream did not end with data: [DONE]")
    return events, done


def assemble(events: list[dict], n: int, r: Result, complete: bool = True) -> Answer:
    """Check stream chunks (role chunk first for every choice, one finish_reason each) and
    accumulate them into an Answer, as a client would."""
    choices = [{"content": "", "tool_calls": {}, "finish_reason": None, "logprobs": None, "started": False}
               for _ in range(n)]
    usage, finishes = None, Counter()
    if len({e.get("id") for e in events}) > 1:
        r.bad("chunks with different ids")
    for e in events:
        if e.get("object") != "chat.completion.chunk" or not isinstance(e.get("choices"), list):
            r.bad(f"not a chunk: {str(e)[:200]}")
            continue
        if e.get("usage"):
            usage = e["usage"]
        for c in e["choices"]:
            i = c.get("index")
            if not isinstance(i, int) or not 0 <= i < n:
                r.bad(f"choice index {i!r}")
                continue
            ch, delta = choices[i], c.get("delta", {})
            if not ch["started"]:
                ch["started"] = True
                if delta.get("role") != "assistant":
                    r.bad(f"choice {i} does not start with the role chunk: {delta}")
            elif ch["finish_reason"] is not None:
                r.bad(f"choice {i} has a chunk after its finish_reason")
            ch["content"] += delta.get("content") or ""
            for tc in delta.get("tool_calls") or []:
                calls = ch["tool_calls"]
                if tc["index"] not in calls:
                    calls[tc["index"]] = {"id": tc.get("id"), "name": tc["function"]["name"], "arguments": ""}
                calls[tc["index"]]["arguments"] += tc["function"].get("arguments") or ""
            if c.get("logprobs") is not None:
                ch["logprobs"] = (ch["logprobs"] or []) + (c["logprobs"].get("content") or [])
            if c.get("finish_reason") is not None:
                finishes[i] += 1
                ch["finish_reason"] = c["finish_reason"]
    if complete:
        for i in range(n):
            if finishes[i] != 1:
                r.bad(f"choice {i} has {finishes[i]} finish_reasons")
    for ch in choices:
        ch["tool_calls"] = [ch["tool_calls"][k] for k in sorted(ch["tool_calls"])]
        del ch["started"]
    return Answer(choices, usage)


def from_completion(body: dict, n: int, r: Result) -> Answer:
    """Check a non-streamed body's OpenAI shape; the same Answer as a stream gives."""
    if body.get("object") != "chat.completion" or not str(body.get("id", "")).startswith("chatcmpl-"):
        r.bad(f"not a chat.completion: {str(body)[:200]}")
    choices = []
    for i, c in enumerate(body.get("choices") or []):
        msg = c.get("message") or {}
        if c.get("index") != i or msg.get("role") != "assistant":
            r.bad(f"choice {i}: index {c.get('index')!r}, role {msg.get('role')!r}")
        calls = [{"id": t.get("id"), "name": t["function"]["name"], "arguments": t["function"]["arguments"]}
                 for t in msg.get("tool_calls") or []]
        if msg.get("content") is None and not calls:
            r.bad(f"choice {i} has neither content nor tool calls")
        lp = c.get("logprobs")
        choices.append({"content": msg.get("content") or "", "tool_calls": calls,
                        "finish_reason": c.get("finish_reason"), "logprobs": lp and lp.get("content")})
    if len(choices) != n:
        r.bad(f"{len(choices)} choices, expected {n}")
    return Answer(choices, body.get("usage"))


def check_usage(usage: dict | None, r: Result) -> None:
    if usage is None:
        return
    p, c, t = (usage.get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens"))
    if not all(isinstance(x, int) for x in (p, c, t)) or p + c != t:
        r.bad(f"bad usage: {usage}")
        return
    r.tokens = c


def complete_chat(client: httpx.Client, body: dict, r: Result) -> Answer | None:
    """Send a valid request, streamed or not; check status, framing and shape. None when it failed."""
    n, deadline = body.get("n", 1), time.monotonic() + REQUEST_LIMIT
    if body.get("stream"):
        with client.stream("POST", "/v1/chat/completions", json=body) as resp:
            r.status = resp.status_code
            if resp.status_code != 200:
                resp.read()
                return status_problem(resp, r)
            if not resp.headers.get("content-type", "").startswith("text/event-stream"):
                r.bad(f"content-type {resp.headers.get('content-type')}")
            events, ended = read_events(resp, r, deadline)
            if not ended:
                return None
            answer = assemble(events, n, r)
            if body.get("stream_options", {}).get("include_usage") and answer.usage is None:
                r.bad("include_usage but no usage chunk")
            r.completed_stream = not r.problems
    else:
        resp = client.post("/v1/chat/completions", json=body)
        r.status = resp.status_code
        if resp.status_code != 200:
            return status_problem(resp, r)
        answer = from_completion(resp.json(), n, r)
        if answer.usage is None:
            r.bad("no usage")
    check_usage(answer.usage, r)
    for i, ch in enumerate(answer.choices):
        if ch["finish_reason"] not in ("stop", "length", "tool_calls"):
            r.bad(f"choice {i} finish_reason {ch['finish_reason']!r}")
    return answer


def status_problem(resp: httpx.Response, r: Result) -> None:
    category = "server error" if resp.status_code >= 500 else "unexpected status"
    r.bad(f"HTTP {resp.status_code}: {resp.text[:200]}", category)


def check_error(resp: httpx.Response, r: Result, statuses: tuple[int, ...], code: str | None = None) -> None:
    """An expected refusal: one of `statuses`, OpenAI's error shape, and `code` if given."""
    r.status = resp.status_code
    if resp.status_code not in statuses:
        return status_problem(resp, r)
    try:
        err = resp.json()["error"]
    except (ValueError, KeyError, TypeError):
        return r.bad(f"HTTP {resp.status_code} without an OpenAI error body: {resp.text[:200]}")
    if set(err) != {"message", "type", "param", "code"} or not err["message"]:
        r.bad(f"error shape: {err}")
    elif code is not None and err["code"] != code:
        r.bad(f"error code {err['code']!r}, expected {code!r}")


# -- the kinds of request -------------------------------------------------------------------

def stream(client: httpx.Client, rng: random.Random, r: Result) -> None:
    body = chat_body(rng, stream=True)
    if rng.random() < 0.5:
        body["stream_options"] = {"include_usage": True}
    complete_chat(client, body, r)


def non_streamed(client: httpx.Client, rng: random.Random, r: Result) -> None:
    complete_chat(client, chat_body(rng), r)


def tool_call(client: httpx.Client, rng: random.Random, r: Result) -> None:
    choice = rng.choice(["auto", "required", {"type": "function", "function": {"name": "get_weather"}}])
    body = maybe_stream(rng, chat_body(rng, WEATHER_ASK, tools=TOOLS, tool_choice=choice, max_tokens=64,
                                       parallel_tool_calls=rng.random() < 0.5))  # 64: room to finish a call
    answer = complete_chat(client, body, r)
    for ch in answer.choices if answer else []:
        if ch["finish_reason"] == "tool_calls":
            if not ch["tool_calls"]:
                r.bad("finish_reason tool_calls without a call")
            for call in ch["tool_calls"]:
                check_json(call["arguments"], WEATHER, r, f"{call['name']} arguments")
                r.calls_checked += 1
                if call["name"] != "get_weather" or not str(call["id"]).startswith("call_"):
                    r.bad(f"tool call {call['name']!r} id {call['id']!r}")
        elif choice != "auto" and ch["finish_reason"] == "stop":
            r.bad(f"tool_choice {choice} ended with stop, no call")


def json_object(client: httpx.Client, rng: random.Random, r: Result) -> None:
    json_mode(client, rng, r, {"type": "json_object"}, {"type": "object"})


def json_schema(client: httpx.Client, rng: random.Random, r: Result) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    json_mode(client, rng, r, fmt, PERSON)


def json_mode(client: httpx.Client, rng: random.Random, r: Result, fmt: dict, schema: dict) -> None:
    answer = complete_chat(client, maybe_stream(rng, chat_body(rng, PERSON_ASK, response_format=fmt)), r)
    for ch in answer.choices if answer else []:
        if ch["finish_reason"] == "stop":  # "length": cut off by max_tokens, not JSON yet
            check_json(ch["content"], schema, r, "content")
            r.json_checked += 1


def check_json(text: str, schema: dict, r: Result, what: str) -> None:
    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError) as exc:
        r.bad(f"{what} {text[:120]!r} invalid: {str(exc).splitlines()[0][:120]}")


def two_choices(client: httpx.Client, rng: random.Random, r: Result) -> None:
    complete_chat(client, maybe_stream(rng, chat_body(rng, n=2)), r)


def logprobs(client: httpx.Client, rng: random.Random, r: Result) -> None:
    top = rng.randint(0, 5)
    answer = complete_chat(client, maybe_stream(rng, chat_body(rng, logprobs=True, top_logprobs=top)), r)
    for i, ch in enumerate(answer.choices if answer else []):
        lps = ch["logprobs"]
        if ch["content"] and not lps:
            r.bad(f"choice {i}: content but no logprobs")
        for t in lps or []:
            if (set(t) != {"token", "logprob", "bytes", "top_logprobs"} or not t["logprob"] <= 0
                    or len(t["top_logprobs"]) > top):
                r.bad(f"choice {i}: bad logprob entry {str(t)[:160]}")
                break


def disconnect(client: httpx.Client, rng: random.Random, r: Result) -> None:
    """Hang up after a few chunks; what came before must be well formed."""
    body = chat_body(rng, stream=True, max_tokens=64)
    with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        r.status = resp.status_code
        if resp.status_code != 200:
            resp.read()
            return status_problem(resp, r)
        events, ended = read_events(resp, r, time.monotonic() + REQUEST_LIMIT, hang_up_after=rng.randint(1, 5))
    assemble(events, 1, r, complete=ended)
    r.disconnected = not ended


def too_long(client: httpx.Client, rng: random.Random, r: Result) -> None:
    body = maybe_stream(rng, chat_body(rng, TOO_LONG))
    check_error(client.post("/v1/chat/completions", json=body), r, (400,), "context_length_exceeded")


def bad_field(client: httpx.Client, rng: random.Random, r: Result) -> None:
    body = {**chat_body(rng), **rng.choice(BAD_FIELDS)}
    check_error(client.post("/v1/chat/completions", json=body), r, (400,))


def huge_body(client: httpx.Client, rng: random.Random, r: Result) -> None:
    resp = client.post("/v1/chat/completions", content=HUGE_BODY, headers={"content-type": "application/json"})
    check_error(resp, r, (413, 400))


def unknown_model(client: httpx.Client, rng: random.Random, r: Result) -> None:
    body = maybe_stream(rng, chat_body(rng, model=f"no-such-model-{rng.randrange(1000)}"))
    check_error(client.post("/v1/chat/completions", json=body), r, (404,), "model_not_found")


Kind = Callable[[httpx.Client, random.Random, Result], None]
KINDS: dict[str, tuple[float, Kind]] = {  # name: (weight, request)
    "stream": (4, stream),
    "chat": (3, non_streamed),
    "tools": (3, tool_call),
    "json_object": (1, json_object),  # slow: llama.cpp's grammar rejects many tokens inside free strings
    "json_schema": (2, json_schema),
    "n=2": (2, two_choices),
    "logprobs": (2, logprobs),
    "disconnect": (2, disconnect),
    "too_long": (1, too_long),
    "bad_field": (1, bad_field),
    "huge_body": (0.5, huge_body),
    "unknown_model": (1, unknown_model),
}


def run_one(client: httpx.Client, rng: random.Random, name: str, stats: Stats) -> None:
    r = Result()
    try:
        KINDS[name][1](client, rng, r)
    except httpx.HTTPError as exc:
        r.bad(f"{type(exc).__name__}: {exc}", "transport")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # a body we could not even read
        r.bad(f"{type(exc).__name__}: {exc}")
    stats.record(name, r)


def client_thread(url: str, seed: int, deadline: float, server: Server, stats: Stats) -> None:
    rng = random.Random(seed)
    names, weights = list(KINDS), [w for w, _ in KINDS.values()]
    with httpx.Client(base_url=url, timeout=TIMEOUT) as client:
        while time.monotonic() < deadline and server.proc.poll() is None:
            run_one(client, rng, rng.choices(names, weights)[0], stats)


# -- the server's processes -----------------------------------------------------------------

def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def worker_info(url: str, model: str = MODEL) -> dict:
    """{pid, state, crashes} of the model's worker, from GET /health."""
    try:
        loaded = httpx.get(url + "/health", timeout=10).json()["loaded"]
        return next(m["worker"] for m in loaded if m["name"] == model)
    except (httpx.HTTPError, ValueError, KeyError, StopIteration) as exc:
        return {"pid": None, "state": f"unknown ({type(exc).__name__})", "crashes": None}


# -- main -----------------------------------------------------------------------------------

def soak(seconds: float, seed: int, threads: int) -> bool:
    print(f"soak: starting a server on {MODEL}; warm-up: one request of each kind", flush=True)
    server = Server(shipped_config(), "--model", MODEL)
    try:
        url = server.url
        warm = Stats()
        with httpx.Client(base_url=url, timeout=TIMEOUT) as client:
            rng = random.Random(seed)
            for name in KINDS:
                run_one(client, rng, name, warm)
        worker = worker_info(url)
        start = {"server": rss_mb(server.proc.pid), "worker": rss_mb(worker["pid"])}
        print(f"soak: {MODEL}, {threads} threads, {seconds:g} s, seed {seed}; server pid {server.proc.pid}, "
              f"worker pid {worker['pid']}; warm-up: {sum(warm.kinds.values())} requests")

        stats = Stats()
        began = time.monotonic()
        pool = [threading.Thread(target=client_thread, args=(url, seed * 1000 + i, began + seconds, server, stats))
                for i in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        elapsed = time.monotonic() - began

        alive = server.proc.poll() is None
        end_worker = worker_info(url)
        end = {"server": rss_mb(server.proc.pid), "worker": rss_mb(worker["pid"])}
        ok = report(stats, warm, elapsed, start, end, alive, worker, end_worker)
        if not ok:
            print("--- server log (last 40 lines) ---")
            print("\n".join(server.output().splitlines()[-40:]))
        return ok
    finally:
        server.stop()


def report(stats: Stats, warm: Stats, elapsed: float, start: dict, end: dict, alive: bool,
           worker: dict, end_worker: dict) -> bool:
    total = sum(stats.kinds.values())
    print(f"requests: {total} in {elapsed:.1f} s ({total / elapsed:.1f}/s)")
    for name in KINDS:
        print(f"  {name:14} {stats.kinds[name]:6}")
    statuses = " ".join(f"{s}:{c}" for s, c in sorted(stats.statuses.items()))
    print(f"statuses: {statuses}")
    four = " ".join(f"{s}:{c}" for s, c in sorted(stats.statuses.items()) if 400 <= s < 500)
    five = sum(c for s, c in stats.statuses.items() if s >= 500)
    print(f"4xx by status: {four or 'none'}   5xx: {five}")
    print(f"completed streams: {stats.completed_streams}   disconnects: {stats.disconnects}   "
          f"validated: {stats.json_checked} JSON answers, {stats.calls_checked} tool calls")
    print(f"problems: server errors (5xx or in-band server_error) {stats.problems['server error']}, "
          f"malformed {stats.problems['malformed']}, unexpected status {stats.problems['unexpected status']}, "
          f"transport (timeouts, connection errors) {stats.problems['transport']}")
    for example in stats.examples + [f"warm-up {e}" for e in warm.examples]:
        print(f"  ! {example}")
    print(f"throughput: {stats.tokens} completion tokens, {stats.tokens / elapsed:.1f} tok/s aggregate")
    growth = {}
    for proc in ("server", "worker"):
        s, e = start[proc], end[proc]
        growth[proc] = e - s if s is not None and e is not None else None
        print(f"RSS {proc:6}: start {fmt_mb(s)}  end {fmt_mb(e)}  growth {fmt_mb(growth[proc], sign=True)}")
    print(f"worker: pid {worker['pid']} -> {end_worker['pid']}, state {end_worker['state']}, "
          f"crashes {end_worker['crashes']}")

    reasons = []  # "server error": a 5xx status, or a server_error event inside a stream
    for category in ("server error", "malformed", "unexpected status", "transport"):
        if stats.problems[category]:
            reasons.append(f"{stats.problems[category]} {category}")
    if warm.problems:
        reasons.append(f"{sum(warm.problems.values())} warm-up problems")
    if not alive:
        reasons.append("the server died")
    elif end_worker["crashes"] or end_worker["pid"] != worker["pid"] or end_worker["state"] != "ready":
        reasons.append("the worker crashed or restarted")
    for proc, limit in MAX_RSS_GROWTH_MB.items():
        if growth[proc] is None:
            reasons.append(f"no {proc} RSS")
        elif growth[proc] > limit:
            reasons.append(f"{proc} RSS grew {growth[proc]:.0f} MB (> {limit})")
    print("soak: PASS" if not reasons else f"soak: FAIL ({'; '.join(reasons)})")
    return not reasons


def fmt_s(end: float | None, start: float) -> str:
    return "not over" if end is None else f"{end - start:.0f} s"


def fmt_mb(mb: float | None, sign: bool = False) -> str:
    return "n/a" if mb is None else f"{mb:{'+' if sign else ''}7.1f} MB"


# -- eight agents: recorded sessions replayed (--agents) --------------------------------------------

AGENTS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "agents"
AGENT_MODEL = "qwen2.5-coder-0.5b"  # the shipped default
AGENT_PARALLEL = 4
AGENT_STORE_BYTES = 2 * 1024**3  # prompt_cache_bytes for the run
AGENT_MAX_TOKENS = 48  # each turn's answer is capped: the turns are about reading prompts
AGENT_REQUEST_LIMIT = 1800  # seconds: an agent's first prompt read cold on a loaded 2-core machine takes minutes
AGENT_TIMEOUT = httpx.Timeout(AGENT_REQUEST_LIMIT, connect=10)
HANG_UP_RATE = 0.1  # of streamed requests after a session's first: the client hangs up after 1-5 content events
WARM_SHARE = 0.05  # a warm turn reads at most this share of its session's cold read
RSS_EVERY, DISK_EVERY = 30.0, 5.0  # seconds between samples
MIN_RSS_SAMPLES = 3
ROUTES = ("/v1/chat/completions", "/v1/messages", "/v1/responses")
# What a recording's paths become (scrubbed), and the server it was sent to.
PROJECT, HOME = "/home/user/project", "/home/user"
SERVER_PLACEHOLDER = "http://localhost:8080"


def mangled(path: str) -> str:
    """A path as Claude Code names its per-folder data (every character not a letter or digit a '-')."""
    return re.sub(r"[^A-Za-z0-9]", "-", path)


_RUN_DIR = re.compile(r"(?:/[\w.-]+)*/acceptance/runs/(work|home)-(\w+)")  # scripts/acceptance's throw-away folders
_LOOPBACK = re.compile(r"https?://(?:127\.0\.0\.1|localhost|\[::1\]):\d+")


def scrub(text: str) -> str:
    """A recorded body's text with its folders and server replaced by fixed placeholders: the work
    folder by PROJECT, the throw-away HOME by HOME (as paths, as Claude Code's mangled names and as
    bare folder names), any other /root/ path by one under HOME, a /tmp/ folder by HOME/scratch, the
    server's loopback URL by SERVER_PLACEHOLDER. The same folder always becomes the same placeholder,
    so a session's follow-ups still share its first request's prefix."""
    for full, kind, tag in sorted(set((m[0], m[1], m[2]) for m in _RUN_DIR.finditer(text)), key=lambda m: -len(m[0])):
        to = PROJECT if kind == "work" else HOME
        text = text.replace(full, to).replace(mangled(full), mangled(to))
        text = text.replace(f"{kind}-{tag}", Path(to).name)
    text = _LOOPBACK.sub(SERVER_PLACEHOLDER, text)
    text = re.sub(r"(?<![\w.~-])/root/", HOME + "/", text)  # (an absolute path: not `~/.qwen/tmp/`)
    return re.sub(r"(?<![\w.~-])/tmp/[\w.-]+", HOME + "/scratch", text)


MAX_REQUESTS = 8  # a fixture's: the cold first request and up to 7 follow-ups


def head(route: str, body: dict) -> str:
    """What a conversation's requests share: the tools, the system prompt, the first message."""
    turns = body.get("input" if route == "/v1/responses" else "messages") or [None]
    return json.dumps([route, body.get("tools"), body.get("system"), body.get("instructions"), turns[0]],
                      sort_keys=True)


def make_fixtures(recordings: list[Path], folder: Path = AGENTS) -> None:
    """tests/fixtures/agents/<client>.json(.gz) from scripts/acceptance's <client>-<case>-<n>.requests.jsonl:
    the agent's conversation in order, scrubbed (the requests that share the largest one's tools, system
    prompt and first message: a title or a probe, a conversation of its own, is left out), its first
    MAX_REQUESTS; gzipped when over 300 KB."""
    folder.mkdir(parents=True, exist_ok=True)
    for recording in recordings:
        client, case = recording.name.split("-")[:2]
        rows = [json.loads(line) for line in recording.read_text().splitlines()]
        rows = [(row["path"], json.loads(scrub(row["body"]))) for row in rows if row["path"] in ROUTES]
        main = head(*max(rows, key=lambda r: len(json.dumps(r[1]))))
        conversation = [(route, body) for route, body in rows if head(route, body) == main]
        kept = conversation[:MAX_REQUESTS]
        fixture = {"client": client, "recorded": f"scripts/acceptance --only {client} --cases {case} "
                   f"--model {kept[0][1].get('model')}, scrubbed by scripts/soak --fixtures-from",
                   "left_out": {"other conversations (titles, probes)": len(rows) - len(conversation),
                                "later turns": len(conversation) - len(kept)},
                   "requests": [{"path": route, "body": body} for route, body in kept]}
        data = json.dumps(fixture, ensure_ascii=False, separators=(",", ":")).encode()
        for old in folder.glob(f"{client}.json*"):
            old.unlink()
        if len(data) > 300_000:
            (folder / f"{client}.json.gz").write_bytes(gzip.compress(data, 9, mtime=0))
        else:
            (folder / f"{client}.json").write_bytes(data)
        print(f"{client}: {len(kept)} requests of {len(rows)} ({fixture['left_out']}), {len(data) / 1000:.0f} KB "
              f"from {recording}")


@dataclass
class Fixture:
    client: str
    requests: list[tuple[str, dict]]  # (route, body), in order: the cold first request, then its follow-ups


def load_fixture(path: Path) -> Fixture:
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    fixture = json.loads(data)
    return Fixture(fixture["client"], [(r["path"], r["body"]) for r in fixture["requests"]])


def load_fixtures(folder: Path = AGENTS) -> list[Fixture]:
    return [load_fixture(p) for p in sorted(folder.glob("*.json")) + sorted(folder.glob("*.json.gz"))]


def prepared(route: str, body: dict, max_tokens: int = AGENT_MAX_TOKENS, model: str = AGENT_MODEL) -> dict:
    """A recorded body as the soak sends it: the served model, the answer capped at `max_tokens`,
    usage asked for in a chat stream; the prompt (messages, tools, system) as recorded."""
    body = {**body, "model": model}
    if route == "/v1/responses":
        body["max_output_tokens"] = min(body.get("max_output_tokens") or max_tokens, max_tokens)
    else:
        body["max_tokens"] = min(body.get("max_tokens") or body.get("max_completion_tokens") or max_tokens, max_tokens)
        body.pop("max_completion_tokens", None)
    if route == "/v1/chat/completions" and body.get("stream"):
        body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    return body


def another_folder(fixture: Fixture, n: int) -> Fixture:
    """The same client in another folder (PROJECT-n): a distinct prompt, to make up eight sessions."""
    to = f"{PROJECT}-{n}"

    def moved(body: dict) -> dict:
        text = json.dumps(body, ensure_ascii=False)
        return json.loads(text.replace(PROJECT, to).replace(mangled(PROJECT), mangled(to)))
    return Fixture(f"{fixture.client}-{n}", [(route, moved(body)) for route, body in fixture.requests])


def unshared(url: str, fixture: Fixture, model: str = AGENT_MODEL) -> dict[int, int]:
    """Per follow-up on the chat completions route: its prompt tokens past the longest prefix it shares
    with the request before it (both rendered by the server's /apply-template and read by its
    /tokenize), which no prefix cache can hold. More than the growth when a client rewrites the middle
    of its prompt: aider moves its reminder after the newest message and its file list into the turn."""
    out: dict[int, int] = {}
    with httpx.Client(timeout=AGENT_TIMEOUT) as client:
        def tokens(body: dict) -> list[int]:
            prompt = client.post(f"{url}/apply-template", json=prepared("/v1/chat/completions", body, model=model))
            prompt.raise_for_status()
            done = client.post(f"{url}/tokenize", json={"model": model, "content": prompt.json()["prompt"]})
            done.raise_for_status()
            return done.json()["tokens"]
        before = None
        for i, (route, body) in enumerate(fixture.requests):
            now = tokens(body) if route == "/v1/chat/completions" else None
            if now is not None and before is not None:
                shared = next((k for k, (a, b) in enumerate(zip(before, now)) if a != b), min(len(before), len(now)))
                out[i] = len(now) - shared
            before = now
    return out


def sessions_of(fixtures: list[Fixture], count: int) -> list[Fixture]:
    """`count` sessions: one per fixture, then the fixtures whose first prompt names the folder (aider's
    does not) again in other folders."""
    out = list(fixtures[:count])
    again = [f for f in fixtures if PROJECT in json.dumps(f.requests[0][1], ensure_ascii=False)]
    n = 2
    while len(out) < count and again:
        for f in again[:count - len(out)]:
            out.append(another_folder(f, n))
        n += 1
    return out


@dataclass
class Turn:
    """What one replayed request came to."""
    session: str
    index: int  # its place in the fixture (0: the cold first request)
    status: int | None = None
    prompt: int | None = None  # prompt tokens, from the answer's usage
    cached: int | None = None  # of them, read from a cache
    ended: str = ""  # "end" (the protocol's end), "error" (an error event), "cut" (neither), "hung up" (by us)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (category, text), as Result's
    seconds: float = 0.0
    repeat: bool = False  # the session sent this prompt before (a later pass over its follow-ups)

    @property
    def read(self) -> int | None:
        return None if self.prompt is None or self.cached is None else self.prompt - self.cached

    def bad(self, text: str, category: str = "malformed") -> None:
        self.problems.append((category, text))


SERVER_ERROR_TYPES = {"server_error", "api_error", "overloaded_error", "internal_error"}


def sse(response: httpx.Response, deadline: float) -> Iterator[tuple[str | None, str]]:
    """(event name or None, data) of each SSE event; comments (keepalives) skipped."""
    name, data = None, []
    for line in response.iter_lines():
        if time.monotonic() > deadline:
            raise TimeoutError(f"stream still going after {AGENT_REQUEST_LIMIT} s")
        if not line:
            if data:
                yield name, "\n".join(data)
            name, data = None, []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
    if data:
        yield name, "\n".join(data)


def take_usage(route: str, usage: dict | None, t: Turn) -> None:
    """prompt and cached tokens from a protocol's usage object."""
    if not isinstance(usage, dict):
        return
    if route == "/v1/messages":
        t.cached = usage.get("cache_read_input_tokens") or 0
        t.prompt = (usage.get("input_tokens") or 0) + t.cached
    elif route == "/v1/responses":
        t.prompt = usage.get("input_tokens")
        t.cached = (usage.get("input_tokens_details") or {}).get("cached_tokens") or 0
    else:
        t.prompt = usage.get("prompt_tokens")
        t.cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0


def error_in(route: str, kind: str, event: dict) -> dict | str | None:
    """The error an event reports, if it is an error event: chat's `{"error": …}` chunk, Anthropic's
    and Responses' `error` event, Responses' `response.failed`."""
    if route == "/v1/chat/completions":
        return event["error"] if "error" in event else None
    if kind == "error":
        return event.get("error") or event
    if kind == "response.failed":
        return (event.get("response") or {}).get("error") or {}
    return None


def read_stream(route: str, response: httpx.Response, t: Turn, hang_up_after: int | None) -> None:
    """Follow a stream to its protocol's end ([DONE], message_stop, response.completed/incomplete)
    or an error event, taking the usage; hang up after `hang_up_after` content events if given."""
    content = 0
    for name, data in sse(response, time.monotonic() + AGENT_REQUEST_LIMIT):
        if route == "/v1/chat/completions" and data == "[DONE]":
            t.ended = t.ended or "end"
            continue
        try:
            event = json.loads(data)
        except ValueError:
            t.bad(f"data is not JSON: {data[:120]!r}")
            continue
        if t.ended and not (t.ended == "error" and (name or event.get("type")) == "response.failed"):
            t.bad(f"an event after the stream's end: {data[:120]}")
            continue
        kind = name or event.get("type") or ""
        error = error_in(route, kind, event)
        if error is not None:
            if not (kind == "response.failed" and t.ended == "error"):  # (said by the error event before it)
                what = {error.get("type"), error.get("code")} if isinstance(error, dict) else set()
                t.bad(f"error event: {data[:300]}", "server error" if what & SERVER_ERROR_TYPES else "error event")
            t.ended = "error"
            continue
        if route == "/v1/chat/completions":
            if event.get("usage"):
                take_usage(route, event["usage"], t)
            content += any((c.get("delta") or {}).get("content") or (c.get("delta") or {}).get("tool_calls")
                           for c in event.get("choices") or [])
        elif route == "/v1/messages":
            if kind == "message_delta":
                take_usage(route, event.get("usage"), t)
            elif kind == "message_stop":
                t.ended = "end"
            content += kind == "content_block_delta"
        else:
            if kind in ("response.completed", "response.incomplete"):
                take_usage(route, (event.get("response") or {}).get("usage"), t)
                t.ended = "end"
            content += kind.endswith(".delta")
        if hang_up_after is not None and content >= hang_up_after and not t.ended:
            t.ended = "hung up"
            return
    if not t.ended:
        t.ended = "cut"
        t.bad("the stream ended without its protocol's end or an error event", "cut")


def replay(client: httpx.Client, route: str, body: dict, t: Turn, hang_up_after: int | None) -> None:
    began = time.monotonic()
    try:
        if body.get("stream"):
            with client.stream("POST", route, json=body) as resp:
                t.status = resp.status_code
                if resp.status_code != 200:
                    resp.read()
                    return agent_status_problem(resp, t)
                read_stream(route, resp, t, hang_up_after)
        else:
            resp = client.post(route, json=body)
            t.status = resp.status_code
            if resp.status_code != 200:
                return agent_status_problem(resp, t)
            take_usage(route, resp.json().get("usage"), t)
            t.ended = "end"
        if t.ended == "end" and t.read is None:
            t.bad("no usage in the answer")
    except (httpx.HTTPError, TimeoutError) as exc:
        t.bad(f"{type(exc).__name__}: {exc}", "transport")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        t.bad(f"{type(exc).__name__}: {exc}")
    finally:
        t.seconds = time.monotonic() - began


def agent_status_problem(resp: httpx.Response, t: Turn) -> None:
    category = "server error" if resp.status_code >= 500 else "unexpected status"
    t.bad(f"HTTP {resp.status_code}: {resp.text[:300]}", category)


class Run:
    """The sessions' shared state: every turn, the warm-up's end (every session's first request
    answered) and the deadline that follows it."""

    def __init__(self, sessions: int, seconds: float, server: Server) -> None:
        self.server = server
        self.lock = threading.Condition()
        self.turns: list[Turn] = []
        self.firsts: set[str] = set()
        self.sessions, self.seconds = sessions, seconds
        self.began = time.monotonic()
        self.warm: float | None = None  # when the warm-up ended (monotonic)
        self.stop = threading.Event()
        self.interrupted = False  # by Ctrl-C or SIGTERM

    def add(self, t: Turn) -> None:
        with self.lock:
            self.turns.append(t)
            if t.index == 0 and t.session not in self.firsts:
                self.firsts.add(t.session)
                print(f"  {time.monotonic() - self.began:6.0f} s  {t.session}: first request {t.ended or 'failed'} "
                      f"in {t.seconds:.0f} s, prompt {t.prompt}, read {t.read} ({len(self.firsts)} of {self.sessions})",
                      flush=True)
                if len(self.firsts) == self.sessions:
                    self.warm = time.monotonic()
                self.lock.notify_all()

    def going(self) -> bool:
        return (not self.stop.is_set() and self.server.proc.poll() is None
                and (self.warm is None or time.monotonic() < self.warm + self.seconds))


def agent_session(url: str, fixture: Fixture, seed: int, run: Run) -> None:
    """Replay the fixture's requests in order, then its follow-ups again and again, until the time is up."""
    rng = random.Random(seed)
    n, i, sent = len(fixture.requests), 0, set()
    with httpx.Client(base_url=url, timeout=AGENT_TIMEOUT) as client:
        while run.going():
            route, body = fixture.requests[i]
            body = prepared(route, body)
            hang = rng.randint(1, 5) if i > 0 and body.get("stream") and rng.random() < HANG_UP_RATE else None
            t = Turn(fixture.client, i, repeat=i in sent)
            replay(client, route, body, t, hang)
            sent.add(i)
            run.add(t)
            i = i + 1 if i + 1 < n else min(1, n - 1)


def folder_bytes(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


@dataclass
class Samples:
    rss: list[tuple[float, float | None, float | None]] = field(default_factory=list)  # (minutes, server, worker)
    disk: list[tuple[float, int]] = field(default_factory=list)  # (seconds from the start, bytes)
    worker_pids: set = field(default_factory=set)


def monitor(url: str, server: Server, store: Path, run: Run, samples: Samples) -> None:
    """The store's size every DISK_EVERY s; the server's and worker's RSS every RSS_EVERY s once warm."""
    last_rss = None
    while not run.stop.wait(DISK_EVERY):
        now = time.monotonic()
        samples.disk.append((now - run.began, folder_bytes(store)))
        if run.warm is not None and (last_rss is None or now - last_rss >= RSS_EVERY - 0.5):
            last_rss = now
            worker = worker_info(url, AGENT_MODEL)
            samples.worker_pids.add(worker["pid"])
            samples.rss.append(((now - run.warm) / 60, rss_mb(server.proc.pid), rss_mb(worker["pid"])))
            if len(samples.rss) % 10 == 1:
                m, srv, wrk = samples.rss[-1]
                print(f"  {now - run.began:6.0f} s  {m:5.1f} min after the warm-up: {len(run.turns)} requests, "
                      f"{sum(bool(t.problems) for t in run.turns)} with problems; RSS server {fmt_mb(srv)}, worker "
                      f"{fmt_mb(wrk)}; store {samples.disk[-1][1] / 2**20:.0f} MiB", flush=True)


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least squares: MB per minute."""
    if len(points) < 2:
        return None
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return None if sxx == 0 else sum((x - mx) * (y - my) for x, y in points) / sxx


def agents_soak(seconds: float, seed: int, count: int, store_bytes: int, clients: list[str] | None = None) -> bool:
    fixtures = [f for f in load_fixtures() if not clients or f.client in clients]
    if not fixtures:
        print(f"soak --agents: no fixtures in {AGENTS}" + (f" for {', '.join(clients)}" if clients else ""))
        return False
    sessions = sessions_of(fixtures, count)
    home = Path(tempfile.mkdtemp(prefix="localchat-soak-agents-"))
    store = home / "prompts"
    os.environ["LOCALCHAT_PROMPT_CACHE_DIR"] = str(store)  # the server inherits it
    config = home / "models.toml"
    config.write_text(f"parallel = {AGENT_PARALLEL}\nprompt_cache_bytes = {store_bytes}\n\n"
                      + shipped_config().read_text())
    print(f"soak --agents: {len(sessions)} sessions ({', '.join(s.client for s in sessions)}) on {AGENT_MODEL}, "
          f"parallel {AGENT_PARALLEL}, prompt store {store} limited to {store_bytes / 2**20:.0f} MiB, answers capped "
          f"at {AGENT_MAX_TOKENS} tokens, {HANG_UP_RATE:.0%} of later streamed turns hung up on; warm-up: every "
          f"session's first (cold) request, then {seconds:g} s; seed {seed}", flush=True)
    server = Server(config, "--model", AGENT_MODEL)
    run, samples = Run(len(sessions), seconds, server), Samples()
    try:
        url = server.url
        news = {s.client: unshared(url, s) for s in sessions}
        watcher = threading.Thread(target=monitor, args=(url, server, store, run, samples), daemon=True)
        watcher.start()
        pool = [threading.Thread(target=agent_session, args=(url, s, seed * 1000 + i, run), daemon=True)
                for i, s in enumerate(sessions)]
        for t in pool:
            t.start()
        worker = {"pid": None, "state": "unknown", "crashes": None}
        interrupted = False
        try:
            with run.lock:
                while run.warm is None and server.proc.poll() is None and any(t.is_alive() for t in pool):
                    run.lock.wait(5)
            if run.warm is not None:
                worker = worker_info(url, AGENT_MODEL)
                print(f"warm-up over after {run.warm - run.began:.0f} s (every session's first request answered); "
                      f"server pid {server.proc.pid}, worker pid {worker['pid']}; now {seconds:g} s", flush=True)
            else:
                run.stop.set()
            for t in pool:
                t.join()
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the report of what was done so far
            interrupted = True
            print("soak --agents: interrupted; the report so far (requests in flight left out)", flush=True)
        run.stop.set()
        watcher.join()
        alive = server.proc.poll() is None
        end_worker = worker_info(url, AGENT_MODEL) if alive else {"pid": None, "state": "dead", "crashes": None}
        if run.warm is not None:  # a last sample at the end
            samples.rss.append(((time.monotonic() - run.warm) / 60, rss_mb(server.proc.pid), rss_mb(end_worker["pid"])))
        samples.disk.append((time.monotonic() - run.began, folder_bytes(store)))
        run.interrupted = interrupted
        ok = agents_report(sessions, run, samples, store_bytes, alive, worker, end_worker, news)
        kept = Path(tempfile.mkdtemp(prefix="localchat-soak-agents-log-"))
        (kept / "server.log").write_text(server.output())
        (kept / "turns.jsonl").write_text("".join(json.dumps({k: v for k, v in vars(t).items()}) + "\n"
                                                  for t in run.turns))
        print(f"kept: the server's log and every turn (JSON lines) in {kept}")
        if not ok:
            print("--- server log (last 40 lines) ---")
            print("\n".join(server.output().splitlines()[-40:]))
        return ok
    finally:
        run.stop.set()
        server.stop()
        shutil.rmtree(home, ignore_errors=True)


def agents_report(sessions: list[Fixture], run: Run, samples: Samples, store_bytes: int, alive: bool,
                  worker: dict, end_worker: dict, news: dict[str, dict[int, int]]) -> bool:
    turns = run.turns
    elapsed = time.monotonic() - run.began
    reasons: list[str] = []
    statuses = Counter(t.status for t in turns if t.status is not None)
    problems = Counter(c for t in turns for c, _ in t.problems)
    ended = Counter(t.ended for t in turns)
    print(f"requests: {len(turns)} in {elapsed:.0f} s ({len(turns) / elapsed * 60:.1f}/min), of which "
          f"{sum(1 for t in turns if t.index > 0)} follow-up turns; warm-up {fmt_s(run.warm, run.began)}")
    print(f"statuses: {' '.join(f'{s}:{c}' for s, c in sorted(statuses.items())) or 'none'}   "
          f"5xx: {sum(c for s, c in statuses.items() if s >= 500)}")
    print(f"streams and answers: ended {ended['end']}, error events {ended['error']}, cut {ended['cut']}, "
          f"hung up by the client {ended['hung up']}")
    print(f"problems: server errors (5xx or in-band) {problems['server error']}, other error events "
          f"{problems['error event']}, cut streams {problems['cut']}, malformed {problems['malformed']}, "
          f"unexpected status {problems['unexpected status']}, transport (timeouts, connection errors) "
          f"{problems['transport']}")
    for t in [t for t in turns if t.problems][:20]:
        print(f"  ! {t.session} #{t.index}: {t.problems[0][0]}: {t.problems[0][1][:300]}")
    for category, count in problems.items():
        reasons.append(f"{count} {category}")

    print("sessions: read = prompt tokens minus cached ones; cold = the first request's prompt tokens; first pass = "
          "each follow-up sent the first time: its read less what it adds to the turn before (the recorded answer and "
          "tool result, which no cache holds; on chat completions, its tokens past the prefix it shares with the turn "
          "before, if more); again = the follow-ups sent again; worst at #turn; limit "
          f"{WARM_SHARE:.0%} of cold")
    print(f"  {'session':12} {'route':20} {'reqs':>4} {'turns':>5} {'hung':>4} {'cold':>6} {'read':>6} {'secs':>5} "
          f"{'1st pass: read-new':>19} {'again':>5} {'worst':>9} {'share':>6} {'median':>6} {'med s':>6}")
    for s in sessions:
        mine = [t for t in turns if t.session == s.client]
        first = next((t for t in mine if t.index == 0), None)
        cold = first.prompt if first and first.read is not None else None
        prompts = {t.index: t.prompt for t in mine if t.prompt is not None}
        answered = [t for t in mine if t.index > 0 and t.ended == "end" and t.read is not None]
        fresh = [(t, t.read - max(t.prompt - prompts.get(t.index - 1, t.prompt), news[s.client].get(t.index, 0), 0))
                 for t in answered if not t.repeat]
        again = sorted((t for t in answered if t.repeat), key=lambda t: t.read)
        worst_fresh = max(fresh, key=lambda tx: tx[1], default=None)
        worst = again[-1] if again else None
        share = worst.read / cold if worst and cold else None
        na = "n/a"
        cells = [len(s.requests), len(mine), sum(t.ended == "hung up" for t in mine), na if cold is None else cold,
                 na if first is None or first.read is None else first.read,
                 na if first is None else f"{first.seconds:.0f}",
                 f"{len(fresh)}: {worst_fresh[0].read}-{worst_fresh[0].read - worst_fresh[1]} #{worst_fresh[0].index}"
                 if worst_fresh else na, len(again), f"{worst.read} #{worst.index}" if worst else na,
                 na if share is None else f"{share:.1%}", again[len(again) // 2].read if again else na,
                 f"{sorted(t.seconds for t in again)[len(again) // 2]:.1f}" if again else na]
        widths = (4, 5, 4, 6, 6, 5, 19, 5, 9, 6, 6, 6)
        print(f"  {s.client:12} {s.requests[0][0]:20} " + " ".join(f"{c!s:>{w}}" for c, w in zip(cells, widths)))
        if cold is None:
            reasons.append(f"{s.client}: no cold read")
            continue
        if not again:
            reasons.append(f"{s.client}: no follow-up sent again")
        over = [t for t in again if t.read > WARM_SHARE * cold] + [t for t, x in fresh if x > WARM_SHARE * cold]
        if over:
            reasons.append(f"{s.client}: {len(over)} warm turns read over {WARM_SHARE:.0%} of its cold {cold} "
                           f"(turns {sorted({t.index for t in over})})")

    if samples.rss:
        print(f"RSS after the warm-up: {len(samples.rss)} samples, every {RSS_EVERY:.0f} s, over "
              f"{samples.rss[-1][0]:.1f} min")
    for k, (proc, limit) in enumerate(MAX_RSS_GROWTH_MB.items(), start=1):
        points = [(r[0], r[k]) for r in samples.rss if r[k] is not None]
        s = slope(points)
        if len(points) < MIN_RSS_SAMPLES or s is None:
            print(f"  {proc:6}: {len(points)} samples, too few to judge")
            reasons.append(f"{proc} RSS: {len(points)} samples after the warm-up (need {MIN_RSS_SAMPLES})")
            continue
        span = points[-1][0] - points[0][0]
        growth = s * span
        values = [v for _, v in points]
        print(f"  {proc:6}: first {values[0]:7.1f} MB  last {values[-1]:7.1f} MB  min {min(values):7.1f}  "
              f"max {max(values):7.1f}  slope {s:+.2f} MB/min (the line grows {growth:+.1f} MB over {span:.1f} min; "
              f"flat: < {limit} MB)")
        if growth > limit:
            reasons.append(f"{proc} RSS grew {growth:.0f} MB by its least-squares line (> {limit})")
    biggest = max((b for _, b in samples.disk), default=0)
    print(f"prompt store: max {biggest / 2**20:.0f} MiB, at the end {samples.disk[-1][1] / 2**20:.0f} MiB "
          f"({len(samples.disk)} samples every {DISK_EVERY:.0f} s), limit {store_bytes / 2**20:.0f} MiB")
    if biggest > store_bytes:
        reasons.append(f"the prompt store reached {biggest} bytes (> prompt_cache_bytes {store_bytes})")
    print(f"worker: pid {worker['pid']} -> {end_worker['pid']}, state {end_worker['state']}, "
          f"crashes {end_worker['crashes']}, pids seen {sorted(p for p in samples.worker_pids if p)}")
    if not alive:
        reasons.append("the server died")
    elif end_worker["crashes"] or end_worker["state"] != "ready" or len({p for p in samples.worker_pids if p}) > 1 \
            or (worker["pid"] is not None and end_worker["pid"] != worker["pid"]):
        reasons.append("the worker crashed or restarted")
    if run.warm is None:
        reasons.append("the warm-up never ended")
    if run.interrupted:
        reasons.append("interrupted")
    print("soak --agents: PASS" if not reasons else f"soak --agents: FAIL ({'; '.join(reasons)})")
    return not reasons


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=300,
                    help="how long the clients run (default 300; with --agents: after the warm-up)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the request mix (default 1)")
    ap.add_argument("--threads", type=int, default=8, help="concurrent client threads (default 8)")
    ap.add_argument("--agents", action="store_true",
                    help=f"replay the eight agents' recorded sessions ({AGENTS.relative_to(AGENTS.parents[2])}) "
                    f"concurrently on {AGENT_MODEL}, parallel {AGENT_PARALLEL}, the prompt store on")
    ap.add_argument("--sessions", type=int, default=8,
                    help="with --agents: concurrent sessions (default 8; past the fixtures, clients again in "
                    "other folders)")
    ap.add_argument("--clients", help="with --agents: only these clients' fixtures, comma-separated (default: all)")
    ap.add_argument("--store-bytes", type=int, default=AGENT_STORE_BYTES,
                    help=f"with --agents: prompt_cache_bytes for the run (default {AGENT_STORE_BYTES})")
    ap.add_argument("--fixtures-from", nargs="+", type=Path, metavar="REQUESTS_JSONL",
                    help="write the agents' fixtures from scripts/acceptance's <client>-<case>-<n>.requests.jsonl "
                    "files (scrubbed), then exit")
    args = ap.parse_args()
    if args.fixtures_from:
        make_fixtures(args.fixtures_from)
        return
    if args.agents:
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # a report of what was done, then exit 1
        sys.exit(0 if agents_soak(args.seconds, args.seed, args.sessions, args.store_bytes,
                                 args.clients.split(",") if args.clients else None) else 1)
    sys.exit(0 if soak(args.seconds, args.seed, args.threads) else 1)


if __name__ == "__main__":
    main()
