"""The real-model tier: the shipped default, Qwen2.5-Coder 0.5B Instruct, through a real server and
the official clients. Only what a grammar forces is asserted of what the model writes (a forced
tool call, a JSON schema), or what the server does with what it wrote (a call in any form comes
back as a call, never as text). What these models write unforced is recorded in the fixtures of
test_codecs.py (WRITTEN) and test_protocols.py. `scripts/test -m real` runs this tier alone."""

from __future__ import annotations

import json
import re

import anthropic
import httpx
import jsonschema
import ollama
import openai
import pytest

from conftest import DEFAULT, Server

pytestmark = pytest.mark.real

QWEN = "qwen2.5-coder-0.5b"
SHELL = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
TOOLS = [{"type": "function", "function": {"name": "shell", "description": "Run a shell command", "parameters": SHELL}}]
ASK = [{"role": "user", "content": "Use your shell tool to run this command: echo localchat-real-7"}]
RAW_CALL = re.compile(r'"name"\s*:\s*"shell"')


def test_the_default_is_the_shipped_coder_model():
    assert DEFAULT == QWEN


def test_a_forced_call_on_the_chat_route_streamed_and_not(client: openai.OpenAI):
    for choice in ("required", {"type": "function", "function": {"name": "shell"}}):
        whole = client.chat.completions.create(model=QWEN, messages=ASK, tools=TOOLS, tool_choice=choice,
                                               max_tokens=120, seed=1).choices[0]
        assert whole.finish_reason == "tool_calls" and whole.message.tool_calls[0].function.name == "shell"
        jsonschema.validate(json.loads(whole.message.tool_calls[0].function.arguments), SHELL)
    name, args = "", ""
    for chunk in client.chat.completions.create(model=QWEN, messages=ASK, tools=TOOLS, tool_choice="required",
                                                max_tokens=120, seed=2, stream=True):
        for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            name += call.function.name or ""
            args += call.function.arguments or ""
    assert name == "shell"
    jsonschema.validate(json.loads(args), SHELL)


def test_a_forced_call_on_the_messages_route(server: Server):
    claude = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=300)
    answer = claude.messages.create(model=QWEN, max_tokens=120, messages=ASK, tool_choice={"type": "any"},
                                    tools=[{"name": "shell", "description": "Run a shell command",
                                            "input_schema": SHELL}])
    uses = [b for b in answer.content if b.type == "tool_use"]
    assert answer.stop_reason == "tool_use" and uses and uses[0].name == "shell"
    jsonschema.validate(uses[0].input, SHELL)


def test_a_forced_call_on_the_responses_route(client: openai.OpenAI):
    answer = client.responses.create(model=QWEN, input=ASK[0]["content"], tool_choice="required", max_output_tokens=120,
                                     tools=[{"type": "function", "name": "shell", "parameters": SHELL}])
    calls = [item for item in answer.output if item.type == "function_call"]
    assert calls and calls[0].name == "shell"
    jsonschema.validate(json.loads(calls[0].arguments), SHELL)


def test_ollama_chat_returns_whatever_call_the_model_writes_as_a_call(server: Server):
    """Ollama has no tool_choice: the model chooses. Whatever it writes, a call object naming the
    tool never comes back as text (it is read from any form, and forced valid once begun)."""
    client = ollama.Client(host=server.url, timeout=300)
    for seed in (1, 2):
        answer = client.chat(model=QWEN, messages=ASK, tools=TOOLS, options={"seed": seed, "num_predict": 160})
        for call in answer.message.tool_calls or []:
            assert call.function.name == "shell"
            jsonschema.validate(dict(call.function.arguments), SHELL)
        assert not RAW_CALL.search(answer.message.content or ""), answer.message.content


def test_a_json_schema_answer_validates(client: openai.OpenAI):
    schema = {"type": "object", "properties": {"language": {"type": "string", "enum": ["python", "rust"]},
                                               "lines": {"type": "integer", "minimum": 1, "maximum": 99}},
              "required": ["language", "lines"], "additionalProperties": False}
    answer = client.chat.completions.create(
        model=QWEN, seed=3, max_tokens=80, messages=[{"role": "user", "content": "Describe a hello-world program."}],
        response_format={"type": "json_schema", "json_schema": {"name": "program", "schema": schema, "strict": True}})
    jsonschema.validate(json.loads(answer.choices[0].message.content), schema)


def test_infill_with_llama_vscodes_request(http: httpx.Client):
    """llama.vscode's request: extra context chunks, the current line as `prompt`, n_predict and a
    time limit for the prediction; the answer is the completion, in llama-server's shape."""
    body = {"model": QWEN, "input_prefix": "import math\n\n\ndef circle_area(r):\n    ",
            "input_suffix": "\n\n\nprint(circle_area(2.0))\n", "prompt": "",
            "input_extra": [{"filename": "geometry/util.py", "text": "def square_area(a):\n    return a * a\n"},
                            {"filename": "geometry/__init__.py", "text": "from .util import square_area\n"}],
            "n_predict": 24, "top_k": 40, "top_p": 0.99, "stream": False, "samplers": ["top_k", "top_p", "infill"],
            "cache_prompt": True, "t_max_prompt_ms": 500, "t_max_predict_ms": 1000, "seed": 1}
    r = http.post("/infill", json=body, timeout=300)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert isinstance(answer["content"], str) and answer["stop"] is True
    assert 0 < answer["tokens_evaluated"] and answer["tokens_predicted"] <= 24
    again = http.post("/infill", json={**body, "input_prefix": body["input_prefix"] + "r"}, timeout=300).json()
    assert again["tokens_cached"] > 20  # the next keystroke reads the context from the cache
    # llama.vscode's n_indent (the cursor line's indentation): after the first line, no line of the
    # answer is indented less (the server ends the answer before such a line, as llama-server does)
    body = {**body, "n_predict": 64, "n_indent": 4, "input_suffix": "\n\n\n" + "x = 1\n" * 5}
    content = http.post("/infill", json=body, timeout=300).json()["content"]
    lines = content.split("\n")
    for i, line in enumerate(lines[1:], start=1):
        last = i == len(lines) - 1
        assert len(line) - len(line.lstrip(" \t")) >= 4 or (last and not line.strip()), content
