"""What the coding agents send today (Claude Code 2.1, the Codex CLI 0.169), through the official
SDKs against a real server: system messages inside `messages`, deferred and hosted tools,
namespace tools, tools together with a JSON answer, the prompt of a cancelled request kept in
the cache, errors worded for the clients' fallbacks, and the access log.

Tiny models have random weights: tool calls and JSON answers are forced or bounded by a
grammar, and every assertion holds whatever the model picks."""

from __future__ import annotations

import json
import re
import time

import anthropic
import httpx
import jsonschema
import openai
import pytest

from conftest import Server
from localchat.families import FAMILIES, render_prompt, system_first
from localchat.devtools.tinymodels import vocabulary
from localchat.devtools.tool_schemas import ADD, WEATHER

VOCAB = vocabulary(FAMILIES["chatml"])[0]  # tiny-chatml's
TRIGGER = VOCAB.index("<tool_call>")
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def claude(server: Server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=120)


def count(claude: anthropic.Anthropic, **kwargs) -> int:
    return claude.messages.count_tokens(**kwargs).input_tokens


# -- system messages where the client puts them ------------------------------------------------

def test_a_late_system_message_stays_in_place_or_joins_the_system_prompt():
    messages = [{"role": "system", "content": "S1"}, {"role": "user", "content": "Hi"},
                {"role": "system", "content": "S2"}]
    in_place = render_prompt(FAMILIES["chatml"].template, messages)
    assert not in_place.dropped and in_place.text.index("Hi") < in_place.text.index("S2")
    folded = render_prompt(FAMILIES["gemma"].template, messages)  # system text joins the *next* user turn
    assert 2 in folded.dropped and "S2" not in folded.text
    merged = render_prompt(FAMILIES["gemma"].template, system_first(messages))
    assert not merged.dropped and merged.text.index("S1") < merged.text.index("S2") < merged.text.index("Hi")


def test_a_system_message_inside_messages_is_answered(claude: anthropic.Anthropic):
    late = [{"role": "user", "content": "Say hi."}, {"role": "system", "content": "Answer in French."}]
    for model in ("tiny-chatml", "tiny-gemma"):
        r = claude.messages.create(model=model, max_tokens=3, messages=late, extra_body={"seed": 1})
        assert r.stop_reason in ("max_tokens", "end_turn")
        assert count(claude, model=model, messages=late) > count(claude, model=model, messages=late[:1])
    # Gemma's template has no place for it after the user turn: it joins the system prompt
    assert count(claude, model="tiny-gemma", messages=late) == count(
        claude, model="tiny-gemma", system="Answer in French.", messages=late[:1])


def test_a_system_message_after_the_users_text_is_read_before_it():
    # Claude Code's context (skills, today's date) comes after its user message; read last, it was
    # answered instead of the user (the 1.5B called the skill listed last). It goes just before the
    # user's text, after the turns before it; after a tool's result it stays where it is.
    from localchat.api.anthropic.request import CountRequest, conversation
    body = {"model": "m", "system": "S0", "messages": [
        {"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"},
        {"role": "user", "content": [{"type": "text", "text": "<system-reminder>r</system-reminder>"},
                                     {"type": "text", "text": "Say hi."}]},
        {"role": "system", "content": [{"type": "text", "text": "skills"}]},
        {"role": "system", "content": "date"}]}
    said = [(m.role, m.text) for m in conversation(CountRequest.model_validate(body))]
    assert said == [("system", "S0"), ("user", "Q1"), ("assistant", "A1"), ("system", "skills"),
                    ("system", "date"), ("user", "<system-reminder>r</system-reminder>\nSay hi.")]
    after_result = {"model": "m", "messages": [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "out"}]},
        {"role": "system", "content": "late"}]}
    assert [m.role for m in conversation(CountRequest.model_validate(after_result))] == [
        "user", "assistant", "tool", "system"]


# -- a request shaped as Claude Code sends it ----------------------------------------------------

BASH = {"name": "Bash", "description": "Run a command", "input_schema": {
    "type": "object", "properties": {"command": {"type": "string", "maxLength": 20}}, "required": ["command"],
    "additionalProperties": False}}
DEFERRED = {"name": "WebFetch", "description": "Fetch a page", "defer_loading": True, "input_schema": {
    "type": "object", "properties": {"url": {"type": "string", "maxLength": 20}}, "required": ["url"],
    "additionalProperties": False}}  # as Claude Code's tools are: a random model under an open object writes other keys
SERVER_TOOL = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}


