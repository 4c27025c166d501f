"""What no grammar holds is checked as it is written, and a value that breaks the schema is
written again (engine/sampling/checking.py): the finished answer is valid, usage counts the tokens taken
back, x-localchat-checked names the keywords. Each test makes the tiny model want the breaking
value (a logit bias on its token): its grammar allows it, so only the checking can keep it out.
Real server, official clients; the next request reading the slot's cache reads what a cold one does."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest

MODEL = "tiny-chatml"


def tokens(http: httpx.Client, text: str) -> list[int]:
    r = http.post("/tokenize", json={"model": MODEL, "content": text})
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


def favour(http: httpx.Client, *texts: str, weight: float = 100) -> dict[str, float]:
    """A logit bias towards the (one-token) texts."""
    out = {}
    for text in texts:
        ids = tokens(http, text)
        assert len(ids) == 1, (text, ids)
        out[str(ids[0])] = weight
    return out


def answer(client: openai.OpenAI, schema: dict, bias: dict[str, float], seed: int = 1, **extra):
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "go"}], max_tokens=120, temperature=0, seed=seed,
        logit_bias=bias, response_format={"type": "json_schema", "json_schema": {"name": "out", "schema": schema}},
        **extra)
    return raw, raw.parse()


CASES = {
    "uniqueItems": ({"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 3, "maxItems": 3,
                     "uniqueItems": True}, ("a",), "#:uniqueItems"),
    "not": ({"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"],
             "additionalProperties": False, "not": {"properties": {"a": {"const": True}}}}, ("t",), "#:not"),
    "if": ({"type": "object", "properties": {"x": {"enum": [1, 2]}, "y": {"enum": [1, 2]}}, "required": ["x", "y"],
            "additionalProperties": False, "if": {"properties": {"x": {"const": 1}}},
            "then": {"properties": {"y": {"const": 2}}}, "else": {"properties": {"y": {"const": 1}}}},
           ("2",), "#:if"),
    "contains": ({"type": "array", "items": {"enum": [1, 2, 3]}, "minItems": 2, "maxItems": 2,
                  "contains": {"const": 3}}, ("1",), "#:contains"),
    "minContains": ({"type": "array", "items": {"enum": [1, 2, 3]}, "minItems": 3, "maxItems": 3,
                     "contains": {"const": 3}, "minContains": 2}, ("1",), "#:contains, #:minContains"),
    "oneOf": ({"oneOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"enum": [3, 5, 7]}]}, ("3",), "#:oneOf"),
    "multipleOf": ({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 1000,
                                                          "multipleOf": 7}},
                    "required": ["n"], "additionalProperties": False}, ("}",), "#/properties/n:multipleOf"),
    "dependentSchemas": ({"type": "object", "properties": {"a": {"type": "boolean"}, "c": {"type": "boolean"}},
                          "required": ["a", "c"], "additionalProperties": False,
                          "dependentSchemas": {"a": {"not": {"properties": {"c": {"const": True}}}}}},
                         ("t",), "#:dependentSchemas"),
    "then false": ({"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"],
                    "additionalProperties": False, "if": {"properties": {"a": {"const": True}}}, "then": False},
                   ("t",), "#:if"),
}


@pytest.mark.parametrize("keyword", list(CASES))
def test_a_value_that_breaks_the_schema_is_written_again(client: openai.OpenAI, http: httpx.Client, keyword: str):
    schema, favoured, entry = CASES[keyword]
    raw, r = answer(client, schema, favour(http, *favoured))
    assert raw.headers["x-localchat-checked"] == entry
    assert "x-localchat-loosened" not in raw.headers
    assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
    jsonschema.validate(json.loads(r.choices[0].message.content), schema,
                        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    assert r.usage.completion_tokens_details.resampled_tokens > 0  # the favoured value was written, then taken back


def test_streamed_text_is_held_until_its_value_is_checked(http: httpx.Client):
    """A streamed answer never shows a value that is then taken back: the text, put together, is
    the valid answer, each piece once."""
    schema, favoured, _ = CASES["uniqueItems"]
    body = {"model": MODEL, "messages": [{"role": "user", "content": "go"}], "max_tokens": 120, "seed": 1,
            "temperature": 0.7, "stream": True, "stream_options": {"include_usage": True},
            "logit_bias": favour(http, *favoured),
            "response_format": {"type": "json_schema", "json_schema": {"name": "out", "schema": schema}}}
    text, resampled = "", 0
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.headers["x-localchat-checked"] == "#:uniqueItems"
        for line in r.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                for choice in chunk["choices"]:
                    text += choice["delta"].get("content") or ""
                if chunk.get("usage"):
                    resampled = chunk["usage"].get("completion_tokens_details", {}).get("resampled_tokens", 0)
    jsonschema.validate(json.loads(text), schema)
    assert resampled > 0


def test_every_choice_is_checked(client: openai.OpenAI, http: httpx.Client):
    schema, favoured, _ = CASES["uniqueItems"]
    _, r = answer(client, schema, favour(http, *favoured), n=2)
    assert len(r.choices) == 2
    for choice in r.choices:
        jsonschema.validate(json.loads(choice.message.content), schema)


def test_a_tool_call_is_checked_too(client: openai.OpenAI, http: httpx.Client):
    schema = CASES["not"][0]
    tool = {"type": "function", "function": {"name": "flag", "parameters": schema, "strict": True}}
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "go"}], max_tokens=120, temperature=0.7, seed=1,
        logit_bias=favour(http, "t"), tools=[tool], tool_choice="required")
    assert raw.headers["x-localchat-checked"] == "flag#:not"  # strict: held by the checking, not refused
    call = raw.parse().choices[0].message.tool_calls[0]
    assert json.loads(call.function.arguments) == {"a": False}


def test_the_slot_after_a_cut_reads_as_a_cold_one(http: httpx.Client):
    """The cells of what was taken back are gone: the next turn, read from the slot's cache, has
    the same next-token log-probabilities as the same prompt read cold (cache_prompt off)."""
    schema, favoured, _ = CASES["if"]
    ask = {"model": MODEL, "messages": [{"role": "user", "content": "go"}], "max_tokens": 60, "seed": 1,
           "temperature": 0.7, "logit_bias": favour(http, *favoured),
           "response_format": {"type": "json_schema", "json_schema": {"name": "out", "schema": schema}}}
    first = http.post("/v1/chat/completions", json=ask).json()
    assert first["usage"]["completion_tokens_details"]["resampled_tokens"] > 0
    said = first["choices"][0]["message"]["content"]
    follow = {"model": MODEL, "max_tokens": 1, "temperature": 0, "logprobs": True, "top_logprobs": 5,
              "messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": said},
                           {"role": "user", "content": "again"}]}
    warm = http.post("/v1/chat/completions", json=follow).json()
    cold = http.post("/v1/chat/completions", json={**follow, "cache_prompt": False}).json()
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    top = [lp["top_logprobs"] for lp in (warm, cold) for lp in lp["choices"][0]["logprobs"]["content"][:1]]
    assert [t["token"] for t in top[0]] == [t["token"] for t in top[1]]
    for a, b in zip(top[0], top[1]):
        assert abs(a["logprob"] - b["logprob"]) < 0.05  # (a cold read and a cached one differ in the last bits)


def test_what_no_check_holds_is_still_refused_under_strict(client: openai.OpenAI):
    """An XML-argument syntax writes each argument on its own: what holds for the whole object
    is not checked there, and `strict` refuses it as before."""
    tool = {"type": "function", "function": {"name": "flag", "parameters": CASES["not"][0], "strict": True}}
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="tiny-qwen3-coder", messages=[{"role": "user", "content": "go"}],
                                       max_tokens=5, tools=[tool])
    assert err.value.body["param"] == "tools.0.function.parameters" and "not" in err.value.body["message"]
