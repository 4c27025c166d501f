"""localchat soak test: a real server on the default model under mixed concurrent traffic.

    scripts/soak [--seconds S] [--seed K] [--threads T]

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
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from conftest import Server  # noqa: E402  (the same server launcher the tests use)

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


def worker_info(url: str) -> dict:
    """{pid, state, crashes} of the model's worker, from GET /health."""
    try:
        loaded = httpx.get(url + "/health", timeout=10).json()["loaded"]
        return next(m["worker"] for m in loaded if m["name"] == MODEL)
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


def fmt_mb(mb: float | None, sign: bool = False) -> str:
    return "n/a" if mb is None else f"{mb:{'+' if sign else ''}7.1f} MB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=300, help="how long the clients run (default 300)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the request mix (default 1)")
    ap.add_argument("--threads", type=int, default=8, help="concurrent client threads (default 8)")
    args = ap.parse_args()
    sys.exit(0 if soak(args.seconds, args.seed, args.threads) else 1)


if __name__ == "__main__":
    main()
