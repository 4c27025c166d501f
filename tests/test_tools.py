"""Tool calls and structured output from every family, through the official SDK.

Tiny models have random weights: what this proves is the constraint, not the model. Every
call must parse, name a real tool and carry arguments that validate against its schema.
The grammar bounds a call's length (strings by maxLength, numbers by digits, whitespace to 21
characters a place): one call is at most ~400 characters, so at most ~400 tokens. A test that
needs a call to end gives it ONE_CALL tokens, so that ending is the grammar's doing, whatever
the model picks."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest

from conftest import GEMMA, SMOLLM
from localchat.families import FAMILIES, render_prompt
from localchat.families.codecs.pattern import fill
from localchat.devtools.tinymodels import value_ends, vocabulary
from localchat.devtools.tool_schemas import ADD, SCHEMAS, WEATHER

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add", "parameters": ADD}}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
FAMILY_NAMES = list(FAMILIES)
ONE_CALL = 500  # tokens: more than the longest call the grammar allows


def model(name: str) -> str:
    return f"tiny-{name}"


def thinks(family: str) -> bool:
    """The family's template leaves the model inside a think block."""
    f = FAMILIES[family]
    return f.opens_reasoning(render_prompt(f.template, ASK, bos_token=f.bos_token, eos_token=f.eos_token).text)


def nudge(family: str, bias: dict[str, float] | None = None, *, think: bool = True) -> dict[str, float]:
    """logit_bias for a test: for a model that thinks first, end its reasoning at once (unless
    not `think`); where arguments are raw text, end each value soon."""
    bias = dict(bias or {})
    vocab = vocabulary(FAMILIES[family])[0]
    bias.update({str(vocab.index(t)): 8 for t in value_ends(FAMILIES[family])})
    if think and thinks(family):
        bias[str(vocab.index(FAMILIES[family].reasoning[1]))] = 100
    return bias


def block_enders(family: str) -> tuple[str, ...]:
    """Tokens that close a block of calls rather than start another call: the closing text as one
    token, and its first character where it parts from the text of a next call (as a character
    token and as a byte token)."""
    shape = getattr(FAMILIES[family].codec, "shape", None)
    if shape is None or not shape.close:
        return ()
    following = fill(shape.separator + shape.pre, 1, "abcdefghi")
    at = next((k for k, (a, b) in enumerate(zip(shape.close, following)) if a != b), 0)
    char = shape.close[at]
    return (shape.close, char, f"<0x{ord(char):02X}>" if ord(char) < 128 else char)


def check_calls(calls) -> None:
    assert calls, "no tool call"
    ids = set()
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_")
        ids.add(call.id)
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    assert len(ids) == len(calls), "tool call ids are unique"


