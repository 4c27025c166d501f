"""Several clients at once: slots decoded in one batch, n > 1, logprobs, a bounded queue,
model leases. Real server, real llama.cpp, Gemma 3 270M and tiny ones."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from conftest import GEMMA, Server, shipped

PROMPTS = ["Write one sentence about the sea.", "List three fruits.", "What is a lighthouse?",
           "Describe a cat in a few words."]
LONG = {"model": GEMMA, "messages": [{"role": "user", "content": "Tell me a very long story."}],
        "max_tokens": 3000, "ignore_eos": True, "stream": True}


def stream_text(url: str, body: dict) -> str:
    text = []
    with httpx.stream("POST", url + "/v1/chat/completions", json={**body, "stream": True}, timeout=120) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: {"):
                choices = json.loads(line[6:])["choices"]
                text += [c["delta"].get("content") or "" for c in choices]
    return "".join(text)


def test_concurrent_streams_match_the_same_requests_alone(server: Server, client: openai.OpenAI):
    # Drafts off: how long a draft is depends on the company (what the whole step costs), and a
    # longer step sums in another order, so with drafts the texts may part at a near-tie
    # (test_drafts.py compares drafted runs, two slots at once included, up to one).
    bodies = [{"model": GEMMA, "messages": [{"role": "user", "content": p}], "max_tokens": 24, "temperature": 0,
               "ignore_eos": True, "ngram_draft": 0} for p in PROMPTS]
    # llama.cpp's CPU kernels give a prompt decoded cold slightly other logits than the same
    # prompt read from the cache (docs/operations.md: "Same answer alone or in company"), so both runs below
    # start from the same state: each prompt already cached in a slot.
    for b in bodies:
        stream_text(server.url, {**b, "max_tokens": 1})
    alone = [stream_text(server.url, b) for b in bodies]
    together: list[str | None] = [None] * len(bodies)

    def run(i: int) -> None:
        together[i] = stream_text(server.url, bodies[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert all(alone) and together == alone


@pytest.mark.real  # Gemma 3 270M
def test_unrelated_prompts_keep_their_own_slots(registry_file: Path):
    """Four prompts that share only the chat template's first tokens, sent one after another
    to a fresh server's four slots: each one sent again finds its whole prompt cached (none
    took a slot that holds another's prompt while an empty one was free)."""
    s = Server(registry_file, "--model", GEMMA)
    try:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=120)

        def send(prompt: str):
            return client.chat.completions.create(model=GEMMA, messages=[{"role": "user", "content": prompt}],
                                                  max_tokens=2, temperature=0).usage
        for p in PROMPTS:
            send(p)
        for p in PROMPTS:
            usage = send(p)
            assert usage.prompt_tokens_details.cached_tokens == usage.prompt_tokens - 1, p
        # the next turn of the first chat, with a new message longer than all before it
        first = client.chat.completions.create(model=GEMMA, messages=[{"role": "user", "content": PROMPTS[0]}],
                                               max_tokens=2, temperature=0)
        long_message = "Now tell me, in plain words and with care, " * 6
        usage = client.chat.completions.create(
            model=GEMMA, max_tokens=2, temperature=0,
            messages=[{"role": "user", "content": PROMPTS[0]},
                      {"role": "assistant", "content": first.choices[0].message.content},
                      {"role": "user", "content": long_message}]).usage
        assert 2 * usage.prompt_tokens_details.cached_tokens < usage.prompt_tokens
        assert usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens
    finally:
        s.stop()


def first_and_last_token_times(url: str, body: dict, started: threading.Event | None = None) -> tuple[float, float]:
    first = last = 0.0
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=300) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["delta"].get("content"):
                last = time.monotonic()
                if not first:
                    first = last
                    if started is not None:
                        started.set()
    return first, last


def test_a_short_request_is_answered_while_a_long_stream_runs(server: Server):
    started = threading.Event()
    times: list[tuple[float, float]] = []
    long = threading.Thread(target=lambda: times.append(first_and_last_token_times(
        server.url, {**LONG, "max_tokens": 300}, started)))
    long.start()
    try:
        assert started.wait(60)
        time.sleep(0.5)
        short_first, _ = first_and_last_token_times(server.url, {
            "model": GEMMA, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": True,
            "ignore_eos": True})
    finally:
        long.join(300)
    (_, long_last), = times
    assert short_first < long_last, "the short request waited for the long stream to finish"


