"""Ollama's API (/api/...) through the official `ollama` client on a real server: Gemma 3 270M,
tiny random models (tiny-coder has fill-in-the-middle tokens, tiny-embed declares a
pooling type), Ollama's framing and error shape."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import httpx
import jsonschema
import numpy as np
import ollama
import pytest

from conftest import GEMMA, Server
from localchat.api.body import parse
from localchat.api.ollama.chat import ChatBody, chat_request
from localchat.api.ollama.stream import Answer, Clock, LineShape, collect, stream
from localchat.generation import Finish, ReasoningDelta, Sampling, ToolCallArguments, ToolCallStart, Usage
from localchat.models import ModelSpec, Registry
from localchat.devtools.tinymodels import FIM

DEFAULT = GEMMA  # the real model these tests use, by name
SHORT = {"num_predict": 12, "seed": 7, "temperature": 0.8}
HELLO = [{"role": "user", "content": "Tell me about the sea."}]
WEATHER = {"type": "object", "properties": {"city": {"type": "string"},
                                            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                                            "days": {"type": "integer"}}, "required": ["city", "days"]}
ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "number"}}, "required": ["a", "b"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add", "parameters": ADD}}]
SCHEMAS = {"get_weather": WEATHER, "add": ADD}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def client(server: Server) -> ollama.Client:
    return ollama.Client(host=server.url, timeout=120)


def error(call) -> ollama.ResponseError:
    with pytest.raises(ollama.ResponseError) as caught:
        result = call()
        list(result) if isinstance(result, Iterator) else result
    return caught.value


def test_version_and_the_models_listed(client: ollama.Client, http: httpx.Client):
    version = http.get("/api/version").json()["version"]
    assert tuple(map(int, version.split("."))) >= (0, 6, 4)  # Copilot's Ollama provider asks for 0.6.4
    listed = {m.model: m for m in client.list().models}
    assert {DEFAULT, "tiny-coder", "tiny-embed", "tiny-qwen3"} <= set(listed)
    gemma = listed[DEFAULT]
    assert gemma.details.format == "gguf" and gemma.details.family == "gemma3" and gemma.details.families == ["gemma3"]
    assert gemma.size > 100_000_000 and len(gemma.digest) == 64 and gemma.modified_at.year >= 2024
    assert gemma.details.parameter_size.endswith("M") and gemma.details.quantization_level.startswith("Q")
    assert listed["ghost"].size == 0  # listed, but its file is gone
    # Copilot's Ollama provider chats through /v1 with the `model` that /api/tags gave it
    r = http.post("/v1/chat/completions", json={"model": gemma.model, "messages": HELLO, "max_tokens": 1})
    assert r.status_code == 200 and r.json()["model"] == DEFAULT


def test_show_says_what_copilot_looks_for(client: ollama.Client):
    gemma = client.show(DEFAULT)
    assert gemma.capabilities == ["completion", "tools"]
    assert gemma.modelinfo["general.architecture"] == "gemma3" and gemma.modelinfo["gemma3.context_length"] == 8192
    assert gemma.modelinfo["general.basename"] == DEFAULT  # the name Copilot shows
    assert gemma.details.family == "gemma3" and "<start_of_turn>" in gemma.template
    assert 'stop "<end_of_turn>"' in gemma.parameters and "temperature 1.0" in gemma.parameters
    assert client.show(f"{DEFAULT}:latest").modelinfo == client.show("gemma3-270m").modelinfo == gemma.modelinfo
    assert client.show("tiny-coder").capabilities == ["completion", "tools", "insert"]
    assert client.show("tiny-qwen3").capabilities == ["completion", "tools", "thinking"]
    assert client.show("tiny-embed").capabilities == ["embedding"]
    assert client.show("tiny-qwen3").modelinfo["llama.context_length"] == 2048


def test_errors_in_ollamas_shape(client: ollama.Client, http: httpx.Client):
    e = error(lambda: client.chat(model="nope", messages=HELLO))
    assert e.status_code == 404 and "nope" in e.error
    r = http.post("/api/show", json={"model": "nope"})
    assert r.status_code == 404 and list(r.json()) == ["error"] and "localchat models add" in r.json()["error"]
    r = http.post("/api/chat", json={"messages": HELLO, "options": {"temperature": 9}})
    assert r.status_code == 400 and r.json()["error"].startswith("options.temperature")
    r = http.post("/api/generate", json={"prompt": "x", "keep_alive": "soon"})
    assert r.status_code == 400 and "keep_alive" in r.json()["error"]
    e = error(lambda: client.chat(model=DEFAULT, messages=[{**HELLO[0], "images": [b"\x89PNG"]}]))
    assert e.status_code == 400 and e.error.startswith("messages.0.images.0: ") and "vision projector" in e.error
    r = http.post("/api/pull", json={"model": "llama3"})  # Ollama's library is not a source: Hugging Face is
    assert r.status_code == 400 and "hf.co/OWNER/REPO[:QUANT]" in r.json()["error"]
    r = http.post("/api/push", json={"model": DEFAULT})
    assert r.status_code == 501 and "/api/pull" in r.json()["error"]
    assert http.get("/api/nothing").json() == {"error": "no route GET /api/nothing"}


def test_chat_streamed_and_not_give_the_same_seeded_answer(client: ollama.Client, http: httpx.Client):
    whole = client.chat(model=DEFAULT, messages=HELLO, options=SHORT, stream=False)
    assert whole.done and whole.done_reason in ("stop", "length") and whole.message.role == "assistant"
    assert isinstance(whole.message.content, str) and whole.model == DEFAULT
    assert whole.eval_count <= 12 and whole.prompt_eval_count > 5
    assert whole.done_reason == "stop" or whole.eval_count == 12
    assert whole.total_duration >= whole.eval_duration > 0 and whole.load_duration >= 0
    chunks = list(client.chat(model=DEFAULT, messages=HELLO, options=SHORT, stream=True))
    assert [c.done for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert "".join(c.message.content for c in chunks) == whole.message.content
    assert chunks[-1].eval_count == whole.eval_count and chunks[-1].done_reason == whole.done_reason
    # no `stream` field: Ollama streams by default, as NDJSON
    r = http.post("/api/chat", json={"model": f"{DEFAULT}:latest", "messages": HELLO, "options": SHORT})
    assert r.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert "".join(x["message"]["content"] for x in lines) == whole.message.content
    assert lines[-1]["done"] and lines[-1]["model"] == f"{DEFAULT}:latest" and "created_at" in lines[-1]


def test_ps_lists_the_loaded_models(client: ollama.Client):
    client.chat(model=DEFAULT, messages=HELLO, options={"num_predict": 1}, keep_alive="7m")
    gemma = next(m for m in client.ps().models if m.model == DEFAULT)
    assert gemma.size > 100_000_000 and gemma.size_vram == 0 and gemma.context_length == 8192
    left = (gemma.expires_at - datetime.now(timezone.utc)).total_seconds()
    assert 6 * 60 < left <= 7 * 60
    assert gemma.details.family == "gemma3" and len(gemma.digest) == 64


def test_tool_calls_are_whole_and_valid(client: ollama.Client):
    """Ollama has no tool_choice: the model decides whether to call (greedy, a model's choice
    differs between CPU kernels). Whatever it decides, every call that comes is whole and valid
    (from the trigger on, the grammar holds), and streaming gives the same calls, one a chunk.
    test_a_forced_call_goes_out_whole_in_one_chunk covers the framing of a call that surely comes."""
    options = {"num_predict": 60, "temperature": 0}  # a call cut by the limit is left out: still none invalid
    # a prompt decoded cold gives slightly other logits than the same prompt read from the cache
    # (docs/operations.md: "Same answer alone or in company"): both runs below read it from the cache
    client.chat(model=DEFAULT, messages=ASK, tools=TOOLS, options={"num_predict": 1})
    whole = client.chat(model=DEFAULT, messages=ASK, tools=TOOLS, options=options)
    for call in whole.message.tool_calls or []:
        jsonschema.validate(call.function.arguments, SCHEMAS[call.function.name])
    chunks = list(client.chat(model=DEFAULT, messages=ASK, tools=TOOLS, options=options, stream=True))
    streamed = [call for c in chunks for call in c.message.tool_calls or []]
    assert streamed == (whole.message.tool_calls or [])  # each call in one chunk, its arguments an object
    assert all(len(c.message.tool_calls or []) <= 1 for c in chunks)
    assert "".join(c.message.content for c in chunks) == whole.message.content


class ScriptedTurn:
    """A turn whose events are given: the engine's part of a call, without a model's choice."""

    def __init__(self, *events) -> None:
        self.script = events

    async def events(self):
        for event in self.script:
            yield 0, event


CALL = (ToolCallStart(0, "a", "get_weather"), ToolCallArguments(0, '{"city": "Par'),
        ToolCallArguments(0, 'is", "days": 2}'), ToolCallStart(1, "b", "add"), ToolCallArguments(1, '{"a": 1, '),
        ToolCallArguments(1, '"b": 2.5}'), ToolCallStart(2, "c", "add"), ToolCallArguments(2, '{"a": 1, "b'))


@pytest.mark.fast
def test_scripted_thinking_and_calls_are_framed():
    """Ollama's framing of events that surely come: thoughts in `thinking` (dropped with
    think=False), each call whole in one line with its arguments an object, a call cut by the
    length limit left out."""
    import asyncio

    finish = Finish("length", Usage(prompt_tokens=5, completion_tokens=40, cached_tokens=0))
    script = (ReasoningDelta("Paris, "), ReasoningDelta("two days."), *CALL, finish)
    shape = LineShape(chat=True, model="m")

    async def run(think: bool | None):
        lines = [json.loads(b) async for b in stream(ScriptedTurn(*script), shape, Answer(think), Clock())]
        whole = await collect(ScriptedTurn(*script), shape, Answer(think), Clock())
        return lines, whole

    lines, whole = asyncio.run(run(None))
    assert "".join(line["message"].get("thinking", "") for line in lines) == whole["message"]["thinking"] == \
        "Paris, two days."
    hidden_lines, hidden = asyncio.run(run(False))
    assert "thinking" not in hidden["message"] and all("thinking" not in x["message"] for x in hidden_lines)
    calls = [line["message"]["tool_calls"] for line in lines if line["message"].get("tool_calls")]
    assert calls == [[{"id": "call_a", "function": {"index": 0, "name": "get_weather",
                                                   "arguments": {"city": "Paris", "days": 2}}}],
                     [{"id": "call_b", "function": {"index": 1, "name": "add", "arguments": {"a": 1, "b": 2.5}}}]]
    assert lines[-1]["done"] and lines[-1]["done_reason"] == "length" and lines[-1]["eval_count"] == 40
    # the third call, cut by the length limit, is not a call Ollama's shape can carry
    assert whole["message"]["tool_calls"] == [c[0] for c in calls] and whole["message"]["content"] == ""


def test_format_with_a_json_schema_is_valid_json(client: ollama.Client):
    schema = {"type": "object", "properties": {"color": {"type": "string", "enum": ["red", "green", "blue"]},
                                               "sunny": {"type": "boolean"}},
              "required": ["color", "sunny"], "additionalProperties": False}
    # the grammar's longest object is ~90 tokens (bounded whitespace): 200 always lets it end
    r = client.chat(model=DEFAULT, messages=HELLO, format=schema, options={"num_predict": 200, "seed": 3})
    assert r.done_reason == "stop"
    jsonschema.validate(json.loads(r.message.content), schema)
    chunks = list(client.generate(model="tiny-llama3", prompt="Answer in JSON.", format="json", stream=True,
                                  options={"num_predict": 200, "seed": 3, "temperature": 0.2}))
    text = "".join(c.response for c in chunks)
    assert chunks[-1].done_reason == "length" or isinstance(json.loads(text), dict)
    assert text.lstrip().startswith("{")


def test_schema_errors_name_format(http: httpx.Client):
    unsatisfiable = {"type": "object", "properties": {"a": False}, "required": ["a"]}
    r = http.post("/api/chat", json={"messages": HELLO, "format": unsatisfiable})
    assert r.status_code == 400 and r.json()["error"].startswith("format") and "response_format" not in r.json()["error"]
    r = http.post("/api/chat", json={"messages": HELLO, "format": "yaml"})
    assert r.status_code == 400 and r.json()["error"].startswith("format")


def test_generate_with_a_template_raw_and_a_system_prompt(client: ollama.Client):
    options = {"num_predict": 5, "seed": 1}
    plain = client.generate(model=DEFAULT, prompt="The sea is", options=options)
    raw = client.generate(model=DEFAULT, prompt="The sea is", raw=True, options=options)
    system = client.generate(model=DEFAULT, prompt="The sea is", system="Answer briefly.", options=options)
    assert isinstance(plain.response, str) and plain.done and plain.eval_count <= 5
    assert raw.prompt_eval_count < plain.prompt_eval_count < system.prompt_eval_count


def test_suffix_needs_fim_tokens(client: ollama.Client):
    e = error(lambda: client.generate(model=DEFAULT, prompt="def f(", suffix="return 1", options={"num_predict": 4}))
    assert e.status_code == 400 and "suffix" in e.error


def test_a_model_without_pooling_does_not_embed(client: ollama.Client):
    e = error(lambda: client.embed(model=DEFAULT, input="hello"))
    assert e.status_code == 400 and "embedding = true" in e.error



def test_thinking_goes_to_its_own_field(client: ollama.Client):
    options = {"num_predict": 10, "seed": 2}
    thought = client.chat(model="tiny-qwen3", messages=HELLO, options=options, think=True)
    # (how long the tiny model thinks is its choice; test_scripted_thinking_and_calls_are_framed
    # shows the field with thoughts that surely come)
    hidden = client.chat(model="tiny-qwen3", messages=HELLO, options=options, think=False)
    assert hidden.message.thinking is None and hidden.message.content == thought.message.content


def test_a_tool_result_reaches_the_prompt(client: ollama.Client):
    def ask(result: str) -> ollama.ChatResponse:
        history = [*ASK, {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 1}}}]},
                   {"role": "tool", "content": result, "tool_name": "get_weather"}]
        return client.chat(model="tiny-chatml", messages=history, tools=TOOLS, options={"num_predict": 3, "seed": 1})

    short, long = ask("18 C"), ask("18 C, sunny, light wind from the west, and the sea is calm")
    assert short.done and long.done
    assert long.prompt_eval_count - short.prompt_eval_count >= 20


def test_generate_fills_in_the_middle(client: ollama.Client):
    options = {"num_predict": 16, "seed": 5, "temperature": 0.7}
    prefix, suffix = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"
    middle = client.generate(model="tiny-coder", prompt=prefix, suffix=suffix, options=options, stream=False)
    assert middle.done and middle.context == []
    by_hand = client.generate(model="tiny-coder", prompt=f"{FIM['pre']}{prefix}{FIM['suf']}{suffix}{FIM['mid']}",
                              raw=True, options=options)
    assert (middle.response, middle.prompt_eval_count) == (by_hand.response, by_hand.prompt_eval_count)
    streamed = list(client.generate(model="tiny-coder", prompt=prefix, suffix=suffix, options=options,
                                    stream=True))
    assert "".join(c.response for c in streamed) == middle.response and streamed[-1].done


def test_embeddings(client: ollama.Client):
    r = client.embed(model="tiny-embed", input=["hello world", "the sea", "hello world"])
    v = np.array(r.embeddings)
    assert v.shape[0] == 3 and np.allclose(np.linalg.norm(v, axis=1), 1.0)
    assert v[0] @ v[2] == pytest.approx(1.0) and v[0] @ v[1] < 0.99
    assert r.prompt_eval_count > 6 and r.total_duration > 0
    assert np.allclose(client.embeddings(model="tiny-embed", prompt="hello world").embedding, v[0])
    assert np.allclose(client.embed(model="tiny-embed", input="the sea").embeddings[0], v[1])
    short = np.array(client.embed(model="tiny-embed", input="the sea", dimensions=16).embeddings[0])
    assert short.shape == (16,) and np.linalg.norm(short) == pytest.approx(1.0)


def test_empty_requests_load_and_unload(client: ollama.Client):
    assert client.generate(model="tiny-llama3").done_reason == "load"
    assert "tiny-llama3" in [m.model for m in client.ps().models]
    assert client.generate(model="tiny-llama3:latest", keep_alive=0).done_reason == "unload"
    deadline = time.monotonic() + 10
    while "tiny-llama3" in [m.model for m in client.ps().models]:
        assert time.monotonic() < deadline, "keep_alive 0 did not unload the model"
        time.sleep(0.1)
    r = client.chat(model="tiny-llama3", messages=[])
    assert r.done and r.done_reason == "load" and r.message.content == ""


@pytest.mark.fast
def test_the_translation_of_options_and_tool_history():
    registry = Registry({"m": ModelSpec(name="m", path=Path("/m.gguf"), aliases=["alias"])}, "m")
    body = parse(ChatBody, {"model": "alias:latest", "options": {
        "num_predict": -1, "seed": -1, "repeat_last_n": 32, "stop": "\n", "num_ctx": 99999, "mirostat": 2}, "messages": [
        *ASK, {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "add", "arguments": {"a": 1, "b": 2}}},
            {"function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 1}'}},
            {"function": {"name": "add", "arguments": {"a": 3, "b": 4}}}]},
        {"role": "tool", "content": "18 C", "tool_name": "get_weather"},
        {"role": "tool", "content": "3", "tool_name": "add"}, {"role": "tool", "content": "7", "tool_name": "add"}]})
    request = chat_request(body, registry)
    assert request.model == "alias" and request.sampling == Sampling(penalty_last_n=32, stop=("\n",))
    calls = request.messages[1].tool_calls
    assert calls[1].arguments == {"city": "Paris", "days": 1}
    results = request.messages[2:]
    assert [(r.tool_call_id, r.name) for r in results] == [
        (calls[1].id, "get_weather"), (calls[0].id, "add"), (calls[2].id, "add")]
    assert len({c.id for c in calls}) == 3
