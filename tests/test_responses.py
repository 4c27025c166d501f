"""The Responses API (`POST /v1/responses`) through the official SDK: text, instructions,
streaming events, function calls under every tool_choice, structured output, reasoning items,
stored responses and `previous_response_id`, the prompt cache, and 400s naming the field.

Tiny models have random weights: what the tool and JSON tests prove is the constraint and the
translation, not the model."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pydantic
import pytest
from openai.types.responses import Response

from conftest import DEFAULT as SHIPPED_DEFAULT, GEMMA
from localchat.api.responses.request import Store
from localchat.families import FAMILIES
from localchat.devtools.tinymodels import vocabulary
from localchat.devtools.tool_schemas import ADD, SCHEMAS, WEATHER

DEFAULT = GEMMA  # the real model these tests use, by name
ONE_CALL = 500  # tokens: more than the longest call or object the grammar allows (see test_tools)
TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather in a city", "parameters": WEATHER},
         {"type": "function", "name": "add", "parameters": ADD, "strict": True}]
ASK = "What is the weather in Paris?"
VOCAB = vocabulary(FAMILIES["chatml"])[0]  # tiny-chatml's and tiny-qwen3's
TRIGGER, THINK_END = VOCAB.index("<tool_call>"), VOCAB.index("</think>")
# tiny-qwen3 keeps thinking to the token limit, whatever it picks
THINKS = {str(VOCAB.index(t)): -100 for t in (*FAMILIES["chatml"].stop_tokens, "</think>") if t in VOCAB}

MESSAGE_EVENTS = ["response.output_item.added", "response.content_part.added", "response.output_text.delta",
                  "response.output_text.done", "response.content_part.done", "response.output_item.done"]


def seeded(seed: int, **extra) -> dict:
    return {"extra_body": {"seed": seed, **extra}}


def calls_of(response) -> list:
    return [item for item in response.output if item.type == "function_call"]


def check_calls(calls, names=tuple(SCHEMAS)) -> None:
    assert calls, "no function call"
    for call in calls:
        assert call.id.startswith("fc_") and call.call_id.startswith("call_") and call.status == "completed"
        assert call.name in names
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


@pytest.fixture(scope="module")
def goes_on(http: httpx.Client) -> dict[str, float]:
    """logit_bias pushing Gemma's end-of-turn tokens down: it writes to the token limit."""
    r = http.post("/tokenize", json={"model": DEFAULT, "content": "<end_of_turn><eos>", "parse_special": True})
    tokens = r.json()["tokens"]
    assert len(tokens) == 2
    return {str(t): -100 for t in tokens}


def squash(types: list[str]) -> list[str]:
    """Event types with runs of the same delta type folded into one."""
    return [t for k, t in enumerate(types) if not (t.endswith(".delta") and k and types[k - 1] == t)]


# -- text --------------------------------------------------------------------------------------

def test_text_response_has_output_text_and_usage(client: openai.OpenAI, http: httpx.Client, goes_on: dict):
    r = client.responses.create(model=DEFAULT, input="Write a sentence about the sea.", max_output_tokens=8,
                                **seeded(1, logit_bias=goes_on))
    assert r.id.startswith("resp_") and r.object == "response" and r.model == DEFAULT
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    message = r.output[0]
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert message.content[0].type == "output_text" and message.content[0].annotations == []
    assert r.output_text and r.output_text == message.content[0].text
    u = r.usage
    assert u.input_tokens > 0 and u.output_tokens == 8 and u.total_tokens == u.input_tokens + u.output_tokens
    assert u.output_tokens_details.reasoning_tokens == 0 and u.input_tokens_details.cached_tokens >= 0
    assert r.max_output_tokens == 8 and r.tool_choice == "auto" and r.tools == [] and r.error is None
    raw = http.post("/v1/responses", json={"input": "Write a sentence about the sea.", "max_output_tokens": 8}).json()
    assert raw["model"] == SHIPPED_DEFAULT and raw["status"] in ("completed", "incomplete")  # no model: the default
    Response.model_validate(raw)  # every field the SDK's type declares, of its type (the SDK itself does not check)