def test_n_choices_non_streamed_and_reproducible(client: openai.OpenAI):
    kwargs = dict(model=GEMMA, messages=[{"role": "user", "content": "Name a colour."}], max_tokens=8, n=3,
                  temperature=1.0, seed=11, extra_body={"ignore_eos": True})
    client.chat.completions.create(**{**kwargs, "max_tokens": 1})  # the prompt cached, as for the runs below
    r = client.chat.completions.create(**kwargs)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert all(c.message.content is not None for c in r.choices)
    assert r.usage.completion_tokens == 24  # all three completions count
    again = client.chat.completions.create(**kwargs)
    assert [c.message.content for c in again.choices] == [c.message.content for c in r.choices]
    # the seed differs per choice (seed + i), so three samples are not all one text
    assert len({c.message.content for c in r.choices}) > 1


def test_n_choices_streamed_carry_their_index(http: httpx.Client):
    body = {"model": GEMMA, "messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 6, "n": 3,
            "seed": 3,
            "temperature": 1.0, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    indexes = {c["choices"][0]["index"] for c in chunks if c["choices"]}
    assert indexes == {0, 1, 2}
    finishes = [c["choices"][0] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert sorted(f["index"] for f in finishes) == [0, 1, 2]
    assert all(f["finish_reason"] == "length" for f in finishes)
    assert chunks[-1]["usage"]["completion_tokens"] == 18  # every completion counts


def test_n_with_a_json_schema_gives_valid_json_each_time(client: openai.OpenAI):
    schema = {"type": "object", "properties": {"colour": {"type": "string", "maxLength": 12}}, "required": ["colour"],
              "additionalProperties": False}  # open, a random model writes other keys without end
    r = client.chat.completions.create(
        model=GEMMA, messages=[{"role": "user", "content": "A colour as JSON."}], max_tokens=200, n=2, seed=5,
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}})
    assert len(r.choices) == 2
    for c in r.choices:
        assert isinstance(json.loads(c.message.content)["colour"], str)


def test_n_larger_than_the_slots_is_refused(http: httpx.Client):
    r = http.post("/v1/chat/completions", json={"model": GEMMA, "messages": [{"role": "user", "content": "x"}], "n": 9})
    assert r.status_code == 400 and r.json()["error"]["param"] == "n"


def test_logprobs_concatenate_to_the_content(client: openai.OpenAI):
    # ignore_eos: 12 tokens; repeat_penalty 1 (Gemma's models.toml sets 1.1): greedy picks the raw top token
    r = client.chat.completions.create(model=GEMMA, messages=[{"role": "user", "content": "Say hello."}],
                                       max_tokens=12, temperature=0, logprobs=True, top_logprobs=3,
                                       extra_body={"ignore_eos": True, "repeat_penalty": 1.0})
    choice = r.choices[0]
    tokens = choice.logprobs.content
    assert tokens and "".join(t.token for t in tokens) == choice.message.content
    for t in tokens:
        assert t.logprob <= 0 and bytes(t.bytes).decode(errors="replace") == t.token
        assert len(t.top_logprobs) == 3
        assert [x.logprob for x in t.top_logprobs] == sorted((x.logprob for x in t.top_logprobs), reverse=True)
        assert t.top_logprobs[0].logprob >= t.logprob - 1e-6  # greedy: the chosen token is the most likely
    assert math.exp(tokens[0].top_logprobs[0].logprob) <= 1.0


def test_logprobs_streamed(http: httpx.Client):
    body = {"model": GEMMA, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "temperature": 0,
            "logprobs": True, "stream": True, "ignore_eos": True}
    content, tokens = [], []
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                choice = json.loads(line[6:])["choices"][0]
                content.append(choice["delta"].get("content") or "")
                tokens += [t["token"] for t in (choice.get("logprobs") or {}).get("content") or []]
    assert tokens and "".join(tokens) == "".join(content)


@pytest.mark.parametrize("body", [{"top_logprobs": 21, "logprobs": True}, {"top_logprobs": -1, "logprobs": True},
                                  {"top_logprobs": 2}])
def test_bad_logprobs_are_refused(http: httpx.Client, body: dict):
    r = http.post("/v1/chat/completions", json={"model": GEMMA, "messages": [{"role": "user", "content": "x"}], **body})
    assert r.status_code == 400 and r.json()["error"]["param"] == "top_logprobs"


