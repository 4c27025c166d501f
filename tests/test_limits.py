"""Every request limit is decided once, in generation (generation/limits.py), on the neutral
request; each protocol's edge only maps the neutral field to its own (`stop` → Anthropic's
`stop_sequences`, Ollama's `options.stop`; `tools.0.parameters` → `tools.0.function.parameters`,
`tools.0.input_schema`). Over the scripted engine (engine/fake.py): no model runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from conftest import TINY_CTX
from localchat.api import create_app
from localchat.engine.fake import FakeEngine
from localchat.errors import InvalidRequest
from localchat.generation import Chat, GenerationRequest, ModelHost, OutputRules, Sampling, ToolSpec
from localchat.generation import limits
from localchat.models import ModelSpec, Registry, Settings

pytestmark = pytest.mark.fast

LIMITS = Settings(worker=False, max_tokens_cap=3, max_stop_strings=2, max_stop_chars=5, max_tools=2,
                  max_tool_schema_bytes=1024, max_schema_depth=6)
SEVEN_DEEP = {"properties": {"a": {"properties": {"b": {"properties": {"c": {}}}}}}}
FLAT = {"type": "object"}
HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def http(tiny_models: dict[str, Path]) -> Iterator[TestClient]:
    spec = ModelSpec(name="m", path=tiny_models["chatml"], context_length=TINY_CTX, parallel=2)
    registry = Registry({"m": spec}, "m", settings=LIMITS)

    def engine(path: Path, *, n_ctx: int, parallel: int, name: str, **_: object) -> FakeEngine:
        return FakeEngine(lambda request, choice: ["a"] * 40, n_ctx=n_ctx, parallel=parallel, name=name)

    host = ModelHost(registry, engine=engine)
    with TestClient(create_app(Chat(host), webui=False), base_url="http://127.0.0.1",
                    client=("127.0.0.1", 50000)) as client:  # a loopback client, as the server wants
        yield client
    host.close()


def refused(http: TestClient, path: str, body: dict[str, Any]) -> str:
    """The 400's message, whatever the protocol's error shape; it opens with the protocol's field."""
    r = http.post(path, json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    if isinstance(err, str):  # Ollama's
        return err
    if "param" in err:  # OpenAI's: the field is also `param`
        assert err["message"].startswith(f"{err['param']}: "), err
    return err["message"]


CHAT, COMPLETIONS, MESSAGES, RESPONSES, OLLAMA = ("/v1/chat/completions", "/v1/completions", "/v1/messages",
                                                  "/v1/responses", "/api/chat")
BASE = {CHAT: {"messages": HELLO}, COMPLETIONS: {"prompt": "hi"}, MESSAGES: {"max_tokens": 5, "messages": HELLO},
        RESPONSES: {"input": "hi"}, OLLAMA: {"messages": HELLO, "stream": False}}


def tools(path: str, schemas: list[dict]) -> list[dict]:
    if path == MESSAGES:
        return [{"name": f"t{i}", "input_schema": s} for i, s in enumerate(schemas)]
    if path == RESPONSES:
        return [{"type": "function", "name": f"t{i}", "parameters": s} for i, s in enumerate(schemas)]
    return [{"type": "function", "function": {"name": f"t{i}", "parameters": s}} for i, s in enumerate(schemas)]


@pytest.mark.parametrize("path, body, field", [
    (CHAT, {"stop": ["a", "b", "c"]}, "stop"),
    (COMPLETIONS, {"stop": ["a", "b", "c"]}, "stop"),
    (MESSAGES, {"stop_sequences": ["a", "b", "c"]}, "stop_sequences"),
    (OLLAMA, {"options": {"stop": ["a", "b", "c"]}}, "options.stop"),
])
def test_stop_strings_in_each_protocols_words(http: TestClient, path: str, body: dict, field: str):
    assert refused(http, path, {**BASE[path], **body}).startswith(f"{field}: at most 2 stop strings (max_stop_strings)")
    long = {k: (["abcdef"] if k != "options" else {"stop": "abcdef"}) for k in body}
    assert refused(http, path, {**BASE[path], **long}).startswith(f"{field}: a stop string may be at most 5 characters")
    within = {k: (["ab", "cd"] if k != "options" else {"stop": ["ab", "cd"]}) for k in body}
    assert http.post(path, json={**BASE[path], **within}).status_code == 200


@pytest.mark.parametrize("path, field", [(CHAT, "tools.1.function.parameters"), (MESSAGES, "tools.1.input_schema"),
                                         (RESPONSES, "tools.1.parameters"), (OLLAMA, "tools.1.function.parameters")])
def test_tools_count_size_and_depth_in_each_protocols_words(http: TestClient, path: str, field: str):
    base = BASE[path]
    assert refused(http, path, {**base, "tools": tools(path, [FLAT] * 3)}).startswith("tools: 3 tools; at most 2")
    big = {"type": "object", "description": "x" * 600}
    assert "(max_tool_schema_bytes)" in refused(http, path, {**base, "tools": tools(path, [big, big])})
    message = refused(http, path, {**base, "tools": tools(path, [FLAT, SEVEN_DEEP])})
    assert message.startswith(f"{field}: ") and "max_schema_depth" in message


@pytest.mark.parametrize("path, body, field", [
    (CHAT, {"response_format": {"type": "json_schema", "json_schema": {"name": "o", "schema": SEVEN_DEEP}}},
     "response_format.json_schema.schema"),
    (CHAT, {"json_schema": SEVEN_DEEP}, "json_schema"),
    (COMPLETIONS, {"json_schema": SEVEN_DEEP}, "json_schema"),
    (MESSAGES, {"output_config": {"format": {"type": "json_schema", "schema": SEVEN_DEEP}}}, "output_config.format.schema"),
    (RESPONSES, {"text": {"format": {"type": "json_schema", "name": "o", "schema": SEVEN_DEEP}}}, "text.format.schema"),
    (OLLAMA, {"format": SEVEN_DEEP}, "format"),
])
def test_the_answers_schema_depth_in_each_protocols_words(http: TestClient, path: str, body: dict, field: str):
    message = refused(http, path, {**BASE[path], **body})
    assert message.startswith(f"{field}: ") and "max_schema_depth" in message


def test_n_is_at_most_the_models_parallel(http: TestClient):
    assert refused(http, CHAT, {**BASE[CHAT], "n": 3}).startswith("n: at most 2 completions")
    assert refused(http, COMPLETIONS, {**BASE[COMPLETIONS], "n": 3}).startswith("n: at most 2 completions")
    assert http.post(CHAT, json={**BASE[CHAT], "n": 2}).status_code == 200


@pytest.mark.parametrize("path, body", [(CHAT, {"max_tokens": 10**30}), (CHAT, {"max_completion_tokens": 100}),
                                        (CHAT, {}), (COMPLETIONS, {"max_tokens": 100}),
                                        (MESSAGES, {"max_tokens": 32000}), (RESPONSES, {"max_output_tokens": 100}),
                                        (OLLAMA, {"options": {"num_predict": 100}}), (OLLAMA, {})])
def test_max_tokens_is_a_ceiling_lowered_to_the_cap_in_every_protocol(http: TestClient, path: str, body: dict):
    r = http.post(path, json={**BASE[path], **body})
    assert r.status_code == 200, r.text
    answer = r.json()
    generated = {CHAT: lambda: answer["usage"]["completion_tokens"],
                 COMPLETIONS: lambda: answer["usage"]["completion_tokens"],
                 MESSAGES: lambda: answer["usage"]["output_tokens"],
                 RESPONSES: lambda: answer["usage"]["output_tokens"],
                 OLLAMA: lambda: answer["eval_count"]}[path]()
    assert generated == LIMITS.max_tokens_cap


# -- the one place, on the neutral request ---------------------------------------------------------

def neutral(**kw: Any) -> GenerationRequest:
    return GenerationRequest(messages=(), **kw)


@pytest.mark.parametrize("request_, field, words", [
    (neutral(sampling=Sampling(stop=("a", "b", "c"))), "stop", "max_stop_strings"),
    (neutral(sampling=Sampling(stop=("abcdef",))), "stop", "max_stop_chars"),
    (neutral(output=OutputRules(tools=tuple(ToolSpec(f"t{i}", None, None) for i in range(3)))), "tools", "max_tools"),
    (neutral(output=OutputRules(tools=(ToolSpec("t", None, {"description": "é" * 600}),))), "tools",
     "max_tool_schema_bytes"),  # 600 characters, 1200 bytes of UTF-8: bytes are what count
    (neutral(output=OutputRules(tools=(ToolSpec("t", None, FLAT), ToolSpec("u", None, SEVEN_DEEP)))),
     "tools.1.parameters", "max_schema_depth"),
    (neutral(output=OutputRules(json_schema=SEVEN_DEEP)), "json_schema", "max_schema_depth"),
])
def test_each_limit_names_a_neutral_field(request_: GenerationRequest, field: str, words: str):
    with pytest.raises(InvalidRequest) as err:
        limits.check(request_, LIMITS)
    assert err.value.field == field and err.value.param is None and words in err.value.message


def test_within_every_limit_nothing_is_refused():
    limits.check(neutral(sampling=Sampling(stop=("ab", "cd")),
                         output=OutputRules(tools=(ToolSpec("t", None, FLAT), ToolSpec("u", None, None)))), LIMITS)
    limits.check_n(2, 2)
    with pytest.raises(InvalidRequest) as err:
        limits.check_n(3, 2)
    assert err.value.field == "n"
    assert [limits.max_tokens(asked, LIMITS) for asked in (None, 1, 3, 4, 10**30)] == [3, 1, 3, 3, 3]