def test_instructions_come_first_as_a_system_message(client: openai.OpenAI):
    plain = client.responses.create(model=DEFAULT, input="Hello", max_output_tokens=2, **seeded(2))
    told = client.responses.create(model=DEFAULT, input="Hello", instructions="Answer in French, briefly.",
                                   max_output_tokens=2, **seeded(2))
    assert told.instructions == "Answer in French, briefly."
    assert told.usage.input_tokens > plain.usage.input_tokens + 4


def test_stream_events_in_order_and_same_text(client: openai.OpenAI, goes_on: dict):
    kwargs = dict(model=DEFAULT, input="Tell me about the sea.", max_output_tokens=10, **seeded(3, logit_bias=goes_on))
    client.responses.create(**kwargs)  # the prompt is cached from here on: a cold prompt may sample differently
    whole = client.responses.create(**kwargs)
    with client.responses.stream(**kwargs) as s:
        events = list(s)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert squash([e.type for e in events]) == ["response.created", "response.in_progress", *MESSAGE_EVENTS,
                                                "response.incomplete"]
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = next(e for e in events if e.type == "response.output_text.done")
    final = events[-1].response
    assert deltas == done.text == final.output_text == whole.output_text
    item_id = events[2].item.id
    assert all(e.item_id == item_id for e in events[3:-2]) and final.output[0].id == item_id
    assert events[0].response.status == "in_progress" and events[0].response.id == final.id
    assert final.usage.output_tokens == 10
    raw = list(client.responses.create(stream=True, **kwargs))  # create(stream=True): every event typed too
    assert [type(e).__name__ for e in raw] == [type(e).__name__ for e in events]
    assert raw[-1].response.output_text == whole.output_text


def test_sse_names_each_event(http: httpx.Client):
    with http.stream("POST", "/v1/responses", json={"input": "Hi", "max_output_tokens": 3, "stream": True}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        blocks = [b for b in r.read().decode().split("\n\n") if b]
    for block in blocks:
        event, data = block.split("\n")
        assert event == "event: " + json.loads(data.removeprefix("data: "))["type"]


# -- function calls ----------------------------------------------------------------------------

@pytest.mark.parametrize("family", ["chatml", "llama3"])
def test_required_and_named_calls_validate(client: openai.OpenAI, family: str):
    r = client.responses.create(model=f"tiny-{family}", input=ASK, tools=TOOLS, tool_choice="required",
                                parallel_tool_calls=False, max_output_tokens=ONE_CALL, **seeded(3))
    assert r.status == "completed" and len(calls_of(r)) == 1 and r.output_text == ""
    check_calls(calls_of(r))
    r = client.responses.create(model=f"tiny-{family}", input=ASK, tools=TOOLS, max_output_tokens=ONE_CALL,
                                tool_choice={"type": "function", "name": "add"}, parallel_tool_calls=False, **seeded(4))
    check_calls(calls_of(r), names=("add",))
    assert r.tool_choice.type == "function" and r.tool_choice.name == "add"


@pytest.mark.parametrize("family", ["chatml", "mistral"])
def test_streamed_calls_accumulate(client: openai.OpenAI, family: str):
    with client.responses.stream(model=f"tiny-{family}", input=ASK, tools=TOOLS, tool_choice="required",
                                 parallel_tool_calls=False, max_output_tokens=ONE_CALL, **seeded(5)) as s:
        events = list(s)
        final = s.get_final_response()
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert squash([e.type for e in events]) == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed"]
    (call,) = calls_of(final)
    check_calls([call])
    streamed = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert streamed == call.arguments == events[-3].arguments
    assert events[2].item.call_id == call.call_id and events[2].item.arguments == ""


def test_auto_calls_after_the_trigger_and_none_never_calls(client: openai.OpenAI):
    pushed = {"logit_bias": {str(TRIGGER): 100}}
    r = client.responses.create(model="tiny-chatml", input=ASK, tools=TOOLS, parallel_tool_calls=False,
                                max_output_tokens=ONE_CALL, **seeded(6, **pushed))
    assert r.tool_choice == "auto"
    check_calls(calls_of(r))
    r = client.responses.create(model="tiny-chatml", input=ASK, tools=TOOLS, tool_choice="none",
                                max_output_tokens=20, **seeded(6, **pushed))
    assert not calls_of(r) and "<tool_call>" in r.output_text


def test_function_call_output_round_trip(client: openai.OpenAI):
    ask = [{"role": "user", "content": ASK}]
    first = client.responses.create(model="tiny-chatml", input=ask, tools=TOOLS, tool_choice="required",
                                    parallel_tool_calls=False, max_output_tokens=ONE_CALL, **seeded(7))
    (call,) = calls_of(first)
    answer = {"type": "function_call_output", "call_id": call.call_id, "output": '{"temperature": 21}'}
    second = client.responses.create(model="tiny-chatml", input=ask + first.output + [answer], tools=TOOLS,
                                     max_output_tokens=5, **seeded(7))
    assert second.status in ("completed", "incomplete")
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="tiny-chatml", input=ask + [{**answer, "call_id": "call_nope"}],
                                max_output_tokens=5)
    assert info.value.body["param"] == "input.1.call_id"


