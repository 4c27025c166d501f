"""The layers above the engine, in milliseconds: every protocol's translation, framing and
names over a scripted engine (engine/fake.py) that plays back a given text, in-process.

What the model writes is scripted here, so these tests check the splitting (content,
reasoning, tool calls), each protocol's own stop reasons and call ids, its error names for the
neutral request's fields, and the keepalives of a slow stream. The real engine is tested on
a real server by the other modules."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable
from pathlib import Path

import httpx
import pydantic
import pytest
from openai.types.responses import ResponseStreamEvent

from conftest import TINY_CTX
from localchat.api import create_app, sse
from localchat.api.openai.schemas import ChatCompletionRequest
from localchat.engine.fake import fake_factory
from localchat.errors import EngineError
from localchat.generation import Chat, ModelHost, constraints
from localchat.models import ModelSpec, Registry, Settings
from localchat.devtools.tool_schemas import ADD

pytestmark = pytest.mark.fast  # the fast tier (scripts/test --fast)

CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def registry(tiny_models: dict[str, Path]) -> Registry:
    specs = {"chatml": ModelSpec(name="chatml", path=tiny_models["chatml"], context_length=TINY_CTX, parallel=2),
             "qwen3": ModelSpec(name="qwen3", path=tiny_models["qwen3"], context_length=TINY_CTX, parallel=2)}
    return Registry(specs, "chatml", settings=Settings(worker=False))


def post(registry: Registry, script: Iterable[str] | Callable, path: str, body: dict, delay: float = 0.0) -> httpx.Response:
    """One request to an app whose every model plays `script` (pieces of text)."""
    pieces = list(script) if not callable(script) else None
    chat = Chat(ModelHost(registry, engine=fake_factory(script if callable(script) else lambda r, i: pieces,
                                                        delay=delay)))

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=create_app(chat, webui=False))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            try:
                return await client.post(path, json=body, timeout=30)
            finally:
                chat.host.close()

    return asyncio.run(run())


def sse_events(r: httpx.Response) -> list[tuple[str | None, object]]:
    out = []
    for block in r.text.split("\n\n"):
        name = next((line[7:] for line in block.splitlines() if line.startswith("event: ")), None)
        data = next((line[6:] for line in block.splitlines() if line.startswith("data: ")), None)
        if data is not None:
            out.append((name, data if data == "[DONE]" else json.loads(data)))
    return out


# -- reasoning and content ---------------------------------------------------------------------------

THOUGHT = ["Let me", " think.", "</think>", "\n\nIt is", " 4."]


def test_reasoning_is_split_from_the_answer_on_every_protocol(registry: Registry):
    chat = post(registry, THOUGHT, "/v1/chat/completions", {"model": "qwen3", "messages": HI}).json()
    message = chat["choices"][0]["message"]
    assert message["reasoning_content"] == "Let me think." and message["content"] == "It is 4."
    anthropic = post(registry, THOUGHT, "/v1/messages", {"model": "qwen3", "max_tokens": 50, "messages": HI}).json()
    assert [b["type"] for b in anthropic["content"]] == ["thinking", "text"]
    assert anthropic["content"][0]["thinking"] == "Let me think." and anthropic["content"][1]["text"] == "It is 4."
    responses = post(registry, THOUGHT, "/v1/responses", {"model": "qwen3", "input": "Hi"}).json()
    assert [item["type"] for item in responses["output"]] == ["reasoning", "message"]
    assert responses["output_text"] == "It is 4."
    ollama = post(registry, THOUGHT, "/api/chat", {"model": "qwen3", "messages": HI, "stream": False}).json()
    assert ollama["message"]["thinking"] == "Let me think." and ollama["message"]["content"] == "It is 4."


# -- tool calls: each protocol's ids and stop reasons ------------------------------------------------

TOOLS_OPENAI = [{"type": "function", "function": {"name": "add", "parameters": ADD}}]


def test_a_tool_call_in_each_protocols_words(registry: Registry):
    script = ["Sure.", CALL[:20], CALL[20:]]
    chat = post(registry, script, "/v1/chat/completions", {"messages": HI, "tools": TOOLS_OPENAI}).json()["choices"][0]
    assert chat["finish_reason"] == "tool_calls" and chat["message"]["content"] == "Sure."
    call = chat["message"]["tool_calls"][0]
    assert call["id"].startswith("call_") and json.loads(call["function"]["arguments"]) == {"a": 1, "b": 2}
    anthropic = post(registry, script, "/v1/messages", {"max_tokens": 99, "messages": HI,
                                                         "tools": [{"name": "add", "input_schema": ADD}]}).json()
    assert anthropic["stop_reason"] == "tool_use"
    use = anthropic["content"][1]
    assert use["type"] == "tool_use" and use["id"].startswith("toolu_") and use["input"] == {"a": 1, "b": 2}
    responses = post(registry, script, "/v1/responses", {"input": "Hi", "tools": [
        {"type": "function", "name": "add", "parameters": ADD}]}).json()
    item = next(i for i in responses["output"] if i["type"] == "function_call")
    assert item["call_id"].startswith("call_") and item["id"].startswith("fc_") and item["name"] == "add"
    ollama = post(registry, script, "/api/chat", {"messages": HI, "tools": TOOLS_OPENAI, "stream": False}).json()
    assert ollama["message"]["tool_calls"][0]["function"] == {"index": 0, "name": "add", "arguments": {"a": 1, "b": 2}}


# What Qwen2.5-Coder wrote instead of <tool_call> (recorded): read as calls on every protocol, streamed or not.
FENCED = '```json\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n```'
WRONG_TAG = '<tools>\n{"name": "add", "parameters": {"a": 1, "b": 2}}'
NOT_A_CALL = 'Here it is:\n```json\n{"name": "Bob", "arguments": {"a": 1}}\n```'
ROUTES = [("/v1/chat/completions", {"messages": HI, "tools": TOOLS_OPENAI}),
          ("/v1/messages", {"max_tokens": 99, "messages": HI, "tools": [{"name": "add", "input_schema": ADD}]}),
          ("/v1/responses", {"input": "Hi", "tools": [{"type": "function", "name": "add", "parameters": ADD}]}),
          ("/api/chat", {"messages": HI, "tools": TOOLS_OPENAI})]


def _calls_and_text(path: str, r: httpx.Response, stream: bool) -> tuple[list[tuple[str, dict]], str]:
    """(calls, text) of an answer on any of the four routes, streamed or whole."""
    if path == "/api/chat":
        lines = [json.loads(line) for line in r.text.splitlines() if line.strip()]
        calls = [c["function"] for line in lines for c in line["message"].get("tool_calls") or []]
        return [(c["name"], c["arguments"]) for c in calls], "".join(line["message"]["content"] for line in lines)
    if not stream:
        body = r.json()
        if path == "/v1/chat/completions":
            m = body["choices"][0]["message"]
            return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in m.get("tool_calls") or []], \
                m["content"] or ""
        if path == "/v1/messages":
            return [(b["name"], b["input"]) for b in body["content"] if b["type"] == "tool_use"], \
                "".join(b.get("text", "") for b in body["content"])
        return [(i["name"], json.loads(i["arguments"])) for i in body["output"] if i["type"] == "function_call"], \
            body["output_text"]
    events = [e for _, e in sse_events(r) if e != "[DONE]"]
    if path == "/v1/chat/completions":
        deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]  # type: ignore[index]
        calls: dict[int, list[str]] = {}
        for d in deltas:
            for c in d.get("tool_calls") or []:
                calls.setdefault(c["index"], ["", ""])
                calls[c["index"]][0] += c["function"].get("name") or ""
                calls[c["index"]][1] += c["function"].get("arguments") or ""
        return [(n, json.loads(a)) for n, a in calls.values()], "".join(d.get("content") or "" for d in deltas)
    if path == "/v1/messages":
        blocks: dict[int, list[str]] = {}
        text = ""
        for e in events:
            if e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use":  # type: ignore[index]
                blocks[e["index"]] = [e["content_block"]["name"], ""]  # type: ignore[index]
            elif e["type"] == "content_block_delta":  # type: ignore[index]
                delta = e["delta"]  # type: ignore[index]
                if delta["type"] == "input_json_delta":
                    blocks[e["index"]][1] += delta["partial_json"]  # type: ignore[index]
                elif delta["type"] == "text_delta":
                    text += delta["text"]
        return [(n, json.loads(a)) for n, a in blocks.values()], text
    done = next(e for e in events if e["type"] == "response.completed")  # type: ignore[index]
    out = done["response"]["output"]  # type: ignore[index]
    return [(i["name"], json.loads(i["arguments"])) for i in out if i["type"] == "function_call"], \
        done["response"]["output_text"] if "output_text" in done["response"] else "".join(  # type: ignore[index]
            c["text"] for i in out if i["type"] == "message" for c in i["content"])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("path, body", ROUTES, ids=[r[0] for r in ROUTES])
def test_calls_as_real_models_write_them_on_every_protocol(registry: Registry, path: str, body: dict, stream: bool):
    for written in (FENCED, WRONG_TAG):
        script = [written[:7], written[7:30], written[30:]]
        calls, text = _calls_and_text(path, post(registry, script, path, {**body, "stream": stream}), stream)
        assert calls == [("add", {"a": 1, "b": 2})] and not text.strip(), written
    calls, text = _calls_and_text(path, post(registry, [NOT_A_CALL], path, {**body, "stream": stream}), stream)
    assert calls == [] and text == NOT_A_CALL  # JSON that names no declared tool is the answer's text


def test_streamed_call_deltas_name_first_then_arguments(registry: Registry):
    script = [CALL[:25], CALL[25:40], CALL[40:]]
    events = sse_events(post(registry, script, "/v1/chat/completions",
                             {"messages": HI, "tools": TOOLS_OPENAI, "stream": True}))
    assert events[-1] == (None, "[DONE]")
    deltas = [e["choices"][0]["delta"] for _, e in events[:-1] if e["choices"]]  # type: ignore[index]
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert calls[0]["function"]["name"] == "add" and calls[0]["id"].startswith("call_")
    assert json.loads("".join(c["function"]["arguments"] for c in calls)) == {"a": 1, "b": 2}
    assert all("id" not in c for c in calls[1:])


# -- how an answer ends --------------------------------------------------------------------------------

def test_out_of_tokens_in_each_protocols_words(registry: Registry):
    long = ["a"] * 10
    assert post(registry, long, "/v1/chat/completions", {"messages": HI, "max_tokens": 3}).json()[
        "choices"][0]["finish_reason"] == "length"
    assert post(registry, long, "/v1/messages", {"max_tokens": 3, "messages": HI}).json()["stop_reason"] == "max_tokens"
    responses = post(registry, long, "/v1/responses", {"input": "Hi", "max_output_tokens": 3}).json()
    assert responses["status"] == "incomplete" and responses["incomplete_details"] == {"reason": "max_output_tokens"}
    assert post(registry, long, "/api/chat", {"messages": HI, "stream": False, "options": {"num_predict": 3}}).json()[
        "done_reason"] == "length"
    assert post(registry, long, "/v1/completions", {"prompt": "x", "max_tokens": 3}).json()[
        "choices"][0]["finish_reason"] == "length"


# -- errors: the neutral request's fields in each protocol's names -------------------------------------

UNSATISFIABLE = {"type": "object", "properties": {"a": False}, "required": ["a"]}


@pytest.mark.parametrize("path, body, param", [
    ("/v1/chat/completions", {"messages": HI, "tool_choice": "required",
                              "tools": [{"type": "function", "function": {"name": "f", "parameters": UNSATISFIABLE}}]},
     "tools.0.function.parameters"),
    ("/v1/chat/completions", {"messages": HI, "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": UNSATISFIABLE}}}, "response_format.json_schema.schema"),
    ("/v1/messages", {"max_tokens": 5, "messages": HI, "tool_choice": {"type": "any"},
                      "tools": [{"name": "f", "input_schema": UNSATISFIABLE}]}, "tools.0.input_schema"),
    ("/v1/messages", {"max_tokens": 5, "messages": HI, "output_config": {"format": {
        "type": "json_schema", "schema": UNSATISFIABLE}}}, "output_config.format.schema"),
    ("/v1/responses", {"input": "Hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": UNSATISFIABLE}}},
     "text.format.schema"),
    ("/api/chat", {"messages": HI, "format": UNSATISFIABLE}, "format"),
    ("/v1/chat/completions", {"messages": HI, "n": 3}, "n"),
    ("/v1/messages", {"max_tokens": 5, "messages": HI, "logit_bias": {"999999": 1}}, "logit_bias"),
])
def test_an_error_names_the_protocols_own_field(registry: Registry, path: str, body: dict, param: str):
    r = post(registry, ["x"], path, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    message = error if isinstance(error, str) else error["message"]
    assert message.startswith(f"{param}: ")
    if isinstance(error, dict) and "param" in error:
        assert error["param"] == param


# -- keepalives while nothing comes ------------------------------------------------------------------

@pytest.mark.parametrize("path, body, keepalive", [
    ("/v1/chat/completions", {"messages": HI, "stream": True}, ": keepalive"),
    ("/v1/messages", {"max_tokens": 5, "messages": HI, "stream": True}, "event: ping"),
    ("/v1/responses", {"input": "Hi", "stream": True}, "event: response.in_progress"),
    ("/v1/completions", {"prompt": "x", "stream": True}, ": keepalive"),
])
def test_a_slow_stream_sends_keepalives(registry: Registry, monkeypatch: pytest.MonkeyPatch, path: str, body: dict,
                                        keepalive: str):
    monkeypatch.setattr(sse, "KEEPALIVE", 0.02)
    text = post(registry, ["slow", " answer"], path, body, delay=0.15).text
    first = text.index("slow")
    assert keepalive in text[:first] and keepalive in text[first:]  # while waiting, and between tokens
    ollama = post(registry, ["slow"], "/api/chat", {"messages": HI}, delay=0.1).text
    assert "keepalive" not in ollama and json.loads(ollama.splitlines()[0])["message"]["content"] == "slow"


# -- an engine that fails after the first token ---------------------------------------------------

FAILS = ["Hello", EngineError("llama_decode returned -3")]


def test_an_engine_error_mid_stream_is_the_responses_error_event_then_failed(registry: Registry):
    r = post(registry, FAILS, "/v1/responses", {"model": "chatml", "input": "Hi", "stream": True})
    events = []
    for name, data in sse_events(r):
        events.append(pydantic.TypeAdapter(ResponseStreamEvent).validate_python(data))
        assert name == events[-1].type
    assert [e.type for e in events][-3:] == ["response.output_text.delta", "error", "response.failed"]
    assert events[-2].message == "llama_decode returned -3" and events[-2].code == "engine_error"
    failed = events[-1].response
    assert failed.status == "failed" and failed.error.message == "llama_decode returned -3"
    assert failed.output[0].status == "incomplete" and failed.output[0].content[0].text == "Hello"


def test_an_engine_error_mid_stream_is_anthropics_error_event(registry: Registry):
    r = post(registry, FAILS, "/v1/messages", {"model": "chatml", "max_tokens": 50, "messages": HI, "stream": True})
    events = sse_events(r)
    assert [name for name, _ in events][:2] == ["message_start", "ping"]
    assert events[-1] == ("error", {"type": "error", "error": {"type": "api_error",
                                                               "message": "llama_decode returned -3"}})


def test_two_streamed_calls_each_keep_their_index(registry: Registry):
    """Two calls streamed in pieces (a piece may end inside a call): OpenAI's deltas carry each
    call's id and name once, under its own index, and its arguments accumulate there."""
    two = CALL + "\n" + CALL.replace('"a": 1', '"a": 5')
    script = [two[i:i + 17] for i in range(0, len(two), 17)]
    r = post(registry, script, "/v1/chat/completions", {"model": "chatml", "messages": HI, "stream": True,
                                                         "tools": TOOLS_OPENAI})
    calls: dict[int, dict] = {}
    for _, data in sse_events(r):
        if data == "[DONE]":
            continue
        for tc in (data["choices"][0]["delta"].get("tool_calls") or []) if data["choices"] else []:
            if tc.get("id"):
                assert tc["index"] not in calls
                calls[tc["index"]] = {"id": tc["id"], "name": tc["function"]["name"], "arguments": ""}
            calls[tc["index"]]["arguments"] += tc["function"].get("arguments") or ""
    assert sorted(calls) == [0, 1] and calls[0]["id"] != calls[1]["id"]
    assert [json.loads(c["arguments"]) for c in calls.values()] == [{"a": 1, "b": 2}, {"a": 5, "b": 2}]