def claude_code_body(**change) -> dict:
    return {"model": "tiny-chatml", "max_tokens": 32000, "stream": True,
            "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.330; cc_entrypoint=cli;"},
                       {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "<system-reminder>Be nice.</system-reminder>"},
                                                      {"type": "text", "text": "Say hi."}]},
                         {"role": "system", "content": [{"type": "text", "text": "# Environment\nLinux"}]}],
            "tools": [BASH, DEFERRED, SERVER_TOOL], "metadata": {"user_id": "{\"device_id\": \"d\"}"},
            "thinking": {"type": "adaptive", "display": "updates"},
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
            "output_config": {"effort": "high"}, "container": None, "seed": 3, "logit_bias": {str(TRIGGER): -100},
            **change}


CLAUDE_HEADERS = {"anthropic-version": "2023-06-01", "x-app": "cli",
                  "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,"
                                    "mid-conversation-system-2026-04-07,advanced-tool-use-2025-11-20,effort-2025-11-24"}


def test_a_claude_code_request_streams_and_reports_the_server_tool(http: httpx.Client):
    body = claude_code_body(max_tokens=4)
    with http.stream("POST", "/v1/messages?beta=true", json=body, headers=CLAUDE_HEADERS) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["x-localchat-dropped-tools"] == "web_search_20250305"
        names = [line[len("event: "):] for line in r.iter_lines() if line.startswith("event: ")]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]


def test_a_deferred_tool_is_callable_once_a_tool_reference_loads_it(claude: anthropic.Anthropic, http: httpx.Client):
    forced = {"type": "tool", "name": "WebFetch", "disable_parallel_tool_use": True}
    r = http.post("/v1/messages", json=claude_code_body(stream=False, max_tokens=60, tool_choice=forced))
    assert r.status_code == 400 and "WebFetch" in r.json()["error"]["message"]  # not loaded: not a tool yet
    searched = [
        {"role": "user", "content": "Fetch the page."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                           "input": {"command": "search"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "tool_reference", "tool_name": "WebFetch"}]}]}]
    r = claude.messages.create(model="tiny-chatml", max_tokens=200, messages=searched, tools=[BASH, DEFERRED],
                               tool_choice=forced, extra_body={"seed": 4})
    assert r.stop_reason == "tool_use" and [b.name for b in r.content] == ["WebFetch"]
    jsonschema.validate(r.content[0].input, DEFERRED["input_schema"])


def test_a_prompt_too_long_is_worded_as_anthropic_words_it(http: httpx.Client):
    long = [{"role": "user", "content": "the sea " * 3000}]
    r = http.post("/v1/messages", json={"model": "tiny-chatml", "max_tokens": 5, "messages": long})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert r.json()["error"]["message"].startswith("prompt is too long: ")  # Claude Code compacts on these words


# -- a request shaped as the Codex CLI sends it ----------------------------------------------------

NAMESPACE = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.", "tools": [
    {"type": "function", "name": "close_agent", "description": "Close an agent", "strict": False,
     "parameters": {"type": "object", "properties": {"target": {"type": "string", "maxLength": 12}},
                    "required": ["target"], "additionalProperties": False}}]}
SHELL = {"type": "function", "name": "exec_command", "strict": False, "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string", "maxLength": 12}}, "required": ["cmd"]}}


def test_a_namespace_tool_is_called_and_answered_by_its_inner_name(client: openai.OpenAI):
    tools = [NAMESPACE, {"type": "web_search", "external_web_access": False}]
    raw = client.responses.with_raw_response.create(
        model="tiny-chatml", input="Close agent a1.", tools=tools, tool_choice="required", store=False,
        parallel_tool_calls=False, max_output_tokens=300, extra_body={"seed": 2})
    assert raw.headers["x-localchat-dropped-tools"] == "web_search"
    response = raw.parse()
    calls = [item for item in json.loads(raw.text)["output"] if item["type"] == "function_call"]
    assert calls and all(c["name"] == "close_agent" and c["namespace"] == "multi_agent_v1" for c in calls)
    for call in calls:
        jsonschema.validate(json.loads(call["arguments"]), NAMESPACE["tools"][0]["parameters"])
    tools = [SHELL, *tools]
    # the client sends the call back, namespace apart, with its output: the next turn reads both
    turn = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Close agent a1."}]},
            {"type": "function_call", "call_id": "call_1", "name": "close_agent", "namespace": "multi_agent_v1",
             "arguments": json.dumps({"target": "a1"})},
            {"type": "function_call_output", "call_id": "call_1", "output": "closed"}]
    answer = client.responses.create(model="tiny-chatml", input=turn, tools=tools, store=False, max_output_tokens=2,
                                     extra_body={"seed": 2})
    assert answer.status in ("completed", "incomplete") and answer.usage.input_tokens > response.usage.input_tokens