def stream_calls(client: openai.OpenAI, **kwargs):
    """Accumulate a streamed answer as the SDK's users do, checking the contract on the way."""
    calls: dict[int, dict] = {}
    content, finish = "", None
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            delta = choice.delta
            assert not (delta.content and delta.tool_calls), "content and tool_calls in one delta"
            content += delta.content or ""
            for tc in delta.tool_calls or []:
                assert isinstance(tc.index, int)
                if tc.index not in calls:
                    assert tc.id and tc.type == "function" and tc.function.name and tc.function.arguments == ""
                    calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": ""}
                else:
                    assert tc.id is None and tc.function.name is None
                    calls[tc.index]["arguments"] += tc.function.arguments
            finish = choice.finish_reason or finish
    return calls, content, finish


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_required_tool_call_parses_and_validates(client: openai.OpenAI, family: str):
    r = client.chat.completions.create(model=model(family), messages=ASK, tools=TOOLS, tool_choice="required",
                                       max_tokens=ONE_CALL, seed=3, parallel_tool_calls=False,
                                       logit_bias=nudge(family))
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls"
    assert msg.content is None
    check_calls(msg.tool_calls)
    assert len(msg.tool_calls) == 1


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_streamed_parallel_tool_calls_accumulate(client: openai.OpenAI, family: str):
    """With its end-of-turn tokens pushed down, the model may chain calls until max_tokens: every
    call but a cut-off last one validates, each under its own index. How many it writes is its
    choice (random weights; test_protocols streams two scripted calls, each under its own index)."""
    vocab = vocabulary(FAMILIES[family])[0]
    codec = FAMILIES[family].codec  # (a model may also end its calls by writing where the results go)
    enders = (*FAMILIES[family].stop_tokens, FAMILIES[family].eos_token, *block_enders(family),
              getattr(codec, "result_open", ""))
    ends = {str(vocab.index(t)): -100 for t in enders if t in vocab}
    calls, content, finish = stream_calls(client, model=model(family), messages=ASK, tools=TOOLS,
                                          tool_choice="required", max_tokens=2 * ONE_CALL + 100, seed=4,
                                          logit_bias=nudge(family, ends))
    assert finish in ("tool_calls", "length") and not content.strip()
    assert sorted(calls) == list(range(len(calls))) and calls, "each call under its own index, from 0"
    complete = list(calls.values())[:-1] if finish == "length" else list(calls.values())
    if family == "gpt-oss":  # harmony: a call ends the turn (<|call|>), whatever the bias
        assert finish == "tool_calls" and len(complete) == 1
    for call in complete:
        jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_named_tool_choice_and_one_call_only(client: openai.OpenAI, family: str):
    for seed in (1, 2):
        r = client.chat.completions.create(
            model=model(family), messages=ASK, tools=TOOLS, max_tokens=ONE_CALL, seed=seed, parallel_tool_calls=False,
            tool_choice={"type": "function", "function": {"name": "add"}}, logit_bias=nudge(family))
        calls = r.choices[0].message.tool_calls
        check_calls(calls)
        assert len(calls) == 1 and calls[0].function.name == "add"
    streamed, content, finish = stream_calls(
        client, model=model(family), messages=ASK, tools=TOOLS, max_tokens=ONE_CALL, seed=3, parallel_tool_calls=False,
        tool_choice={"type": "function", "function": {"name": "add"}}, logit_bias=nudge(family))
    assert finish == "tool_calls" and [c["name"] for c in streamed.values()] == ["add"]
    jsonschema.validate(json.loads(streamed[0]["arguments"]), ADD)


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_auto_calls_a_tool_once_the_model_writes_the_trigger(client: openai.OpenAI, family: str):
    trigger = vocabulary(FAMILIES[family])[0].index(FAMILIES[family].codec.trigger)
    # A model that thinks first has its reasoning closed in a prefill: a close tag pushed up as
    # far as the trigger would vie with it all along the free text.
    think = thinks(family)
    messages = [*ASK, {"role": "assistant", "content": FAMILIES[family].reasoning[1]}] if think else ASK
    kwargs = dict(model=model(family), messages=messages, tools=TOOLS, tool_choice="auto", max_tokens=ONE_CALL,
                  seed=5, parallel_tool_calls=False,
                  logit_bias=nudge(family, {str(trigger): 100}, think=False))  # the trigger comes first
    r = client.chat.completions.create(**kwargs)
    assert r.choices[0].finish_reason == "tool_calls"
    check_calls(r.choices[0].message.tool_calls)
    calls, content, finish = stream_calls(client, **kwargs)
    assert finish == "tool_calls" and calls


@pytest.mark.parametrize("family", ["chatml", "gemma"])
def test_auto_without_the_trigger_is_plain_text(client: openai.OpenAI, family: str):
    trigger = vocabulary(FAMILIES[family])[0].index(FAMILIES[family].codec.trigger)
    r = client.chat.completions.create(model=model(family), messages=ASK, tools=TOOLS, max_tokens=12, seed=6,
                                       logit_bias={str(trigger): -100})  # a model that does not write the trigger
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.choices[0].message.tool_calls is None


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_tool_choice_none_never_calls(client: openai.OpenAI, family: str):
    trigger = vocabulary(FAMILIES[family])[0].index(FAMILIES[family].codec.trigger)
    kwargs = dict(model=model(family), messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=8, seed=7,
                  logit_bias={str(trigger): 100})  # even a model that writes the trigger
    r = client.chat.completions.create(**kwargs)
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].finish_reason in ("stop", "length")
    calls, _, finish = stream_calls(client, **kwargs)
    assert not calls and finish in ("stop", "length")


