"""Every input validated: JSON schemas against their draft's metaschema, every number in range,
every size under a documented limit (Settings, top-level keys of models.toml), and no request
text raw in a log line."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import DEFAULT, GEMMA, Server
from localchat.grammars import metaschema
from localchat.models import Registry, Settings

HELLO = [{"role": "user", "content": "hello"}]
TINY = "tiny-chatml"
LIMITS = {"max_body_bytes": 65536, "max_tokens_cap": 8, "max_stop_strings": 2, "max_stop_chars": 5, "max_tools": 3,
          "max_tool_schema_bytes": 2048, "max_grammar_bytes": 4096, "max_schema_depth": 6}


def _error(r: httpx.Response, status: int, param: str | None = None) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if param is not None:
        assert err["param"] == param, err
        assert param.split(".")[0] in err["message"]
    return err


def tool(name: str, parameters: object) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def json_schema(schema: object) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "out", "schema": schema}}


@pytest.fixture(scope="module")
def limited(registry_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose models.toml sets every limit low."""
    path = tmp_path_factory.mktemp("limited") / "models.toml"
    path.write_text("".join(f"{k} = {v}\n" for k, v in LIMITS.items()) + registry_file.read_text())
    s = Server(path, "--model", TINY)
    yield s
    alive = s.proc.poll() is None
    s.stop()
    assert alive, "the limited server died"


def post(server: Server, body: object, **kwargs) -> httpx.Response:
    """POST a body: a dict as JSON (ASCII, so lone surrogates travel as escapes), bytes or an
    iterator of bytes as they are."""
    content = json.dumps(body).encode() if isinstance(body, dict) else body
    headers = {"content-type": "application/json", **kwargs.pop("headers", {})}
    return httpx.post(server.url + "/v1/chat/completions", content=content, headers=headers, timeout=120, **kwargs)


# -- JSON schemas against their metaschema --------------------------------------------------

@pytest.mark.parametrize("body, param", [
    ({"response_format": json_schema({"type": 123})}, "response_format.json_schema.schema"),
    ({"tools": [tool("f", {"type": 123})]}, "tools.0.function.parameters"),
    ({"tools": [tool("ok", {"type": "object"}), tool("f", {"type": "object", "properties": {"a": {"type": "strin"}}})]},
     "tools.1.function.parameters"),
    ({"tools": [tool("f", {"type": "object", "required": "a"})]}, "tools.0.function.parameters"),
    ({"tools": [tool("f", {"properties": {"a": {"minLength": -1}}})]}, "tools.0.function.parameters"),
    ({"response_format": json_schema({"$schema": 5})}, "response_format.json_schema.schema"),
    ({"response_format": json_schema({"items": [{"type": "string"}]})}, "response_format.json_schema.schema"),  # 2020-12
    ({"response_format": json_schema([1, 2])}, "response_format.json_schema.schema"),
    ({"response_format": json_schema({"type": "integer", "minimum": float("nan")})}, "response_format.json_schema.schema"),
    ({"tools": [tool("f", {"type": "object", "properties": {"n": {"type": "integer", "maximum": []}}})]},
     "tools.0.function.parameters"),  # found by the fuzzer: a 500 from the converter before
])
def test_invalid_schemas_are_400_naming_the_field(server: Server, body: dict, param: str):
    err = _error(post(server, {"model": TINY, "messages": HELLO, "max_tokens": 2, **body}), 400, param)
    assert err["type"] == "invalid_request_error"


def test_the_metaschema_is_the_one_schema_names(server: Server):
    """A tuple `items` is draft 7 (and 2019-09), not 2020-12: `$schema` picks the metaschema."""
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "items": [{"type": "integer"}],
              "additionalItems": False}
    r = post(server, {"model": TINY, "messages": HELLO, "max_tokens": 4, "response_format": json_schema(draft7)})
    assert r.status_code == 200, r.text
    del draft7["$schema"]
    _error(post(server, {"model": TINY, "messages": HELLO, "response_format": json_schema(draft7)}), 400,
           "response_format.json_schema.schema")


