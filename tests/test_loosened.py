"""What a schema's grammar holds only in part is said, never skipped: x-localchat-checked on the
chat, Messages, Responses and Ollama routes (streamed or not) for what the checking of written
values holds (test_checked.py: a breaking value is written again), x-localchat-loosened for what
nothing holds (the arguments of an XML-element tool syntax, written one by one), and a 400
instead of that under `strict`; a broken regex is always a 400. Real server, official clients."""

from __future__ import annotations

import json

import anthropic
import httpx
import jsonschema
import ollama
import openai
import pytest

from conftest import Server

UNIQUE = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 3},
                                                     "maxItems": 3, "uniqueItems": True}},
          "required": ["tags"], "additionalProperties": False}
ENTRY = "#/properties/tags:uniqueItems"
BROKEN = {"type": "object", "properties": {"code": {"type": "string", "pattern": "("}}, "required": ["code"]}
SEED = {"seed": 3}


def fmt(schema: dict, strict: bool | None = None) -> dict:
    inner = {"name": "out", "schema": schema, **({"strict": strict} if strict is not None else {})}
    return {"type": "json_schema", "json_schema": inner}


def test_chat_lists_a_checked_keyword_in_a_header(client: openai.OpenAI):
    raw = client.chat.completions.with_raw_response.create(
        model="tiny-chatml", messages=[{"role": "user", "content": "tags"}], max_tokens=60,
        response_format=fmt(UNIQUE), extra_body=SEED)
    assert raw.headers["x-localchat-checked"] == ENTRY and "x-localchat-loosened" not in raw.headers
    r = raw.parse()
    if r.choices[0].finish_reason == "stop":  # uniqueItems too: a repeated tag was written again
        jsonschema.validate(json.loads(r.choices[0].message.content), UNIQUE)


def test_a_streamed_chat_has_the_header_too(http: httpx.Client):
    body = {"model": "tiny-chatml", "messages": [{"role": "user", "content": "tags"}], "max_tokens": 5,
            "stream": True, "response_format": fmt(UNIQUE)}
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200 and r.headers["x-localchat-checked"] == ENTRY
        r.read()


def test_a_fully_enforced_schema_has_no_header(client: openai.OpenAI):
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": -90, "maximum": 90}}}
    raw = client.chat.completions.with_raw_response.create(
        model="tiny-chatml", messages=[{"role": "user", "content": "n"}], max_tokens=5, response_format=fmt(schema))
    assert "x-localchat-loosened" not in raw.headers and "x-localchat-checked" not in raw.headers


def test_strict_takes_what_the_checking_holds(client: openai.OpenAI):
    raw = client.chat.completions.with_raw_response.create(
        model="tiny-chatml", messages=[{"role": "user", "content": "tags"}], max_tokens=5,
        response_format=fmt(UNIQUE, strict=True))
    assert raw.headers["x-localchat-checked"] == ENTRY


def test_strict_objects_take_only_the_keys_they_list(client: openai.OpenAI):
    """Under strict, an object that lists its keys and does not say additionalProperties takes
    no others (OpenAI's strict mode asks every object to say false); under the open object a
    random model writes other keys, often without end."""
    schema = {"type": "object", "properties": {"a": {"enum": [1, 2]}, "b": {"type": "boolean"}}, "required": ["a", "b"]}
    for seed in range(8):
        r = client.chat.completions.create(model="tiny-chatml", messages=[{"role": "user", "content": "x"}],
                                           max_tokens=100, temperature=1.0, response_format=fmt(schema, strict=True),
                                           extra_body={"seed": seed})
        assert r.choices[0].finish_reason == "stop", r
        value = json.loads(r.choices[0].message.content)
        assert set(value) <= {"a", "b"}, value
        jsonschema.validate(value, schema)


def test_strict_refuses_what_nothing_holds(client: openai.OpenAI):
    """An XML-element syntax (Qwen3-Coder's) writes each argument on its own: what holds for a
    whole argument (a list's uniqueItems) is not checked there."""
    tool = {"type": "function", "function": {"name": "tag", "parameters": UNIQUE}}
    raw = client.chat.completions.with_raw_response.create(
        model="tiny-qwen3-coder", messages=[{"role": "user", "content": "tags"}], max_tokens=5, tools=[tool],
        tool_choice="required")
    assert raw.headers["x-localchat-loosened"] == "tag" + ENTRY
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="tiny-qwen3-coder", messages=[{"role": "user", "content": "tags"}],
                                       max_tokens=5, tools=[{**tool, "function": {**tool["function"], "strict": True}}])
    assert err.value.body["param"] == "tools.0.function.parameters" and "uniqueItems" in err.value.body["message"]
    assert "#/properties/tags" in err.value.body["message"]


