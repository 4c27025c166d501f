"""Every protocol over a real loopback uvicorn server, with the official SDKs (openai, anthropic,
ollama), on the scripted engine (engine/fake.py): no model is loaded and llama.cpp never runs, so
this module takes seconds. What the model writes, and how the engine fails, is scripted:

- translation: text, reasoning, tool calls and finish reasons in each protocol's words,
  streamed and whole, as the SDKs parse them;
- framing: each protocol's SSE (or NDJSON) frames, read raw;
- errors: an engine error or a worker crash after the stream has started is reported in-band,
  in the protocol's own shape; before the first byte (a non-streamed answer, a model marked
  failed, a full queue) it is an HTTP error in the protocol's shape, which the SDK raises.

Each request's user message names its script: `[[hello]]` plays SCRIPTS["hello"]."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import ollama
import openai
import pytest

from conftest import TINY_CTX, serve_in_thread
from localchat.api import create_app, sse
from localchat.engine.fake import Crash, FakeEngine, Step, Wait, prompt_text
from localchat.errors import EngineError
from localchat.generation import Chat, ModelHost
from localchat.models import ModelSpec, Registry, Settings
from test_protocols import sse_events
from localchat.devtools.tool_schemas import ADD

pytestmark = pytest.mark.fast

CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
DECODE_FAILED = "llama_decode returned -3"


def broken() -> Iterator[Step]:
    yield "Hi"
    raise RuntimeError("the script broke")


SCRIPTS: dict[str, object] = {
    "hello": ["Hello", ",", " world", "!"],
    "think": ["Let me", " think.", "</think>", "\n\nIt is", " 4."],
    "tool": ["Sure.", CALL[:20], CALL[20:]],
    "long": ["a"] * 40,
    "fail": ["Hello", EngineError(DECODE_FAILED)],  # the engine fails after the first token
    "fail-first": [Wait(0.05), EngineError(DECODE_FAILED)],  # … before it
    "crash": ["Hel", Crash()],  # the worker dies after the first token
    "slow": [Wait(0.4), "slow", " answer"],  # a slow prompt: nothing for 0.4 s
    "stall": ["tick"] + [Wait(0.05), "tick"] * 200,  # a long answer, slowly
    "broken": broken,  # a bug, not an engine error: reported as an internal error
}


def play(request, choice: int):
    names = re.findall(r"\[\[([\w-]+)\]\]", prompt_text(request))
    script = SCRIPTS[names[-1] if names else "hello"]
    return script() if callable(script) else script


class Served:
    def __init__(self, url: str, host: ModelHost) -> None:
        self.url, self.host = url, host

    def engine(self, model: str) -> FakeEngine:
        return self.host.loaded[model].engine  # type: ignore[return-value]


@pytest.fixture(scope="module")
def served(tiny_models: dict[str, Path]) -> Iterator[Served]:
    chatml, qwen3 = tiny_models["chatml"], tiny_models["qwen3"]
    specs = {name: ModelSpec(name=name, path=path, context_length=TINY_CTX, parallel=parallel)
             for name, path, parallel in (("chatml", chatml, 2), ("qwen3", qwen3, 2), ("doomed", chatml, 2),
                                          ("single", chatml, 1))}
    registry = Registry(specs, "chatml", settings=Settings(worker=False))

    def engine(path: Path, *, n_ctx: int, parallel: int, name: str, **_: object) -> FakeEngine:
        # "doomed" is marked failed at its second crash; "single" has one slot and no queue
        return FakeEngine(play, n_ctx=n_ctx, parallel=parallel, name=name,
                          crash_limit=2 if name == "doomed" else None, max_queue=0 if name == "single" else 64)

    host = ModelHost(registry, engine=engine)
    for url in serve_in_thread(create_app(Chat(host), webui=False)):
        yield Served(url, host)
    host.close()


@pytest.fixture(scope="module")
def oai(served: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url + "/v1", api_key="x", max_retries=0, timeout=30)


@pytest.fixture(scope="module")
def claude(served: Served) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=served.url, api_key="x", max_retries=0, timeout=30)


@pytest.fixture(scope="module")
def llama(served: Served) -> ollama.Client:
    return ollama.Client(host=served.url, timeout=30)


def ask(name: str) -> list[dict]:
    return [{"role": "user", "content": f"[[{name}]]"}]


TOOLS_OPENAI = [{"type": "function", "function": {"name": "add", "parameters": ADD}}]
TOOLS_ANTHROPIC = [{"name": "add", "input_schema": ADD}]
TOOLS_RESPONSES = [{"type": "function", "name": "add", "parameters": ADD}]


# -- OpenAI chat completions -----------------------------------------------------------------------

def test_chat_text_stream_and_whole(oai: openai.OpenAI):
    whole = oai.chat.completions.create(model="chatml", messages=ask("hello"))
    assert whole.choices[0].message.content == "Hello, world!" and whole.choices[0].finish_reason == "stop"
    assert whole.usage.completion_tokens == 4 and whole.usage.prompt_tokens > 0
    chunks = list(oai.chat.completions.create(model="chatml", messages=ask("hello"), stream=True,
                                              stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello, world!"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 4
    assert len({c.id for c in chunks}) == 1


def test_chat_reasoning_tools_and_length(oai: openai.OpenAI):
    thought = oai.chat.completions.create(model="qwen3", messages=ask("think")).choices[0].message
    assert thought.content == "It is 4." and thought.model_extra["reasoning_content"] == "Let me think."
    for stream in (False, True):
        kw = {"model": "chatml", "messages": ask("tool"), "tools": TOOLS_OPENAI}
        if stream:
            chunks = [c for c in oai.chat.completions.create(**kw, stream=True) if c.choices]
            deltas = [call for c in chunks for call in c.choices[0].delta.tool_calls or []]
            assert deltas[0].id.startswith("call_") and deltas[0].function.name == "add"
            assert json.loads("".join(d.function.arguments or "" for d in deltas)) == {"a": 1, "b": 2}
            assert chunks[-1].choices[0].finish_reason == "tool_calls"
        else:
            choice = oai.chat.completions.create(**kw).choices[0]
            assert choice.finish_reason == "tool_calls" and choice.message.content == "Sure."
            assert json.loads(choice.message.tool_calls[0].function.arguments) == {"a": 1, "b": 2}
    cut = oai.chat.completions.create(model="chatml", messages=ask("long"), max_tokens=3)
    assert cut.choices[0].finish_reason == "length" and cut.choices[0].message.content == "aaa"


@pytest.mark.parametrize("script, code, message", [("fail", "engine_error", DECODE_FAILED),
                                                   ("crash", "engine_crashed", "crashed (signal SIGSEGV)"),
                                                   ("broken", "engine_error", "internal error: the script broke")])
def test_chat_error_after_the_first_token_is_in_the_stream(oai: openai.OpenAI, script: str, code: str, message: str):
    text = []
    with pytest.raises(openai.APIError) as caught:
        for chunk in oai.chat.completions.create(model="chatml", messages=ask(script), stream=True):
            text.append(chunk.choices[0].delta.content or "")
    assert "".join(text) in ("Hello", "Hel", "Hi") and message in caught.value.message
    assert caught.value.code == code and caught.value.type == "server_error"


def test_chat_error_before_the_first_byte_is_a_500(oai: openai.OpenAI):
    for script, code in (("fail-first", "engine_error"), ("fail", "engine_error"), ("crash", "engine_crashed")):
        with pytest.raises(openai.InternalServerError) as caught:
            oai.chat.completions.create(model="chatml", messages=ask(script))
        assert caught.value.status_code == 500 and caught.value.body["code"] == code


# -- OpenAI completions ------------------------------------------------------------------------------

def test_completions_text_length_and_stream_error(oai: openai.OpenAI):
    whole = oai.completions.create(model="chatml", prompt="[[hello]]")
    assert whole.choices[0].text == "Hello, world!" and whole.choices[0].finish_reason == "stop"
    chunks = list(oai.completions.create(model="chatml", prompt="[[long]]", max_tokens=5, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == "aaaaa" and chunks[-1].choices[0].finish_reason == "length"
    text = []
    with pytest.raises(openai.APIError) as caught:
        for chunk in oai.completions.create(model="chatml", prompt="[[crash]]", stream=True):
            text.append(chunk.choices[0].text)
    assert "".join(text) == "Hel" and caught.value.code == "engine_crashed"
    with pytest.raises(openai.InternalServerError) as failed:
        oai.completions.create(model="chatml", prompt="[[fail]]")
    assert failed.value.body["message"] == DECODE_FAILED


# -- Anthropic Messages ------------------------------------------------------------------------------

def test_anthropic_text_thinking_tools_and_stop_reasons(claude: anthropic.Anthropic):
    hello = claude.messages.create(model="chatml", max_tokens=50, messages=ask("hello"))
    assert hello.content[0].text == "Hello, world!" and hello.stop_reason == "end_turn"
    assert hello.id.startswith("msg_") and hello.usage.output_tokens == 4
    thought = claude.messages.create(model="qwen3", max_tokens=50, messages=ask("think"))
    assert [b.type for b in thought.content] == ["thinking", "text"] and thought.content[0].thinking == "Let me think."
    tool = claude.messages.create(model="chatml", max_tokens=99, messages=ask("tool"), tools=TOOLS_ANTHROPIC)
    assert tool.stop_reason == "tool_use" and tool.content[0].text == "Sure."
    assert tool.content[1].id.startswith("toolu_") and tool.content[1].input == {"a": 1, "b": 2}
    assert claude.messages.create(model="chatml", max_tokens=3, messages=ask("long")).stop_reason == "max_tokens"
    with claude.messages.stream(model="chatml", max_tokens=99, messages=ask("tool"), tools=TOOLS_ANTHROPIC) as s:
        streamed = s.get_final_message()
    assert streamed.stop_reason == "tool_use" and streamed.content[1].input == {"a": 1, "b": 2}
    with claude.messages.stream(model="chatml", max_tokens=50, messages=ask("hello")) as s:
        assert "".join(s.text_stream) == "Hello, world!"
        assert s.get_final_message().stop_reason == "end_turn"


@pytest.mark.parametrize("script, message", [("fail", DECODE_FAILED), ("crash", "crashed (signal SIGSEGV)")])
def test_anthropic_error_after_the_first_token_is_an_error_event(claude: anthropic.Anthropic, script: str,
                                                                 message: str):
    text = []
    with pytest.raises(anthropic.APIStatusError) as caught:
        with claude.messages.stream(model="chatml", max_tokens=50, messages=ask(script)) as s:
            for piece in s.text_stream:
                text.append(piece)
    assert "".join(text) in ("Hello", "Hel")
    assert caught.value.body["error"]["type"] == "api_error" and message in caught.value.body["error"]["message"]
    with pytest.raises(anthropic.InternalServerError) as whole:
        claude.messages.create(model="chatml", max_tokens=50, messages=ask(script))
    assert whole.value.status_code == 500 and whole.value.body["error"]["type"] == "api_error"


# -- OpenAI Responses --------------------------------------------------------------------------------

def test_responses_text_tools_and_incomplete(oai: openai.OpenAI):
    hello = oai.responses.create(model="chatml", input="[[hello]]")
    assert hello.output_text == "Hello, world!" and hello.status == "completed"
    tool = oai.responses.create(model="chatml", input="[[tool]]", tools=TOOLS_RESPONSES)
    call = next(i for i in tool.output if i.type == "function_call")
    assert call.call_id.startswith("call_") and json.loads(call.arguments) == {"a": 1, "b": 2}
    cut = oai.responses.create(model="chatml", input="[[long]]", max_output_tokens=3)
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    thought = oai.responses.create(model="qwen3", input="[[think]]")
    assert [i.type for i in thought.output] == ["reasoning", "message"] and thought.output_text == "It is 4."
    events = list(oai.responses.create(model="chatml", input="[[hello]]", stream=True))
    assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]
    assert events[-1].type == "response.completed" and events[-1].response.output_text == "Hello, world!"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Hello, world!"


@pytest.mark.parametrize("script, code", [("fail", "engine_error"), ("crash", "engine_crashed")])
def test_responses_error_after_the_first_token_is_error_then_failed(oai: openai.OpenAI, script: str, code: str):
    events = list(oai.responses.create(model="chatml", input=f"[[{script}]]", stream=True))
    assert [e.type for e in events][-2:] == ["error", "response.failed"]
    assert events[-2].code == code
    failed = events[-1].response
    assert failed.status == "failed" and failed.error.code == "server_error"
    assert failed.output[0].status == "incomplete" and failed.output[0].content[0].text in ("Hello", "Hel")
    with pytest.raises(openai.InternalServerError) as whole:
        oai.responses.create(model="chatml", input=f"[[{script}]]")
    assert whole.value.body["code"] == code


# -- Ollama ------------------------------------------------------------------------------------------

def test_ollama_chat_and_generate(llama: ollama.Client):
    hello = llama.chat(model="chatml", messages=ask("hello"))
    assert hello.message.content == "Hello, world!" and hello.done_reason == "stop" and hello.eval_count == 4
    parts = list(llama.chat(model="chatml", messages=ask("hello"), stream=True))
    assert "".join(p.message.content for p in parts) == "Hello, world!" and parts[-1].done
    thought = llama.chat(model="qwen3", messages=ask("think"))
    assert thought.message.thinking == "Let me think." and thought.message.content == "It is 4."
    tool = llama.chat(model="chatml", messages=ask("tool"), tools=TOOLS_OPENAI)
    assert tool.message.tool_calls[0].function.name == "add"
    assert tool.message.tool_calls[0].function.arguments == {"a": 1, "b": 2}
    assert llama.chat(model="chatml", messages=ask("long"), options={"num_predict": 3}).done_reason == "length"
    generated = llama.generate(model="chatml", prompt="[[hello]]")
    assert generated.response == "Hello, world!" and generated.done_reason == "stop"
    pieces = list(llama.generate(model="chatml", prompt="[[long]]", options={"num_predict": 4}, stream=True))
    assert "".join(p.response for p in pieces) == "aaaa" and pieces[-1].done_reason == "length"


@pytest.mark.parametrize("script, message", [("fail", DECODE_FAILED), ("crash", "crashed (signal SIGSEGV)")])
def test_ollama_error_after_the_first_token_is_an_error_line(llama: ollama.Client, script: str, message: str):
    for call in (lambda: llama.chat(model="chatml", messages=ask(script), stream=True),
                 lambda: llama.generate(model="chatml", prompt=f"[[{script}]]", stream=True)):
        text = []
        with pytest.raises(ollama.ResponseError) as caught:
            for part in call():
                text.append(part.message.content if hasattr(part, "message") else part.response)
        assert "".join(text) in ("Hello", "Hel") and message in caught.value.error
    with pytest.raises(ollama.ResponseError) as whole:
        llama.chat(model="chatml", messages=ask(script), stream=False)
    assert whole.value.status_code == 500 and message in whole.value.error


# -- framing, read raw -------------------------------------------------------------------------------

STREAMED = {
    "chat": ("/v1/chat/completions", lambda s: {"model": "chatml", "messages": ask(s), "stream": True}),
    "completions": ("/v1/completions", lambda s: {"model": "chatml", "prompt": f"[[{s}]]", "stream": True}),
    "anthropic": ("/v1/messages", lambda s: {"model": "chatml", "max_tokens": 50, "messages": ask(s), "stream": True}),
    "responses": ("/v1/responses", lambda s: {"model": "chatml", "input": f"[[{s}]]", "stream": True}),
    "ollama-chat": ("/api/chat", lambda s: {"model": "chatml", "messages": ask(s)}),
    "ollama-generate": ("/api/generate", lambda s: {"model": "chatml", "prompt": f"[[{s}]]"}),
}


def raw(served: Served, protocol: str, script: str) -> httpx.Response:
    path, body = STREAMED[protocol]
    return httpx.post(served.url + path, json=body(script), timeout=30)


@pytest.mark.parametrize("protocol", list(STREAMED))
def test_framing_of_a_whole_answer(served: Served, protocol: str):
    r = raw(served, protocol, "hello")
    assert r.status_code == 200
    if protocol.startswith("ollama"):
        assert r.headers["content-type"].startswith("application/x-ndjson") and r.text.endswith("\n")
        lines = [json.loads(line) for line in r.text.splitlines()]
        assert [line["done"] for line in lines] == [False] * (len(lines) - 1) + [True]
        return
    assert r.headers["content-type"].startswith("text/event-stream") and r.text.endswith("\n\n")
    events = sse_events(r)
    if protocol in ("chat", "completions"):
        assert events[-1] == (None, "[DONE]") and all(name is None for name, _ in events)
        return
    assert all(name == data["type"] for name, data in events)  # type: ignore[index]
    names = [name for name, _ in events]
    if protocol == "anthropic":
        assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]
    else:
        assert names[0] == "response.created" and names[-1] == "response.completed"


# What each protocol's stream ends with when the engine fails after the first token: its own error shape.
@pytest.mark.parametrize("protocol", list(STREAMED))
def test_the_in_stream_error_shape(served: Served, protocol: str):
    r = raw(served, protocol, "fail")
    assert r.status_code == 200  # the stream had begun
    if protocol.startswith("ollama"):
        last = json.loads(r.text.splitlines()[-1])
        assert last == {"error": DECODE_FAILED}
        return
    events = sse_events(r)
    if protocol in ("chat", "completions"):
        assert events[-1] == (None, "[DONE]")
        assert events[-2] == (None, {"error": {"message": DECODE_FAILED, "type": "server_error", "param": None,
                                               "code": "engine_error"}})
    elif protocol == "anthropic":
        assert events[-1] == ("error", {"type": "error", "error": {"type": "api_error", "message": DECODE_FAILED}})
        assert "message_stop" not in [name for name, _ in events]
    else:
        (name, error), (last, failed) = events[-2:]
        assert name == "error" and error["code"] == "engine_error" and error["message"] == DECODE_FAILED  # type: ignore[index]
        assert last == "response.failed" and failed["response"]["status"] == "failed"  # type: ignore[index]
        assert failed["response"]["error"] == {"code": "server_error", "message": DECODE_FAILED}  # type: ignore[index]


# -- slow prompts, clients that leave --------------------------------------------------------------

def test_a_slow_prompt_keeps_every_sdk_waiting(served: Served, oai: openai.OpenAI, claude: anthropic.Anthropic,
                                               llama: ollama.Client, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sse, "KEEPALIVE", 0.05)  # the server runs in this process
    text = raw(served, "chat", "slow").text
    assert text.index(": keepalive") < text.index("slow")
    chunks = oai.chat.completions.create(model="chatml", messages=ask("slow"), stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "slow answer"
    with claude.messages.stream(model="chatml", max_tokens=50, messages=ask("slow")) as s:
        assert "".join(s.text_stream) == "slow answer"
    events = list(oai.responses.create(model="chatml", input="[[slow]]", stream=True))
    assert events[-1].response.output_text == "slow answer"
    assert [e.type for e in events].count("response.in_progress") > 1  # its keepalives
    assert "".join(p.message.content for p in llama.chat(model="chatml", messages=ask("slow"), stream=True)) == \
        "slow answer"


def test_a_client_that_leaves_frees_the_slot(served: Served):
    with httpx.stream("POST", served.url + "/v1/chat/completions", timeout=30,
                      json={"model": "chatml", "messages": ask("stall"), "stream": True}) as r:
        lines = r.iter_lines()  # held: a dropped line iterator would close the response
        next(line for line in lines if "tick" in line)
        engine = served.engine("chatml")
        assert engine.stats().busy == 1
    deadline = time.monotonic() + 5
    while engine.stats().busy and time.monotonic() < deadline:
        time.sleep(0.02)
    assert engine.stats().busy == 0


# -- errors before the first byte: HTTP errors in each protocol's shape -----------------------------

def test_a_full_queue_is_a_429_in_each_protocols_shape(served: Served, oai: openai.OpenAI,
                                                       claude: anthropic.Anthropic, llama: ollama.Client):
    with httpx.stream("POST", served.url + "/v1/chat/completions", timeout=30,
                      json={"model": "single", "messages": ask("stall"), "stream": True}) as r:
        lines = r.iter_lines()  # held: a dropped line iterator would close the response
        next(line for line in lines if "tick" in line)  # its only slot is busy, and it has no queue
        with pytest.raises(openai.RateLimitError) as chat:
            oai.chat.completions.create(model="single", messages=ask("hello"), stream=True)
        assert chat.value.code == "queue_full" and chat.value.response.headers["retry-after"] == "1"
        with pytest.raises(anthropic.RateLimitError) as claude_error:
            claude.messages.create(model="single", max_tokens=5, messages=ask("hello"), stream=True)
        assert claude_error.value.body["error"]["type"] == "rate_limit_error"
        with pytest.raises(ollama.ResponseError) as ollama_error:
            llama.chat(model="single", messages=ask("hello"))
        assert ollama_error.value.status_code == 429 and "waiting" in ollama_error.value.error


def test_a_crash_loop_marks_the_model_failed_a_503_everywhere(served: Served, oai: openai.OpenAI,
                                                              claude: anthropic.Anthropic, llama: ollama.Client):
    for _ in range(2):  # its crash limit
        with pytest.raises(openai.APIError):
            list(oai.chat.completions.create(model="doomed", messages=ask("crash"), stream=True))
    assert served.engine("doomed").state == "failed"
    with pytest.raises(openai.APIStatusError) as chat:
        oai.chat.completions.create(model="doomed", messages=ask("hello"), stream=True)
    assert chat.value.status_code == 503 and chat.value.code == "model_unavailable"
    assert "is marked failed" in chat.value.message
    with pytest.raises(anthropic.APIStatusError) as claude_error:
        claude.messages.create(model="doomed", max_tokens=5, messages=ask("hello"), stream=True)
    assert claude_error.value.status_code == 503 and claude_error.value.body["error"]["type"] == "overloaded_error"
    with pytest.raises(openai.APIStatusError) as responses:
        oai.responses.create(model="doomed", input="[[hello]]", stream=True)
    assert responses.value.status_code == 503
    with pytest.raises(ollama.ResponseError) as ollama_error:
        llama.generate(model="doomed", prompt="[[hello]]")
    assert ollama_error.value.status_code == 503 and "is marked failed" in ollama_error.value.error
    assert oai.chat.completions.create(model="chatml", messages=ask("hello")).choices[0].message.content  # the others go on