def test_tools_and_a_json_answer_together(client: openai.OpenAI):
    fmt = {"format": {"type": "json_schema", "name": "weather", "schema": WEATHER, "strict": True}}
    tools = [{"type": "function", "name": "add", "parameters": ADD}]
    ask = dict(model="tiny-chatml", input="Weather in Paris?", tools=tools, text=fmt, store=False,
               max_output_tokens=120)
    for seed in (1, 2):  # whatever the model picks: a valid call, or a final message valid for the schema
        r = client.responses.create(**ask, extra_body={"seed": seed})
        calls = [item for item in r.output if item.type == "function_call"]
        if calls:
            assert all(jsonschema.validate(json.loads(c.arguments), ADD) is None for c in calls)
        elif r.status == "completed":
            jsonschema.validate(json.loads(r.output_text), WEATHER)
    called = client.responses.create(**ask, extra_body={"seed": 3, "logit_bias": {str(TRIGGER): 100}})
    assert [item.type for item in called.output] == ["function_call"] and called.output[0].name == "add"
    answered = client.responses.create(**ask, extra_body={"seed": 3, "logit_bias": {str(TRIGGER): -100}})
    assert answered.status == "completed" and not [i for i in answered.output if i.type == "function_call"]
    jsonschema.validate(json.loads(answered.output_text), WEATHER)


def test_a_chat_completion_takes_tools_and_a_json_schema_together(client: openai.OpenAI):
    fmt = {"type": "json_schema", "json_schema": {"name": "weather", "schema": WEATHER}}
    tools = [{"type": "function", "function": {"name": "add", "parameters": ADD}}]
    r = client.chat.completions.create(model="tiny-chatml", messages=ASK, tools=tools, response_format=fmt,
                                       max_tokens=120, seed=3, logit_bias={str(TRIGGER): -100})
    assert r.choices[0].finish_reason == "stop" and not r.choices[0].message.tool_calls
    jsonschema.validate(json.loads(r.choices[0].message.content), WEATHER)


# -- a cancelled prompt stays cached ---------------------------------------------------------------

def test_a_client_that_leaves_mid_prompt_finds_it_cached_on_retry(server: Server, client: openai.OpenAI):
    words = "harbour lantern meadow orchard quarry ribbon saddle thimble umbrella velvet walnut yarrow ".split()
    long = [{"role": "user", "content": " ".join(words[i % len(words)] + str(i) for i in range(700))}]
    body = {"model": "gemma-3-270m", "messages": long, "max_tokens": 2, "stream": True}
    with httpx.Client(base_url=server.url, timeout=120) as http:
        with http.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            deadline = time.monotonic() + 60
            while not _busy(http, "gemma-3-270m"):  # the prompt is being read: leave now
                assert time.monotonic() < deadline
                time.sleep(0.05)
    again = client.chat.completions.create(model="gemma-3-270m", messages=long, max_tokens=2)
    assert again.usage.prompt_tokens_details.cached_tokens > 0
    said = re.search(r"a request was cancelled while its prompt was read: (\d+) of (\d+) tokens in \(\d+ from the cache\); "
                     r"a retry of the same prompt goes on from there", server.output())
    assert said and int(said[1]) < int(said[2]) == again.usage.prompt_tokens, server.output()[-2000:]


def _busy(http: httpx.Client, model: str) -> bool:
    loaded = http.get("/health").json()["loaded"]
    return any(m["name"] == model and m["busy_slots"] for m in loaded)


# -- the access log ----------------------------------------------------------------------------------

def test_each_request_leaves_one_access_log_line(server: Server, client: openai.OpenAI, http: httpx.Client):
    client.chat.completions.create(model="tiny-chatml", messages=ASK, max_tokens=3, seed=1)
    http.post("/v1/chat/completions", json={"model": "tiny-chatml", "messages": [{"role": "robot", "content": "x"}]})
    time.sleep(0.2)
    lines = server.output().splitlines()
    ok = [line for line in lines if "POST /v1/chat/completions 200 model=tiny-chatml" in line]
    assert ok and "generated=3" in ok[-1] and "ttft=" in ok[-1] and "total=" in ok[-1]
    assert "prompt=" in ok[-1] and "cached=" in ok[-1]
    bad = [line for line in lines if "POST /v1/chat/completions 400" in line and "messages.0.role" in line]
    assert bad, lines[-5:]


def test_the_access_log_escapes_request_text(server: Server, http: httpx.Client):
    http.post("/v1/chat/completions", json={"model": "forged\n12:00:00 POST /v1/x 200", "messages": ASK})
    time.sleep(0.2)
    lines = server.output().splitlines()
    assert not any(line.startswith("12:00:00 POST /v1/x 200") for line in lines)
    assert any("404" in line and "forged\\n12:00:00" in line for line in lines)