# -- one slot, a queue of one, one model at a time ---------------------------------------------

@pytest.fixture(scope="module")
@shipped
def narrow(registry_file: Path) -> Iterator[Server]:
    s = Server(registry_file, "--parallel", "1", "--queue-limit", "1", "--max-loaded-models", "1", "--model", GEMMA)
    yield s
    alive = s.proc.poll() is None
    s.stop()
    assert alive, "the narrow server died during the tests"


def open_stream(url: str, body: dict) -> tuple[httpx.Client, httpx.Response, Iterator[str]]:
    h = httpx.Client(base_url=url, timeout=120)
    r = h.send(h.build_request("POST", "/v1/chat/completions", json=body), stream=True)
    assert r.status_code == 200
    lines = r.iter_lines()
    for line in lines:
        if '"content":"' in line and '"content":""' not in line:
            break
    return h, r, lines


def test_full_queue_answers_429_with_retry_after(narrow: Server):
    h, r, _ = open_stream(narrow.url, LONG)  # holds the only slot
    waiting = threading.Thread(target=lambda: httpx.post(narrow.url + "/v1/chat/completions", timeout=120, json={
        "model": GEMMA, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}))
    try:
        waiting.start()
        time.sleep(1.0)  # it is queued now: the queue (limit 1) is full
        third = httpx.post(narrow.url + "/v1/chat/completions", timeout=30,
                           json={"model": GEMMA, "messages": [{"role": "user", "content": "y"}], "max_tokens": 2})
        assert third.status_code == 429
        assert third.headers["retry-after"].isdigit()
        assert third.json()["error"]["code"] == "queue_full"
    finally:
        r.close()
        h.close()
        waiting.join(60)
    assert not waiting.is_alive()


def test_a_disconnect_frees_the_slot_for_the_next_queued_request(narrow: Server):
    h, r, _ = open_stream(narrow.url, LONG)
    result: list[httpx.Response] = []
    queued = threading.Thread(target=lambda: result.append(httpx.post(
        narrow.url + "/v1/chat/completions", timeout=120,
        json={"model": GEMMA, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})))
    queued.start()
    time.sleep(1.0)
    assert not result, "the queued request ran although the only slot was busy"
    start = time.monotonic()
    r.close()
    h.close()
    queued.join(60)
    assert result and result[0].status_code == 200
    assert time.monotonic() - start < 20  # the 3000-token stream (~60 s) was cancelled, not waited for


def loaded(url: str) -> dict[str, dict]:
    return {m["name"]: m for m in httpx.get(url + "/health", timeout=10).json()["loaded"]}


def test_model_switch_under_a_running_stream(narrow: Server):
    """One model at a time: a request for another model waits for the stream, which completes
    intact; two concurrent requests for the new model load it once."""
    loads_before = httpx.get(narrow.url + "/health").json()["loads"]
    body = {**LONG, "max_tokens": 60}
    text: list[str] = []
    first = threading.Thread(target=lambda: text.append(stream_text(narrow.url, body)))
    first.start()
    time.sleep(1.0)
    others: list[httpx.Response] = []

    def other() -> None:
        others.append(httpx.post(narrow.url + "/v1/chat/completions", timeout=120, json={
            "model": "tiny-llama3", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4, "seed": 1}))

    threads = [threading.Thread(target=other) for _ in range(2)]  # one slot, a queue of one
    for t in threads:
        t.start()
    first.join(120)
    for t in threads:
        t.join(120)
    assert text and len(text[0]) > 20
    assert [o.status_code for o in others] == [200, 200]
    assert list(loaded(narrow.url)) == ["tiny-llama3"]
    assert httpx.get(narrow.url + "/health").json()["loads"] == loads_before + 1


def test_an_idle_model_unloads_after_keep_alive(narrow: Server):
    r = httpx.post(narrow.url + "/v1/chat/completions", timeout=60, json={
        "model": "tiny-chatml", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "keep_alive": "2s"})
    assert r.status_code == 200 and "tiny-chatml" in loaded(narrow.url)
    deadline = time.monotonic() + 30
    while "tiny-chatml" in loaded(narrow.url) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "tiny-chatml" not in loaded(narrow.url)
    r = httpx.post(narrow.url + "/v1/chat/completions", timeout=60, json={
        "model": "tiny-chatml", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "keep_alive": 0})
    assert r.status_code == 200
    deadline = time.monotonic() + 10
    while "tiny-chatml" in loaded(narrow.url) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "tiny-chatml" not in loaded(narrow.url)


