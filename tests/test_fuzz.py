"""Property-based fuzzing of the chat route on a real server: random JSON, valid bodies with one
field replaced by a random value, random extra or missing keys. Whatever comes in: never a 5xx,
never a dead server, and every 4xx is OpenAI-shaped.

Deterministic (derandomize=True, no example database) so that CI sees the same bodies each run.
The server caps every answer at 4 tokens (max_tokens_cap), so each request is quick."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import DEFAULT, Server, shipped

CAP = 4
FUZZ = settings(max_examples=150, deadline=None, derandomize=True, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
@shipped
def fuzzed(registry_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    path = tmp_path_factory.mktemp("fuzz") / "models.toml"
    path.write_text(f"max_tokens_cap = {CAP}\nmax_loaded_models = 2\n" + registry_file.read_text())
    s = Server(path)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def http(fuzzed: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fuzzed.url, timeout=120) as c:
        yield c


# -- strategies ---------------------------------------------------------------------------------

texts = st.text(st.characters(exclude_categories=()), max_size=12)  # surrogates and controls too
scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True, allow_infinity=True)
           | texts)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
                           max_leaves=12)
# Mostly the tiny model (fast); the shipped default model (preloaded) by "" or by name.
models = st.sampled_from(["tiny-chatml"] * 5 + ["", DEFAULT])
roles = st.sampled_from(["system", "developer", "user", "assistant", "tool"])
messages = st.lists(st.fixed_dictionaries({"role": roles, "content": st.text(max_size=30)}), min_size=1, max_size=3)
SCHEMAS = [
    {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer", "minimum": 1,
                                                                                            "maximum": 7}},
     "required": ["city"]},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
                                      "ok": {"type": "boolean"}}},
    {"anyOf": [{"type": "object", "properties": {"x": {"type": "number"}}}, {"type": "object"}]},
    True,
]
tools = st.lists(st.builds(lambda i, schema: {"type": "function", "function": {"name": f"t{i}", "parameters": schema}},
                           st.integers(0, 3), st.sampled_from(SCHEMAS[:3])), max_size=3, unique_by=lambda t: t["function"]["name"])
OPTIONAL = {
    "max_tokens": st.integers(1, CAP),
    "temperature": st.floats(0, 2),
    "top_p": st.floats(0, 1),
    "top_k": st.integers(0, 100),
    "min_p": st.floats(0, 1),
    "repeat_penalty": st.floats(0.5, 2),
    "presence_penalty": st.floats(-2, 2),
    "frequency_penalty": st.floats(-2, 2),
    "seed": st.integers(-2**63, 2**64),
    "stop": st.text(max_size=3) | st.lists(st.text(min_size=1, max_size=3), max_size=3),
    "n": st.integers(1, 2),
    "logprobs": st.booleans(),
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
    "ignore_eos": st.booleans(),
    "keep_alive": st.sampled_from(["10m", 600, -1, "1h30m"]),
    "logit_bias": st.dictionaries(st.integers(0, 200).map(str), st.floats(-100, 100), max_size=3),
    "tools": tools,
    "tool_choice": st.sampled_from(["auto", "none", "required", {"type": "function", "function": {"name": "t0"}}]),
    "response_format": st.sampled_from([{"type": "text"}, {"type": "json_object"}]
                                       + [{"type": "json_schema", "json_schema": {"name": "r", "schema": s}} for s in SCHEMAS]),
    "grammar": st.sampled_from(['root ::= "yes" | "no"', 'root ::= [a-z]{1,3}', "root ::= x\nx ::= x", "root ::= ("]),
}
valid_bodies = st.builds(lambda model, msgs, extra: {"model": model, "messages": msgs, **extra}, models, messages,
                         st.fixed_dictionaries({}, optional=OPTIONAL))


def paths(value: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every place in a JSON value, as a path of keys and indexes."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths(v, (*prefix, i))


def replaced(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = replaced(value[path[0]], path[1:], new)
    return copy


@st.composite
def mutated_bodies(draw: st.DrawFn) -> Any:
    body = draw(valid_bodies)
    path = draw(st.sampled_from(list(paths(body))[1:]))  # not the whole body: that is the random-JSON test
    return replaced(body, path, draw(json_values))


@st.composite
def bodies_with_odd_keys(draw: st.DrawFn) -> dict:
    body = draw(valid_bodies)
    for key in draw(st.lists(st.sampled_from(sorted(body)), max_size=2)):
        body.pop(key, None)  # missing keys, "messages" and "model" included
    body.update(draw(st.dictionaries(texts, json_values, max_size=3)))  # unknown keys
    return body


# -- the property -----------------------------------------------------------------------------

def check(http: httpx.Client, body: Any) -> None:
    raw = json.dumps(body, allow_nan=True).encode()  # NaN and Infinity as Python's json writes them
    with http.stream("POST", "/v1/chat/completions", content=raw, headers={"content-type": "application/json"}) as r:
        text = r.read().decode("utf-8", "replace")
    assert r.status_code < 500, f"{r.status_code} for {raw[:2000]!r}: {text[:2000]}"
    if r.status_code >= 400:
        err = json.loads(text)["error"]
        assert set(err) == {"message", "type", "param", "code"}, text
        assert isinstance(err["message"], str) and err["message"], text
        assert err["type"] in ("invalid_request_error", "not_found_error", "rate_limit_error"), text
        assert err["param"] is None or isinstance(err["param"], str), text
    elif r.headers["content-type"].startswith("text/event-stream"):
        assert text.rstrip().endswith("data: [DONE]"), text[-500:]
        for line in text.splitlines():
            if line.startswith("data: {"):
                event = json.loads(line[6:])
                assert "error" not in event, f"in-band error for {raw[:2000]!r}: {line}"
    else:
        answer = json.loads(text)
        assert answer["object"] == "chat.completion" and answer["choices"], text
        assert all(c["finish_reason"] in ("stop", "length", "tool_calls") for c in answer["choices"]), text


@FUZZ
@given(body=json_values)
def test_random_json(http: httpx.Client, body: Any):
    check(http, body)


@FUZZ
@given(body=mutated_bodies())
def test_one_field_replaced(http: httpx.Client, body: Any):
    check(http, body)


@FUZZ
@given(body=bodies_with_odd_keys())
def test_missing_and_unknown_keys(http: httpx.Client, body: dict):
    check(http, body)


@FUZZ
@given(body=valid_bodies)
def test_valid_bodies(http: httpx.Client, body: dict):
    check(http, body)


def test_the_server_survived(fuzzed: Server, http: httpx.Client):
    assert fuzzed.proc.poll() is None, fuzzed.output()[-5000:]
    health = http.get("/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert "Traceback" not in fuzzed.output(), fuzzed.output()[-5000:]