def test_valid_schemas_still_work(server: Server):
    params = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    r = post(server, {"model": TINY, "messages": HELLO, "max_tokens": 4, "tools": [tool("f", params)],
                      "tool_choice": "required"})
    assert r.status_code == 200, r.text


def test_schema_nested_too_deeply_is_400(server: Server):
    deep: dict = {"type": "string"}
    for _ in range(40):  # 80 levels of JSON
        deep = {"type": "object", "properties": {"a": deep}}
    err = _error(post(server, {"messages": HELLO, "tools": [tool("f", deep)]}), 400, "tools.0.function.parameters")
    assert "max_schema_depth" in err["message"]
    _error(post(server, {"messages": HELLO, "response_format": json_schema(deep)}), 400,
           "response_format.json_schema.schema")


def test_the_check_is_cached_by_canonical_json(monkeypatch: pytest.MonkeyPatch):
    calls = []
    real = metaschema._check
    monkeypatch.setattr(metaschema, "_check", lambda schema, depth: calls.append(1) or real(schema, depth))
    metaschema.clear_cache()
    a = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "string"}}}
    b = {"properties": {"y": {"type": "string"}, "x": {"type": "integer"}}, "type": "object"}  # same, other order
    assert metaschema.schema_problem(a) is None and metaschema.schema_problem(b) is None
    assert metaschema.schema_problem({"type": 123}) == metaschema.schema_problem({"type": 123}) is not None
    assert len(calls) == 2


def test_a_hundred_tools_are_checked_quickly():
    """100 different tools (~250 KB of schemas): checked once, then from the cache."""
    metaschema.clear_cache()
    props = {f"field_{k}": {"type": "string", "maxLength": 2000, "description": "x" * 200} for k in range(12)}
    schemas = [{"type": "object", "description": f"tool {i}", "properties": {**props, "nested": {"type": "object", "properties": {
        "a": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 500}]}, "b": {"type": "object"}}}},
        "required": ["field_0"]} for i in range(100)]
    assert len(json.dumps(schemas)) > 200_000
    start = time.perf_counter()
    assert all(metaschema.schema_problem(s) is None for s in schemas)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    assert all(metaschema.schema_problem(s) is None for s in schemas)
    warm = time.perf_counter() - start
    print(f"\n100 tools, {len(json.dumps(schemas)) // 1024} KB: cold {cold * 1000:.0f} ms, cached {warm * 1000:.1f} ms")
    assert warm < 0.25 and warm < cold


# -- numbers and sizes -------------------------------------------------------------------------

