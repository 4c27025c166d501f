"""The Anthropic Messages API (`/v1/messages`, `/v1/messages/count_tokens`) through the official
`anthropic` SDK against a real server.

Tiny models have random weights: tool calls prove the constraint (every forced call validates
against its schema), not the model. Sampling is seeded through the `seed` extension."""

from __future__ import annotations

import json
import re

import anthropic
import httpx
import jsonschema
import pytest

from conftest import DEFAULT, GEMMA
from localchat.api.anthropic.stream import Blocks
from localchat.families import FAMILIES
from localchat.generation import Delta, ToolCallArguments, ToolCallStart
from localchat.devtools.tinymodels import vocabulary
from localchat.devtools.tool_schemas import ADD, SCHEMAS, WEATHER

TOOLS = [{"name": "get_weather", "description": "Weather in a city", "input_schema": WEATHER},
         {"name": "add", "input_schema": ADD}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
CHATML = vocabulary(FAMILIES["chatml"])[0]
TRIGGER = str(CHATML.index(FAMILIES["chatml"].codec.trigger))  # <tool_call>
END = str(CHATML.index(FAMILIES["chatml"].eos_token))  # <|im_end|>
# tiny-chatml's end-of-turn tokens pushed down: the answer runs to max_tokens, whatever the model picks
NO_END = {str(CHATML.index(t)): -100 for t in FAMILIES["chatml"].stop_tokens if t in CHATML}
ONE_CALL = 500  # tokens: more than the longest call the tools' grammar allows (see test_tools)


@pytest.fixture(scope="module")
def claude(server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=120)


def sse(http: httpx.Client, body: dict) -> list[tuple[str, dict]]:
    """The raw events of a streamed answer: (event name, data); each data's type is its name."""
    events, name = [], None
    with http.stream("POST", "/v1/messages", json={**body, "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line[len("event: "):]
            elif line.startswith("data: "):
                data = json.loads(line[len("data: "):])
                assert data["type"] == name
                events.append((name, data))
    return events


ORDER = re.compile(r"message_start ping (content_block_start (content_block_delta )*content_block_stop )*"
                   r"message_delta message_stop ")


def check_order(events: list[tuple[str, dict]]) -> None:
    names = " ".join(n for n, _ in events) + " "
    assert ORDER.fullmatch(names), names
    index = -1
    for name, data in events:
        if name == "content_block_start":
            assert data["index"] == index + 1
            index = data["index"]
        elif name in ("content_block_delta", "content_block_stop"):
            assert data["index"] == index


def check_tool_uses(blocks, names: tuple[str, ...] = ("get_weather", "add")) -> list:
    uses = [b for b in blocks if b.type == "tool_use"]
    assert uses, "no tool_use block"
    for b in uses:
        assert b.id.startswith("toolu_") and b.name in names
        jsonschema.validate(b.input, SCHEMAS[b.name])
    assert len({b.id for b in uses}) == len(uses)
    return uses


def count(claude: anthropic.Anthropic, **kwargs) -> int:
    return claude.messages.count_tokens(**kwargs).input_tokens


# -- text -------------------------------------------------------------------------------------

def test_create_answers_with_text_and_counts_its_tokens(claude: anthropic.Anthropic):
    messages = [{"role": "user", "content": "Write one word about the sea."}]
    r = claude.messages.create(model=GEMMA, max_tokens=8, messages=messages, metadata={"user_id": "me"},
                               extra_body={"temperature": 0, "top_k": 1, "top_p": 0.9, "unknown_field": 1})
    assert r.id.startswith("msg_") and r.type == "message" and r.role == "assistant" and r.model == GEMMA
    assert r.stop_reason in ("max_tokens", "end_turn") and r.stop_sequence is None
    assert r.usage.output_tokens <= 8 and r.usage.cache_creation_input_tokens == 0
    if r.stop_reason == "max_tokens":  # (ending sooner is the model's choice)
        assert [b.type for b in r.content] == ["text"] and r.content[0].text and r.usage.output_tokens == 8
    prompt = count(claude, model=GEMMA, messages=messages)
    assert r.usage.input_tokens + r.usage.cache_read_input_tokens == prompt
    default = claude.messages.create(model="", max_tokens=3, messages=messages, system="Be brief.")
    assert default.model == DEFAULT


def test_system_as_blocks_is_the_same_prompt_as_a_string(claude: anthropic.Anthropic):
    as_string = count(claude, model="tiny-chatml", system="Be brief.\nBe kind.", messages=ASK)
    as_blocks = count(claude, model="tiny-chatml", messages=ASK, system=[
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "Be kind."}])
    assert as_string == as_blocks > count(claude, model="tiny-chatml", messages=ASK)


def test_stream_sends_anthropic_events_in_order(claude: anthropic.Anthropic, http: httpx.Client):
    body = {"model": "tiny-chatml", "max_tokens": 12, "messages": ASK, "seed": 1, "logit_bias": NO_END}
    events = sse(http, body)
    check_order(events)
    start = events[0][1]["message"]
    assert start["content"] == [] and start["role"] == "assistant" and start["id"].startswith("msg_")
    assert "input_tokens" in start["usage"]
    deltas = [d["delta"] for n, d in events if n == "content_block_delta"]
    assert deltas and all(d["type"] == "text_delta" for d in deltas)
    end = events[-2][1]
    assert end["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None} and end["usage"]["output_tokens"] == 12
    with claude.messages.stream(**{k: v for k, v in body.items() if k not in ("seed", "logit_bias")},
                                extra_body={"seed": 1, "logit_bias": NO_END}) as s:
        kinds = [e.type for e in s]
        final = s.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert final.content[0].text == "".join(d["text"] for d in deltas)  # seeded: the same text
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == end["usage"]["input_tokens"] + \
        end["usage"]["cache_read_input_tokens"] > 0
    assert final.usage.output_tokens == 12 and final.stop_reason == "max_tokens"


def test_end_turn_with_nothing_said_is_an_empty_content_list(claude: anthropic.Anthropic):
    r = claude.messages.create(model="tiny-chatml", max_tokens=5, messages=ASK, extra_body={"logit_bias": {END: 100}})
    assert r.stop_reason == "end_turn" and r.content == [] and r.usage.output_tokens == 0


def test_max_tokens_past_the_server_cap_is_a_ceiling(claude: anthropic.Anthropic):
    r = claude.messages.create(model="tiny-chatml", max_tokens=64000, messages=ASK,  # as Claude Code asks
                               extra_body={"logit_bias": {END: 100}, "keep_alive": "5m"})
    assert r.stop_reason == "end_turn"


def test_output_config_format_gives_json_for_the_schema(claude: anthropic.Anthropic):
    r = claude.messages.create(model="tiny-chatml", max_tokens=200, messages=ASK, extra_body={"seed": 8},
                               output_config={"format": {"type": "json_schema", "schema": WEATHER}})
    assert r.stop_reason == "end_turn"
    jsonschema.validate(json.loads(r.content[0].text), WEATHER)


# -- stop sequences -----------------------------------------------------------------------------

def test_stop_sequences_report_which_one_matched(claude: anthropic.Anthropic, http: httpx.Client):
    kwargs = dict(model="tiny-chatml", max_tokens=40, messages=ASK, extra_body={"seed": 5, "logit_bias": NO_END})
    free = claude.messages.create(**kwargs).content[0].text
    stop = next(free[i:i + 2] for i in range(8, len(free) - 2) if free[i:i + 2].strip() and free.find(free[i:i + 2]) == i)
    r = claude.messages.create(**kwargs, stop_sequences=["§never§", stop])
    assert r.stop_reason == "stop_sequence" and r.stop_sequence == stop
    assert r.content[0].text == free[:free.index(stop)]
    events = sse(http, {**{k: v for k, v in kwargs.items() if k != "extra_body"}, **kwargs["extra_body"],
                        "stop_sequences": [stop]})
    assert events[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": stop}
    missed = claude.messages.create(**kwargs, stop_sequences=["§never§"])
    assert missed.stop_reason == "max_tokens" and missed.stop_sequence is None and missed.content[0].text == free


# -- tools --------------------------------------------------------------------------------------

def test_tool_choice_any_calls_a_tool_that_validates(claude: anthropic.Anthropic):
    r = claude.messages.create(model="tiny-chatml", max_tokens=ONE_CALL, messages=ASK, tools=TOOLS,
                               tool_choice={"type": "any", "disable_parallel_tool_use": True}, extra_body={"seed": 3})
    assert r.stop_reason == "tool_use" and [b.type for b in r.content] == ["tool_use"]
    check_tool_uses(r.content)


def test_tool_choice_tool_names_the_one_call(claude: anthropic.Anthropic, http: httpx.Client):
    choice = {"type": "tool", "name": "add", "disable_parallel_tool_use": True}
    r = claude.messages.create(model="tiny-chatml", max_tokens=ONE_CALL, messages=ASK, tools=TOOLS, tool_choice=choice,
                               extra_body={"seed": 1})
    assert r.stop_reason == "tool_use" and [b.name for b in check_tool_uses(r.content, ("add",))] == ["add"]
    body = {"model": "tiny-chatml", "max_tokens": ONE_CALL, "messages": ASK, "tools": TOOLS, "tool_choice": choice,
            "seed": 2}
    events = sse(http, body)
    check_order(events)
    kinds = {d["index"]: d["content_block"]["type"] for n, d in events if n == "content_block_start"}
    fragments = [d for n, d in events if n == "content_block_delta"]
    assert all(d["delta"]["type"] == "input_json_delta" and kinds[d["index"]] == "tool_use" for d in fragments)
    jsonschema.validate(json.loads("".join(d["delta"]["partial_json"] for d in fragments)), ADD)
    start = next(d["content_block"] for n, d in events if n == "content_block_start")
    assert start["name"] == "add" and start["input"] == {} and start["id"].startswith("toolu_")
    with claude.messages.stream(**{k: v for k, v in body.items() if k != "seed"}, extra_body={"seed": 2}) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use" and [b.name for b in check_tool_uses(final.content, ("add",))] == ["add"]


def test_tool_choice_auto_calls_once_the_model_writes_the_trigger(claude: anthropic.Anthropic, http: httpx.Client):
    body = {"model": "tiny-chatml", "max_tokens": ONE_CALL, "messages": ASK, "tools": TOOLS, "tool_choice": {"type": "auto"},
            "seed": 5, "logit_bias": {TRIGGER: 100}}
    r = claude.messages.create(**{k: body[k] for k in ("model", "max_tokens", "messages", "tools", "tool_choice")},
                               extra_body={"seed": 5, "logit_bias": {TRIGGER: 100}})
    assert r.stop_reason == "tool_use" and all(b.type == "tool_use" for b in r.content)
    check_tool_uses(r.content)
    events = sse(http, body)
    check_order(events)
    kinds = {d["index"]: d["content_block"]["type"] for n, d in events if n == "content_block_start"}
    for name, d in events:  # the call never leaks into a text block
        if name == "content_block_delta":
            assert (d["delta"]["type"] == "input_json_delta") == (kinds[d["index"]] == "tool_use")
            assert "<tool_call>" not in d["delta"].get("text", "")
    plain = claude.messages.create(model="tiny-chatml", max_tokens=12, messages=ASK, tools=TOOLS,  # no trigger, no end
                                   extra_body={"seed": 6, "logit_bias": {**NO_END, TRIGGER: -100}})
    assert plain.stop_reason == "max_tokens" and [b.type for b in plain.content] == ["text"]


def test_tool_choice_none_never_calls(claude: anthropic.Anthropic):
    r = claude.messages.create(model="tiny-chatml", max_tokens=8, messages=ASK, tools=TOOLS,
                               tool_choice={"type": "none"}, extra_body={"seed": 7, "logit_bias": {TRIGGER: 100}})
    assert r.stop_reason == "max_tokens" and [b.type for b in r.content] == ["text"]
    assert "<tool_call>" in r.content[0].text  # it wrote the trigger, and it stayed text


def test_a_tool_result_round_trips_into_the_prompt(claude: anthropic.Anthropic):
    def history(result: str, is_error: bool = False) -> list[dict]:
        return ASK + [
            {"role": "assistant", "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris", "days": 1}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": is_error,
                 "content": [{"type": "text", "text": result}]},
                {"type": "text", "text": "And tomorrow?"}]}]

    r = claude.messages.create(model="tiny-chatml", max_tokens=5, messages=history("21 degrees"), tools=TOOLS,
                               extra_body={"seed": 11})
    assert r.stop_reason in ("max_tokens", "end_turn", "tool_use")
    short = count(claude, model="tiny-chatml", messages=history("21 degrees"), tools=TOOLS)
    assert r.usage.input_tokens + r.usage.cache_read_input_tokens == short
    assert count(claude, model="tiny-chatml", messages=history("21 degrees and sunny all day"), tools=TOOLS) > short
    assert count(claude, model="tiny-chatml", messages=history("21 degrees", is_error=True), tools=TOOLS) > short
    as_string = history("21 degrees")
    as_string[2]["content"][0]["content"] = "21 degrees"
    assert count(claude, model="tiny-chatml", messages=as_string, tools=TOOLS) == short


# -- count_tokens, cache, thinking ------------------------------------------------------------

def test_count_tokens_grows_with_each_message_and_tool(claude: anthropic.Anthropic):
    one = count(claude, model="tiny-chatml", messages=ASK)
    two = count(claude, model="tiny-chatml", messages=ASK + [{"role": "assistant", "content": "Sunny."},
                                                            {"role": "user", "content": "And tomorrow?"}])
    assert 0 < one < two
    assert count(claude, model="tiny-chatml", messages=ASK, tools=TOOLS) > one


def test_the_next_turn_reads_the_prompt_from_the_cache(claude: anthropic.Anthropic):
    first = [{"role": "user", "content": "Tell me about the sea and the world, and the value of a name. " * 6}]
    r = claude.messages.create(model="tiny-llama3", max_tokens=6, messages=first, extra_body={"seed": 1})
    said = r.content[0].text if r.content else ""
    longer = first + [{"role": "assistant", "content": said}, {"role": "user", "content": "And then?"}]
    again = claude.messages.create(model="tiny-llama3", max_tokens=6, extra_body={"seed": 1}, messages=longer,
                                   extra_query={"beta": "true"})  # as Claude Code sends it
    assert again.usage.cache_read_input_tokens > r.usage.input_tokens // 2
    # Anthropic's counts: input_tokens are the prompt tokens not read from the cache
    assert again.usage.input_tokens + again.usage.cache_read_input_tokens == count(claude, model="tiny-llama3",
                                                                                   messages=longer)


def billing(nonce: str) -> dict:
    return {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.330.{nonce[:3]}; cc_entrypoint=cli; "
                                    f"cch={nonce};"}


def test_claude_codes_billing_line_is_not_part_of_the_prompt(claude: anthropic.Anthropic):
    system = [{"type": "text", "text": "You are an agent. " * 20}]
    plain = count(claude, model="tiny-chatml", system=system, messages=ASK)
    assert count(claude, model="tiny-chatml", system=[billing("36ee5"), *system], messages=ASK) == plain
    # a billing line inside a system string goes too; any other line stays
    text = "x-anthropic-billing-header: cc_version=1; cch=0aaa9;\nBe brief."
    assert count(claude, model="tiny-chatml", system=text, messages=ASK) == count(
        claude, model="tiny-chatml", system="Be brief.", messages=ASK)


def test_a_new_billing_nonce_still_reads_the_prompt_from_the_cache(claude: anthropic.Anthropic):
    system = [{"type": "text", "text": "You are an agent that works on code, carefully and well. " * 12}]
    first = claude.messages.create(model="tiny-llama3", max_tokens=2, system=[billing("11111"), *system],
                                   messages=ASK, extra_body={"seed": 1})
    again = claude.messages.create(model="tiny-llama3", max_tokens=2, system=[billing("22222"), *system],
                                   messages=ASK, extra_body={"seed": 1})
    assert again.usage.cache_read_input_tokens > (first.usage.input_tokens + first.usage.cache_read_input_tokens) // 2


def test_a_reasoning_model_thinks_in_thinking_blocks(claude: anthropic.Anthropic, http: httpx.Client):
    body = {"model": "tiny-qwen3", "max_tokens": 10, "messages": ASK, "thinking": {"type": "enabled", "budget_tokens": 1024}}
    thinks = {**NO_END, str(CHATML.index("</think>")): -100}  # it thinks for all 10 tokens
    r = claude.messages.create(**body, extra_body={"seed": 2, "logit_bias": thinks})
    assert [b.type for b in r.content] == ["thinking"] and r.stop_reason == "max_tokens"
    assert r.content[0].thinking and r.content[0].signature == ""
    events = sse(http, {**body, "seed": 2, "logit_bias": thinks})
    check_order(events)
    deltas = [d["delta"] for n, d in events if n == "content_block_delta"]
    assert {d["type"] for d in deltas} == {"thinking_delta"}
    assert "".join(d["thinking"] for d in deltas) == r.content[0].thinking
    disabled = claude.messages.create(**{**body, "thinking": {"type": "disabled"}},
                                      extra_body={"seed": 2, "logit_bias": thinks})
    assert disabled.stop_reason == "max_tokens"


# -- errors ----------------------------------------------------------------------------------------

def check_error(response: httpx.Response, status: int, kind: str, *words: str) -> None:
    assert response.status_code == status
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == kind
    for word in words:
        assert word in body["error"]["message"]


def test_missing_max_tokens_is_a_400_naming_it(http: httpx.Client):
    r = http.post("/v1/messages", json={"model": "tiny-chatml", "messages": ASK},
                  headers={"anthropic-version": "2023-06-01", "anthropic-beta": "tools-2024-05-16"})
    check_error(r, 400, "invalid_request_error", "max_tokens")


def test_an_image_for_a_text_model_is_a_400_naming_the_block(claude: anthropic.Anthropic):
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="tiny-chatml", max_tokens=5, messages=[
            {"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}])
    assert e.value.body["error"]["type"] == "invalid_request_error"
    message = e.value.body["error"]["message"]
    assert message.startswith("messages.0.content.1: ") and "vision projector" in message
    with pytest.raises(anthropic.BadRequestError) as e:  # inside a tool result too
        claude.messages.count_tokens(model="tiny-chatml", messages=[
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [image]}]}])
    assert "messages.0.content.0.content.0" in e.value.body["error"]["message"]