def test_max_tokens_inside_a_call_is_length(client: openai.OpenAI):
    r = client.chat.completions.create(model=model("chatml"), messages=ASK, tools=TOOLS, tool_choice="required",
                                       max_tokens=6)
    assert r.choices[0].finish_reason == "length"


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_json_schema_output_validates(client: openai.OpenAI, family: str):
    fmt = {"type": "json_schema", "json_schema": {"name": "weather", "schema": WEATHER, "strict": True}}
    r = client.chat.completions.create(model=model(family), messages=ASK, response_format=fmt, max_tokens=ONE_CALL,
                                       seed=8, logit_bias=nudge(family))
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].message.content), WEATHER)
    text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=model(family), messages=ASK, response_format=fmt, max_tokens=ONE_CALL, seed=9, stream=True,
        logit_bias=nudge(family)) if c.choices)
    jsonschema.validate(json.loads(text), WEATHER)


def test_json_object_and_raw_grammar(client: openai.OpenAI):
    r = client.chat.completions.create(model=model("gemma"), messages=ASK, response_format={"type": "json_object"},
                                       max_tokens=200, seed=10)
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:
        assert r.choices[0].message.content.startswith("{")
    r = client.chat.completions.create(model=model("gemma"), messages=ASK, max_tokens=10,
                                       extra_body={"grammar": 'root ::= ("yes" | "no") "!"'})
    assert r.choices[0].message.content in ("yes!", "no!")


@pytest.mark.parametrize("name", [GEMMA, SMOLLM])
def test_a_shipped_model_fills_a_schema(client: openai.OpenAI, name: str):
    fmt = {"type": "json_schema", "json_schema": {"name": "w", "schema": WEATHER}}
    r = client.chat.completions.create(model=name, messages=ASK, response_format=fmt, max_tokens=ONE_CALL,
                                       temperature=0)
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].message.content), WEATHER)


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_a_conversation_with_tool_results_round_trips(client: openai.OpenAI, family: str):
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                              "arguments": '{"city": "Paris", "days": 1}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'},
    ]
    r = client.chat.completions.create(model=model(family), messages=history, tools=TOOLS, max_tokens=5, seed=11)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")  # (calling again is the model's choice)
    again = client.chat.completions.create(model=model(family), messages=history, max_tokens=5, seed=11)
    assert r.usage.prompt_tokens > again.usage.prompt_tokens  # the tools are described in the prompt


def test_reasoning_goes_to_reasoning_content(client: openai.OpenAI):
    close = vocabulary(FAMILIES["chatml"])[0].index("</think>")
    kwargs = dict(model="tiny-qwen3", messages=ASK, max_tokens=10, seed=12,  # it thinks for all 10 tokens
                  logit_bias={str(close): -100}, extra_body={"ignore_eos": True})
    r = client.chat.completions.create(**kwargs)
    msg = r.choices[0].message
    assert msg.model_extra["reasoning_content"] and not msg.content
    chunks = [c for c in client.chat.completions.create(stream=True, **kwargs) if c.choices]
    streamed = "".join(c.choices[0].delta.model_extra.get("reasoning_content") or "" for c in chunks)
    assert streamed == msg.model_extra["reasoning_content"]


def test_auto_trigger_counts_only_after_the_reasoning(client: openai.OpenAI):
    """A trigger written while the model still thinks is part of its thoughts, not a call."""
    vocab = vocabulary(FAMILIES["chatml"])[0]
    trigger, close = vocab.index("<tool_call>"), vocab.index("</think>")
    r = client.chat.completions.create(model="tiny-qwen3", messages=ASK, tools=TOOLS, max_tokens=40, seed=16,
                                       logit_bias={str(trigger): 100, str(close): -100})
    assert r.choices[0].message.tool_calls is None
    assert "<tool_call>" in r.choices[0].message.model_extra["reasoning_content"]
    # Thinking ended at once, then the trigger: the closing tag pushed up most, so it comes first; once
    # written, the repeat penalty (÷10) puts it below the trigger, which comes next.
    r = client.chat.completions.create(model="tiny-qwen3", messages=ASK, tools=TOOLS, max_tokens=ONE_CALL, seed=16,
                                       parallel_tool_calls=False, logit_bias={str(trigger): 50, str(close): 100},
                                       extra_body={"repeat_penalty": 10})
    check_calls(r.choices[0].message.tool_calls)