@pytest.mark.parametrize("extra, param", [
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_completion_tokens": 0}, "max_completion_tokens"),
    ({"tools": [tool(f"t{i}", None) for i in range(257)]}, "tools"),
    ({"tools": [tool(f"t{i}", {"type": "object", "description": "x" * 200_000}) for i in range(6)]}, "tools"),
    ({"stop": ["x"] * 17}, "stop"),
    ({"stop": ["x" * 1001]}, "stop"),
    ({"grammar": 'root ::= "' + "a" * 1_100_000 + '"'}, "grammar"),
    ({"grammar": 'root ::= "a\ud800"'}, "grammar"),  # a lone surrogate: not UTF-8 for llama.cpp
    ({"tools": [tool("f", {"properties": {"a": {"enum": ["\udc00"]}}})]}, "tools"),  # in the grammar made from it
    ({"response_format": json_schema({"properties": {"\ud800": {}}, "required": ["\ud800"]})},
     "response_format.json_schema.schema"),
    ({"logit_bias": {"5": 101}}, "logit_bias"),
    ({"logit_bias": {"5": -1e9}}, "logit_bias"),
    ({"keep_alive": "1e999"}, "keep_alive"),
    ({"penalty_last_n": 2**31 - 1}, "penalty_last_n"),
    ({"penalty_last_n": -2}, "penalty_last_n"),
    ({"top_k": -1}, "top_k"),
    ({"repeat_penalty": 0}, "repeat_penalty"),
    ({"presence_penalty": 2.5}, "presence_penalty"),
    ({"frequency_penalty": -3}, "frequency_penalty"),
    ({"min_p": 1.5}, "min_p"),
    ({"seed": 1.5}, "seed"),
    ({"n": 65}, "n"),
    ({"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
    ({"stop": 5}, "stop"),
    ({"tool_choice": 5}, "tool_choice"),
    ({"response_format": json_schema(5)}, "response_format.json_schema.schema"),
])
def test_out_of_range_is_400_naming_the_field(server: Server, extra: dict, param: str):
    _error(post(server, {"model": TINY, "messages": HELLO, **extra}), 400, param)


@pytest.mark.parametrize("path, extra", [
    ("/v1/chat/completions", {"json_schema": {"type": "object"}}),
    ("/v1/chat/completions", {"response_format": {"type": "json_object"}}),
    ("/v1/chat/completions", {"response_format": json_schema({"type": "object"})}),
    ("/v1/chat/completions", {"tools": [tool("f", None)]}),
    ("/v1/completions", {"json_schema": {"type": "object"}}),
])
def test_a_grammar_with_a_json_format_or_tools_is_400_naming_the_grammar(server: Server, path: str, extra: dict):
    """One rule, in one place (generation/constraints.check), whatever the protocol."""
    body = {"model": TINY, "grammar": 'root ::= "a"', "max_tokens": 2, **extra,
            **({"messages": HELLO} if "chat" in path else {"prompt": "Hi"})}
    err = _error(httpx.post(server.url + path, json=body, timeout=120), 400, "grammar")
    assert "cannot be combined" in err["message"]


def test_a_grammar_nothing_can_follow_is_400_and_frees_its_slot(server: Server):
    """A grammar that allows no token of the vocabulary (here after its first character): the
    client's request cannot be met, so it is a 400 (mid-stream: an error event), not a 500."""
    body = {"model": TINY, "messages": HELLO, "max_tokens": 5, "grammar": 'root ::= "a" [^\\x00-\\U0010FFFF]'}
    err = _error(post(server, body), 400)
    assert err["code"] == "grammar_dead_end" and err["type"] == "invalid_request_error"
    with httpx.stream("POST", server.url + "/v1/chat/completions", json={**body, "stream": True}, timeout=60) as r:
        assert r.status_code == 200  # the first chunk went out before the first token was sampled
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert json.loads(lines[-2][6:])["error"]["code"] == "grammar_dead_end" and lines[-1] == "data: [DONE]"
    ok = post(server, {"model": TINY, "messages": HELLO, "max_tokens": 2})
    assert ok.status_code == 200


def test_nan_and_infinity_are_400(server: Server):
    """Python's JSON reader takes NaN and Infinity; a keep_alive of NaN used to be accepted and
    break GET /health (a float JSON cannot write) from then on."""
    for field, value in (("temperature", "NaN"), ("top_p", "Infinity"), ("keep_alive", "NaN"),
                         ("keep_alive", "Infinity"), ("keep_alive", "-Infinity"), ("logit_bias", '{"5": NaN}')):
        body = b'{"model": "%s", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "%s": %s}' % (
            TINY.encode(), field.encode(), value.encode())
        _error(post(server, body), 400, field)
    assert httpx.get(server.url + "/health", timeout=30).status_code == 200


def test_the_limits_come_from_models_toml(limited: Server):
    def bad(extra: dict, param: str) -> str:
        return _error(post(limited, {"messages": HELLO, **extra}), 400, param)["message"]

    assert "max_stop_strings" in bad({"stop": ["a", "b", "c"]}, "stop")
    assert "max_stop_chars" in bad({"stop": "abcdef"}, "stop")
    assert "max_tools" in bad({"tools": [tool(f"t{i}", None) for i in range(4)]}, "tools")
    assert "max_tool_schema_bytes" in bad({"tools": [tool("t", {"description": "x" * 3000})]}, "tools")
    assert "max_grammar_bytes" in bad({"grammar": 'root ::= "' + "a" * 5000 + '"'}, "grammar")
    seven_deep = {"properties": {"a": {"properties": {"b": {"properties": {"c": {}}}}}}}
    assert "max_schema_depth" in bad({"tools": [tool("t", seven_deep)]}, "tools.0.function.parameters")
    # A grammar made from a schema is held to the same size; the error names the schema.
    wide = {"properties": {f"p{i}": {"type": "integer", "minimum": i * 137, "maximum": i * 9999 + 12345} for i in range(12)}}
    assert "max_grammar_bytes" in bad({"response_format": json_schema(wide)}, "response_format.json_schema.schema")
    assert "max_grammar_bytes" in bad({"tools": [tool("t", wide)], "tool_choice": "required"}, "tools")
    r = post(limited, {"messages": HELLO, "stop": ["a", "b"], "max_tokens": 8, "tools": [tool(f"t{i}", None) for i in range(3)]})
    assert r.status_code == 200, r.text


def test_every_protocol_holds_a_made_grammar_to_max_grammar_bytes(limited: Server):
    """The limit is read in generation, once, for every protocol (Ollama's /api/chat once ignored it)."""
    wide = {"type": "object", "properties": {f"p{i}": {"type": "integer", "minimum": i * 137, "maximum": i * 9999 + 12345}
                                             for i in range(12)}}
    r = httpx.post(limited.url + "/api/chat", json={"model": TINY, "messages": HELLO, "format": wide, "stream": False},
                   timeout=60)
    assert r.status_code == 400 and "max_grammar_bytes" in r.json()["error"], r.text
    r = httpx.post(limited.url + "/v1/messages", json={"model": TINY, "max_tokens": 8, "messages": HELLO,
                                                       "tools": [{"name": "t", "input_schema": wide}],
                                                       "tool_choice": {"type": "any"}}, timeout=60)
    assert r.status_code == 400 and "max_grammar_bytes" in r.json()["error"]["message"], r.text
    r = httpx.post(limited.url + "/v1/responses", json={"model": TINY, "input": "hello", "text": {
        "format": {"type": "json_schema", "name": "out", "schema": wide}}}, timeout=60)
    assert r.status_code == 400 and "max_grammar_bytes" in r.json()["error"]["message"], r.text


@pytest.mark.parametrize("extra", [{}, {"max_tokens": 10**30}, {"max_completion_tokens": LIMITS["max_tokens_cap"] + 1}])
def test_max_tokens_is_a_ceiling_lowered_to_the_cap(limited: Server, extra: dict):
    """Without max_tokens, or past the cap, a choice stops at the cap (`length`): a ceiling, as
    in Anthropic's API, not a 400 (docs/limits-and-safety.md)."""
    r = post(limited, {"messages": HELLO, "ignore_eos": True, **extra})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == LIMITS["max_tokens_cap"]
    assert r.json()["choices"][0]["finish_reason"] == "length"


def test_a_models_max_tokens_bounds_its_answers():
    """The shipped base model (Gemma 3 270M) rarely ends a turn: models.toml bounds its answers
    (and discourages loops). A request without max_tokens leaves it unset: generation applies the
    model's default, under the cap. The default model is a chat model that ends its own turns: no
    bound but the cap and the context."""
    from localchat.api.openai.schemas import ChatCompletionRequest

    registry = Registry.load()
    sampling = registry.models[GEMMA].sampling
    assert sampling.max_tokens == 256 and sampling.repeat_penalty > 1 and sampling.penalty_last_n > 0
    assert registry.models[DEFAULT].sampling.max_tokens is None and registry.default == DEFAULT
    assert ChatCompletionRequest.model_validate({"messages": HELLO}).to_request().sampling.max_tokens is None
    asked = ChatCompletionRequest.model_validate({"messages": HELLO, "max_tokens": 1000})
    assert asked.to_request().sampling.max_tokens == 1000


def test_body_over_the_limit_is_413_with_or_without_a_length(limited: Server):
    big = json.dumps({"messages": [{"role": "user", "content": "a" * 70_000}]}).encode()
    err = _error(post(limited, big, headers={"content-type": "application/json"}), 413)
    assert "max_body_bytes" in err["message"]

    def chunks() -> Iterator[bytes]:  # chunked transfer encoding: no Content-Length to trust
        for i in range(0, len(big), 8192):
            yield big[i:i + 8192]

    err = _error(post(limited, chunks(), headers={"content-type": "application/json"}), 413)
    assert "max_body_bytes" in err["message"]
    small = json.dumps({"messages": HELLO, "max_tokens": 1}).encode()
    assert post(limited, small, headers={"content-type": "application/json"}).status_code == 200


def test_headers_over_uvicorns_limit_are_refused_and_the_server_goes_on(server: Server):
    """h11's limit on the request line and headers applies before the app sees anything:
    uvicorn answers a plain-text 400 and closes the connection. (The limit, 16 KiB, is on what
    is buffered while the headers are incomplete: a block that arrives in one read may be larger.)"""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        answer = b""
        try:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 2_000_000 + b"\r\n\r\n")
            answer = sock.recv(100)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed before all of it was sent: refused too
        assert answer == b"" or answer.startswith(b"HTTP/1.1 400 "), answer
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200


def test_settings_are_checked_when_read():
    with pytest.raises(ValueError):
        Settings.model_validate({"max_tools": -1})
    with pytest.raises(ValueError):
        Settings.model_validate({"max_schema_depth": 100_000})
    with pytest.raises(ValueError):
        Settings.model_validate({"max_tokens_limit": 5})  # a typo is an error, not ignored


# -- logs ---------------------------------------------------------------------------------------

INJECTED = "INJECTED localchat: fake log line"


def test_request_text_never_makes_a_raw_log_line(server: Server):
    evil = f"x\r\n{INJECTED}\n\x1b[2J"
    for body in ({"model": evil, "messages": HELLO},
                 {"model": TINY, "messages": HELLO, "tools": [tool("f", {"type": evil})]},
                 {"model": TINY, "messages": HELLO, "grammar": f'root ::= "{evil}'},
                 {"model": TINY, "messages": [{"role": evil, "content": evil}]}):
        r = post(server, body)
        assert 400 <= r.status_code < 500, r.text
    r = httpx.get(server.url + "/v1/" + "a%0d%0a" + INJECTED.replace(" ", "%20"), timeout=10)
    assert r.status_code == 404
    log = server.output()
    assert f"\n{INJECTED}" not in log and f"\r{INJECTED}" not in log and "\x1b[2J" not in log


def test_the_log_filter_escapes_messages_and_tracebacks(caplog: pytest.LogCaptureFixture):
    from localchat.logs import printable

    assert printable("a\r\nb\x1b[0m\u2028\ud800") == "a\\r\\nb\\x1b[0m\\u2028\\ud800"
    assert printable("plain text, ünïcode ✓") == "plain text, ünïcode ✓"
    assert len(printable("x" * 10_000)) < 2100
    log = logging.getLogger("localchat.api")
    with caplog.at_level(logging.WARNING, logger="localchat.api"):
        try:
            raise KeyError(f"model\r\n{INJECTED}")
        except KeyError:
            log.exception("request failed: %s", f"name\n{INJECTED}")
        log.warning("engine said %s", f"a\n{INJECTED}")
        logging.getLogger("localchat.llama").error(f"llama.cpp: parse error near\n{INJECTED}\n")
    assert caplog.records and f"\n{INJECTED}" not in caplog.text
    assert "Traceback (most recent call last)" in caplog.text and "KeyError" in caplog.text
    assert "\\r\\nINJECTED" in caplog.text


# -- the converter on its own (other protocols' routes may reach it) -------------------------------

@pytest.mark.parametrize("schema", [
    {"type": "integer", "minimum": 1, "maximum": []},  # found by the fuzzer: a 500 before the metaschema check
    {"type": "integer", "minimum": float("nan")},
    {"type": "integer", "exclusiveMaximum": float("inf"), "minimum": 0},
    {"type": "string", "minLength": "abc", "maxLength": [1]},
    {"type": "array", "minItems": "x", "maxItems": -5},
])
def test_odd_bounds_never_crash_the_converter(schema: dict):
    from localchat.grammars import schema_to_gbnf, validate

    assert metaschema.schema_problem(schema) is not None
    validate(schema_to_gbnf(schema))  # looser, but a grammar


def test_huge_integer_ranges_are_linear():
    from localchat.grammars.numbers import integer_range

    start = time.perf_counter()
    assert len(integer_range(-10**40, 10**40)) < 10_000
    assert len(integer_range(10**300, 17 * 10**299)) < 1000
    assert time.perf_counter() - start < 0.5