def test_a_tool_choice_naming_an_unknown_tool_is_a_400(claude: anthropic.Anthropic, http: httpx.Client):
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="tiny-chatml", max_tokens=5, messages=ASK, tools=TOOLS,
                               tool_choice={"type": "tool", "name": "fly"})
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "invalid_request_error"
    assert "tool_choice" in e.value.body["error"]["message"] and "fly" in e.value.body["error"]["message"]
    r = http.post("/v1/messages", json={"max_tokens": 5, "messages": ASK, "tools": TOOLS, "tool_choice": {"type": "tool"}})
    check_error(r, 400, "invalid_request_error", "tool_choice.name")
    r = http.post("/v1/messages", json={"max_tokens": 5, "messages": ASK, "tool_choice": {"type": "sometimes"}})
    check_error(r, 400, "invalid_request_error", "tool_choice.type")


def test_other_errors_use_anthropic_types(claude: anthropic.Anthropic, http: httpx.Client):
    with pytest.raises(anthropic.NotFoundError) as e:
        claude.messages.create(model="no-such-model", max_tokens=5, messages=ASK)
    assert e.value.body["error"]["type"] == "not_found_error" and "no-such-model" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.count_tokens(model="no-such-model", messages=ASK)
    check_error(http.post("/v1/messages", content=b"{nope"), 400, "invalid_request_error", "JSON")
    check_error(http.post("/v1/messages", json={"max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]}),
                400, "invalid_request_error", "messages.0.role")
    check_error(http.post("/v1/messages", json={"max_tokens": 5, "messages": ASK, "keep_alive": "soon"}),
                400, "invalid_request_error", "keep_alive")
    check_error(http.get("/v1/messages"), 405, "invalid_request_error")
    check_error(http.post("/v1/messages/nothing", json={}), 404, "not_found_error")


@pytest.mark.fast
def test_blocks_keep_text_and_tool_input_apart():
    blocks = Blocks()
    events = [e for piece in (Delta("Let me check."), ToolCallStart(0, "ab", "add"), ToolCallArguments(0, '{"a": 1,'),
                              ToolCallArguments(0, ' "b": 2}'), ToolCallStart(1, "cd", "add"),
                              ToolCallArguments(1, '{"a": 3, "b": 4}')) for e in blocks.push(piece)] + blocks.close()
    assert [n for n, _ in events].count("content_block_start") == 3
    assert blocks.content == [{"type": "text", "text": "Let me check."},
                              {"type": "tool_use", "id": "toolu_ab", "name": "add", "input": {"a": 1, "b": 2}},
                              {"type": "tool_use", "id": "toolu_cd", "name": "add", "input": {"a": 3, "b": 4}}]