def test_a_tool_reports_its_name(client: openai.OpenAI):
    tool = {"type": "function", "function": {"name": "tag", "parameters": UNIQUE}}
    raw = client.chat.completions.with_raw_response.create(
        model="tiny-chatml", messages=[{"role": "user", "content": "tags"}], max_tokens=5, tools=[tool],
        tool_choice="required")
    assert raw.headers["x-localchat-checked"] == "tag" + ENTRY
    client.chat.completions.create(model="tiny-chatml", messages=[{"role": "user", "content": "tags"}],
                                   max_tokens=5, tools=[{**tool, "function": {**tool["function"], "strict": True}}])


def test_a_broken_pattern_is_a_400_naming_the_field(client: openai.OpenAI):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="tiny-chatml", messages=[{"role": "user", "content": "x"}],
                                       max_tokens=5, response_format=fmt(BROKEN))
    assert err.value.body["param"] == "response_format.json_schema.schema"
    assert "#/properties/code/pattern" in err.value.body["message"]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="tiny-chatml", messages=[{"role": "user", "content": "x"}], max_tokens=5,
                                       tools=[{"type": "function", "function": {"name": "f", "parameters": BROKEN}}])
    assert err.value.body["param"] == "tools.0.function.parameters"


def test_messages_report_and_refuse(server: Server):
    claude = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=120)
    ask = [{"role": "user", "content": "tags"}]
    raw = claude.messages.with_raw_response.create(
        model="tiny-chatml", max_tokens=5, messages=ask, output_config={"format": {"type": "json_schema",
                                                                               "schema": UNIQUE}})
    assert raw.headers["x-localchat-checked"] == ENTRY
    tool = {"name": "tag", "input_schema": UNIQUE}
    raw = claude.messages.with_raw_response.create(model="tiny-chatml", max_tokens=5, messages=ask, tools=[tool],
                                                   tool_choice={"type": "any"})
    assert raw.headers["x-localchat-checked"] == "tag" + ENTRY
    with pytest.raises(anthropic.BadRequestError) as err:
        claude.messages.create(model="tiny-qwen3-coder", max_tokens=5, messages=ask, tools=[{**tool, "strict": True}])
    assert "uniqueItems" in str(err.value)
    with pytest.raises(anthropic.BadRequestError) as err:
        claude.messages.create(model="tiny-chatml", max_tokens=5, messages=ask,
                               output_config={"format": {"type": "json_schema", "schema": BROKEN}})
    assert "#/properties/code/pattern" in str(err.value)


def test_responses_report_and_refuse(client: openai.OpenAI):
    text = {"format": {"type": "json_schema", "name": "out", "schema": UNIQUE}}
    raw = client.responses.with_raw_response.create(model="tiny-chatml", input="tags", text=text,
                                                    max_output_tokens=16)
    assert raw.headers["x-localchat-checked"] == ENTRY
    client.responses.create(model="tiny-chatml", input="tags", max_output_tokens=16,
                            text={"format": {**text["format"], "strict": True}})
    tool = {"type": "function", "name": "tag", "parameters": UNIQUE, "strict": True}
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="tiny-qwen3-coder", input="tags", max_output_tokens=16, tools=[tool])
    assert err.value.body["param"] == "tools.0.parameters"


def test_ollama_reports_the_format(server: Server):
    r = httpx.post(server.url + "/api/chat", json={"model": "tiny-chatml", "stream": False, "format": UNIQUE,
                                                    "messages": [{"role": "user", "content": "tags"}],
                                                    "options": {"num_predict": 5}}, timeout=120)
    assert r.status_code == 200 and r.headers["x-localchat-checked"] == ENTRY
    with pytest.raises(ollama.ResponseError):
        ollama.Client(host=server.url).chat(model="tiny-chatml", messages=[{"role": "user", "content": "x"}],
                                            format=BROKEN)


@pytest.mark.real  # its server loads the shipped default
def test_the_server_setting_refuses_every_loosened_keyword(registry_file, tmp_path):
    config = tmp_path / "models.toml"
    config.write_text('schema_loosened = "refuse"\n' + registry_file.read_text())
    server = Server(config)
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=120)
        tool = {"type": "function", "function": {"name": "tag", "parameters": UNIQUE}}
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model="tiny-qwen3-coder", messages=[{"role": "user", "content": "tags"}],
                                           max_tokens=5, tools=[tool])
        assert "schema_loosened" in err.value.body["message"]
        client.chat.completions.create(model="tiny-chatml", messages=[{"role": "user", "content": "tags"}],
                                       max_tokens=5, response_format=fmt(UNIQUE))  # (checked: taken)
        assert "x-localchat-loosened" in server.output()  # the log says it too (every request with loosened keywords)
    finally:
        server.stop()