# -- each conversion once per request ------------------------------------------------------------------


def test_the_codecs_tools_are_made_once_per_request(registry: Registry, monkeypatch: pytest.MonkeyPatch):
    """The prompt (tools described), the grammar and every choice's splitter share one list."""
    made = []
    real = constraints.codec_tools
    monkeypatch.setattr(constraints, "codec_tools", lambda rules: made.append(rules) or real(rules))
    r = post(registry, [CALL], "/v1/chat/completions", {"model": "chatml", "messages": HI, "tools": TOOLS_OPENAI,
                                                        "tool_choice": "required", "n": 2})
    assert [c["finish_reason"] for c in r.json()["choices"]] == ["tool_calls", "tool_calls"]
    assert len(made) == 1


def test_the_answers_schema_is_found_once_per_request(registry: Registry, monkeypatch: pytest.MonkeyPatch):
    """Where the schema came in (an error about it names that field) and the schema itself: one look."""
    looks = []
    real = ChatCompletionRequest.schema_source
    monkeypatch.setattr(ChatCompletionRequest, "schema_source", lambda self: looks.append(1) or real(self))
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    r = post(registry, ['{"a": 1}'], "/v1/chat/completions", {"model": "chatml", "messages": HI, "json_schema": schema,
                                                              "response_format": {"type": "json_object"}})
    assert r.json()["choices"][0]["message"]["content"] == '{"a": 1}'
    assert len(looks) == 1