# -- structured output -------------------------------------------------------------------------

class Sum(pydantic.BaseModel):
    a: int
    b: float


def test_json_schema_output_validates(client: openai.OpenAI):
    fmt = {"format": {"type": "json_schema", "name": "add", "schema": ADD, "strict": True}}
    r = client.responses.create(model="tiny-chatml", input="Two numbers", text=fmt, max_output_tokens=ONE_CALL,
                                **seeded(8))
    assert r.status == "completed" and r.text.format.type == "json_schema"
    jsonschema.validate(json.loads(r.output_text), ADD)
    with client.responses.stream(model="tiny-llama3", input="Two numbers", text_format=Sum, max_output_tokens=ONE_CALL,
                                 **seeded(9)) as s:
        final = s.get_final_response()
    assert isinstance(final.output_parsed, Sum)  # the SDK sent Sum's strict schema and parsed the answer with it
    r = client.responses.create(model="tiny-chatml", input="JSON please", text={"format": {"type": "json_object"}},
                                max_output_tokens=ONE_CALL, **seeded(10))
    # json_object: any object, of any length; a cut one cannot be judged
    assert r.status == "incomplete" or isinstance(json.loads(r.output_text), dict)
    assert r.output_text.lstrip().startswith("{")


# -- reasoning ---------------------------------------------------------------------------------

def test_thinking_is_a_reasoning_item(client: openai.OpenAI):
    r = client.responses.create(model="tiny-qwen3", input=ASK, max_output_tokens=10,
                                reasoning={"effort": "low", "summary": "auto"}, **seeded(12, logit_bias=THINKS))
    (item,) = r.output
    assert item.type == "reasoning" and item.id.startswith("rs_") and r.status == "incomplete"
    assert item.summary[0].type == "summary_text" and item.summary[0].text and r.output_text == ""
    with client.responses.stream(model="tiny-qwen3", input=ASK, max_output_tokens=10,
                                 **seeded(12, logit_bias=THINKS)) as s:
        events = list(s)
    assert squash([e.type for e in events])[2:] == [
        "response.output_item.added", "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta", "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done", "response.output_item.done", "response.incomplete"]
    streamed = "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta")
    assert streamed == item.summary[0].text == events[-1].response.output[0].summary[0].text


def test_reasoning_then_a_call(client: openai.OpenAI):
    """Thinking ended at once (its closing tag pushed up): then the grammar holds the call."""
    r = client.responses.create(model="tiny-qwen3", input=ASK, tools=TOOLS, tool_choice="required",
                                parallel_tool_calls=False, max_output_tokens=ONE_CALL,
                                **seeded(14, logit_bias={str(THINK_END): 100}))
    assert [i.type for i in r.output if i.type != "reasoning"] == ["function_call"]
    check_calls(calls_of(r))


# -- stored responses, previous_response_id, the prompt cache -----------------------------------

def test_previous_response_id_continues_the_conversation(client: openai.OpenAI):
    first = client.responses.create(model=DEFAULT, input="My name is Ada.", max_output_tokens=6, **seeded(15))
    assert first.store is True
    follow = {"model": DEFAULT, "max_output_tokens": 3, **seeded(16)}
    chained = client.responses.create(previous_response_id=first.id, input="What is my name?", **follow)
    assert chained.previous_response_id == first.id
    spelled = client.responses.create(input=[{"role": "user", "content": "My name is Ada."}, *first.output,
                                             {"role": "user", "content": "What is my name?"}], **follow)
    assert chained.usage.input_tokens == spelled.usage.input_tokens  # the same prompt
    assert client.responses.retrieve(first.id).output_text == first.output_text
    unstored = client.responses.create(model=DEFAULT, input="Hi", store=False, max_output_tokens=2)
    for gone in (unstored.id, "resp_nope"):
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(previous_response_id=gone, input="Again", **follow)
        assert info.value.body["param"] == "previous_response_id" and "whole conversation" in info.value.body["message"]
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