def test_grammar_applies_after_the_reasoning(client: openai.OpenAI):
    close = vocabulary(FAMILIES["chatml"])[0].index("</think>")
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": ADD}}
    r = client.chat.completions.create(model="tiny-qwen3", messages=ASK, response_format=fmt, max_tokens=ONE_CALL,
                                       seed=13, logit_bias={str(close): 100})
    jsonschema.validate(json.loads(r.choices[0].message.content), ADD)
    r = client.chat.completions.create(model="tiny-qwen3", messages=ASK, tools=TOOLS, tool_choice="required",
                                       max_tokens=ONE_CALL, seed=14, logit_bias={str(close): 100},
                                       parallel_tool_calls=False)
    check_calls(r.choices[0].message.tool_calls)


BAD = [
    ({"grammar": "root ::= ["}, "grammar"),
    ({"grammar": 'root ::= "a'}, "grammar"),
    ({"grammar": "root ::= undefined-rule"}, "grammar"),
    ({"grammar": 'root ::= x\nx ::= x "a"'}, "grammar"),
    ({"grammar": 'root ::= ("a"?)*'}, "grammar"),
    ({"grammar": 'start ::= "a"'}, "grammar"),
    ({"grammar": 'root ::= "a"{0,100000}'}, "grammar"),
    ({"grammar": 'root ::= "\\q"'}, "grammar"),
    ({"grammar": "root ::= " + "(" * 200 + '"a"' + ")" * 200}, "grammar"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": False}, "required": ["a"]}}}}, "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/$defs/nope"}}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": TOOLS + TOOLS[:1]}, "tools"),
    ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools.0.function.name"),
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools.0.function.name"),
    ({"tools": [{"type": "retrieval"}]}, "tools.0.type"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"$ref": "http://x/y"}}}],
      "tool_choice": "required"}, "tools.0.function.parameters"),
    ({"tools": TOOLS, "tool_choice": "required", "grammar": 'root ::= "a"'}, "grammar"),
]


@pytest.mark.parametrize("extra, param", BAD)
def test_bad_constraints_are_400(http: httpx.Client, extra: dict, param: str):
    r = http.post("/v1/chat/completions", json={"model": "tiny-chatml", "messages": ASK, "max_tokens": 2, **extra})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param, err
    assert err["message"]


@pytest.mark.parametrize("schema", [
    {"$ref": "#"},  # recursion with no way out is still a grammar: must not hang
    json.loads("{" + '"type": "object", "properties": {"a": {' * 150 + '"type": "string"' + "}}" * 150 + "}"),
    {"type": "object", "properties": {f"p{i}": {"type": "object", "properties": {
        f"q{j}": {"type": "string"} for j in range(60)}} for i in range(120)}},
])
def test_pathological_schemas_are_answered_quickly(http: httpx.Client, schema: dict):
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    r = http.post("/v1/chat/completions", json={"model": "tiny-chatml", "messages": ASK, "max_tokens": 2,
                                                "response_format": fmt}, timeout=30)
    assert r.status_code in (200, 400), r.text
    assert http.get("/health").status_code == 200


def test_a_schema_nested_past_any_parser_is_400(http: httpx.Client):
    depth = 5000
    schema = '{"type": "object", "properties": {"a": ' * depth + '{"type": "string"}' + "}}" * depth
    body = ('{"model": "tiny-chatml", "messages": [{"role": "user", "content": "x"}], "response_format": '
            '{"type": "json_schema", "json_schema": {"name": "x", "schema": ' + schema + "}}}")
    r = http.post("/v1/chat/completions", content=body.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 400 and "nested" in r.json()["error"]["message"]


def test_server_survived_every_bad_constraint(client: openai.OpenAI):
    r = client.chat.completions.create(model=model("chatml"), messages=ASK, tools=TOOLS, tool_choice="required",
                                       max_tokens=ONE_CALL, seed=15, parallel_tool_calls=False)
    check_calls(r.choices[0].message.tool_calls)


def test_stop_strings_do_not_cut_constrained_output(client: openai.OpenAI):
    """Editor plugins send stop strings with every request; they must not break a call or JSON."""
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": ADD}}
    r = client.chat.completions.create(model=model("chatml"), messages=ASK, response_format=fmt, max_tokens=ONE_CALL,
                                       seed=17, stop=["}", ",", '"'])
    jsonschema.validate(json.loads(r.choices[0].message.content), ADD)
    r = client.chat.completions.create(model=model("chatml"), messages=ASK, tools=TOOLS, tool_choice="required",
                                       max_tokens=ONE_CALL, seed=17, stop=["}", '"', "\n"], parallel_tool_calls=False)
    check_calls(r.choices[0].message.tool_calls)