def test_bad_keep_alive_is_refused(narrow: Server):
    r = httpx.post(narrow.url + "/v1/chat/completions", timeout=60, json={
        "model": GEMMA, "messages": [{"role": "user", "content": "hi"}], "keep_alive": "soon"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "keep_alive"


def hundred_tools() -> list[dict]:
    props = {f"field_{k}": {"type": "string", "maxLength": 2000, "description": "x" * 200} for k in range(12)}
    return [{"type": "function", "function": {"name": f"tool_{i}", "description": "does a thing " * 20, "parameters": {
        "type": "object", "properties": {**props, "nested": {"type": "object", "properties": {
            "a": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 500}]}, "b": {"type": "object"}}}},
        "required": ["field_0"]}}} for i in range(100)]


def test_the_event_loop_answers_while_a_100_tool_request_is_prepared(server: Server):
    """Template, grammar and tokenizing happen off the event loop: /health keeps answering
    while a request with 100 tools (~250 KB of schemas) is prepared."""
    tools = hundred_tools()
    assert len(json.dumps(tools)) > 200_000
    done = threading.Event()
    result: list[httpx.Response] = []

    def heavy() -> None:
        result.append(httpx.post(server.url + "/v1/chat/completions", timeout=120, json={
            "model": GEMMA, "messages": [{"role": "user", "content": "call a tool"}], "tools": tools,
            "tool_choice": "required", "max_tokens": 1}))
        done.set()

    t = threading.Thread(target=heavy)
    t.start()
    answered_during = 0
    while not done.is_set():
        r = httpx.get(server.url + "/health", timeout=30)
        if not done.is_set():
            answered_during += r.status_code == 200
        time.sleep(0.01)
    t.join()
    # The tools make a ~75k-token prompt: the context check comes after rendering, building the
    # grammar and tokenizing (the slow part), so this answer means all of it ran.
    assert result[0].status_code == 400 and result[0].json()["error"]["code"] == "context_length_exceeded"
    assert answered_during >= 2, "the event loop was blocked while the request was prepared"


def test_localchat_ps_lists_the_loaded_models(server: Server):
    import subprocess
    import sys

    httpx.post(server.url + "/v1/chat/completions", timeout=60, json={
        "model": GEMMA, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
    out = subprocess.run([sys.executable, "-m", "localchat", "ps", "--url", server.url + "/v1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert GEMMA in out.stdout and "MB" in out.stdout and "/4" in out.stdout
    gone = subprocess.run([sys.executable, "-m", "localchat", "ps", "--url", "http://127.0.0.1:9"],
                          capture_output=True, text=True, timeout=60)
    assert gone.returncode == 1 and "localchat serve" in gone.stderr


def test_system_prompt_strip_keeps_the_prefix_cache(registry_file: Path, tmp_path: Path):
    """A client that puts a fresh id at the start of its system prompt misses the prefix cache
    every turn, unless models.toml strips it."""
    config = tmp_path / "models.toml"
    head = '[models."tiny-chatml"]\n'
    assert head in registry_file.read_text()
    config.write_text(registry_file.read_text().replace(
        head, head + 'system_prompt_strip = "request-id: [0-9a-f]+\\\\n"\n'))
    s = Server(config, "--model", "tiny-chatml")
    try:
        def ask(request_id: str, model: str) -> dict:
            r = httpx.post(s.url + "/v1/chat/completions", timeout=60, json={
                "model": model, "max_tokens": 2, "seed": 1, "messages": [
                    {"role": "system", "content": f"request-id: {request_id}\nYou are a careful assistant. " + "Answer briefly. " * 30},
                    {"role": "user", "content": "hello"}]})
            assert r.status_code == 200
            return r.json()["usage"]

        ask("a1b2", "tiny-chatml")
        stripped = ask("c3d4", "tiny-chatml")
        ask("a1b2", "tiny-llama3")
        plain = ask("c3d4", "tiny-llama3")
        assert stripped["prompt_tokens_details"]["cached_tokens"] > stripped["prompt_tokens"] - 5
        # unstripped, only the head up to the id is reused: a small part of the prompt
        assert plain["prompt_tokens_details"]["cached_tokens"] < plain["prompt_tokens"] / 4
    finally:
        s.stop()