def test_store_keeps_the_last_ones():
    store = Store(size=2)
    for n in range(3):
        store.put({"id": f"resp_{n}"}, [])
    assert list(store) == ["resp_1", "resp_2"]


def test_next_turn_reuses_the_cached_prefix(client: openai.OpenAI):
    ask = [{"role": "user", "content": "Describe a lighthouse in the fog, in detail."}]
    first = client.responses.create(model=DEFAULT, input=ask, store=False, max_output_tokens=8, **seeded(17))
    again = client.responses.create(model=DEFAULT, input=ask + first.output + [{"role": "user", "content": "More."}],
                                    store=False, max_output_tokens=4, **seeded(17))
    assert again.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens - 1 > 0


# -- what a client like the Codex CLI sends ----------------------------------------------------

def test_codex_shaped_request(http: httpx.Client):
    body = {"model": "tiny-chatml", "instructions": "You are a coding agent.", "stream": True, "store": False,
            "input": [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be safe."}]},
                      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List files"}]},
                      {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": None}],
            "tools": [{"type": "function", "name": "shell", "strict": False, "parameters": {
                "type": "object", "properties": {"command": {"type": "array", "maxItems": 3,
                                                             "items": {"type": "string", "maxLength": 8}}},
                "required": ["command"], "additionalProperties": False}}],
            "tool_choice": "required", "parallel_tool_calls": False, "reasoning": None, "seed": 18,
            "max_output_tokens": ONE_CALL,
            "include": ["reasoning.encrypted_content"], "prompt_cache_key": "abc", "text": {"verbosity": "low"}}
    with http.stream("POST", "/v1/responses", json=body) as r:
        assert r.status_code == 200
        events = [json.loads(b.split("data: ", 1)[1]) for b in r.read().decode().split("\n\n") if b]
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done[-1]["type"] == "function_call" and done[-1]["name"] == "shell"
    assert isinstance(json.loads(done[-1]["arguments"])["command"], list)
    assert events[-1]["type"] == "response.completed" and events[-1]["response"]["usage"]["total_tokens"] > 0


def test_models_list_has_the_shape_clients_probe(client: openai.OpenAI):
    models = client.models.list().data
    assert DEFAULT in [m.id for m in models]
    assert all(m.object == "model" and isinstance(m.created, int) and m.owned_by for m in models)


# -- errors ------------------------------------------------------------------------------------

BAD = [
    ({"input": [{"role": "user", "content": [{"type": "input_text", "text": "What is this?"},
                                             {"type": "input_image", "image_url": "https://x/y.png"}]}]},
     "input.0.content.1"),  # tiny-chatml reads no images
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input.0.type"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "add", "arguments": "{oops"}]}, "input.0.arguments"),
    ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice.type"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
    ({"text": {"format": {"type": "xml"}}}, "text.format.type"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"$ref": "#/$defs/nope"}}}},
     "text.format.schema"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"input": []}, "input"),
]


@pytest.mark.parametrize(("change", "param"), BAD)
def test_bad_request_is_a_400_naming_the_field(http: httpx.Client, change: dict, param: str):
    r = http.post("/v1/responses", json={"model": "tiny-chatml", "input": "Hi", "max_output_tokens": 2, **change})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert param.split(".")[0] in error["message"]


def test_a_hosted_tool_is_dropped_and_reported(client: openai.OpenAI):
    raw = client.responses.with_raw_response.create(
        model="tiny-chatml", input="Search", max_output_tokens=2,
        tools=[{"type": "web_search"}, TOOLS[0], {"type": "file_search", "vector_store_ids": ["x"]}])
    assert raw.headers["x-localchat-dropped-tools"] == "web_search, file_search"
    assert raw.parse().status in ("completed", "incomplete")
    plain = client.responses.with_raw_response.create(model="tiny-chatml", input="Hi", max_output_tokens=2, tools=TOOLS)
    assert "x-localchat-dropped-tools" not in plain.headers


