"""The OpenAI chat contract, through the official SDK, against a real model (Gemma 3 270M)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import openai

from conftest import DEFAULT, GEMMA, SMOLLM, free_port

HELLO = [{"role": "user", "content": "Write one sentence about the sea."}]


def test_non_streaming_completion(client: openai.OpenAI):
    r = client.chat.completions.create(model=GEMMA, messages=HELLO, max_tokens=12, temperature=0, seed=5,
                                       extra_body={"ignore_eos": True})  # 12 tokens, whatever the model picks
    assert r.id.startswith("chatcmpl-")
    assert r.object == "chat.completion"
    assert r.model == GEMMA
    choice = r.choices[0]
    assert choice.index == 0 and choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content
    assert choice.finish_reason == "length"
    u = r.usage
    assert u.prompt_tokens > 5 and u.completion_tokens == 12
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens


def test_missing_model_and_alias_mean_the_right_model(http: httpx.Client, client: openai.OpenAI):
    r = http.post("/v1/chat/completions", json={"messages": HELLO, "max_tokens": 2})
    assert r.status_code == 200 and r.json()["model"] == DEFAULT
    assert client.chat.completions.create(model="", messages=HELLO, max_tokens=2).model == DEFAULT
    assert client.chat.completions.create(model="gemma3-270m", messages=HELLO, max_tokens=2).model == GEMMA
    assert client.chat.completions.create(model="smollm2", messages=HELLO, max_tokens=2).model == SMOLLM


def _events(http: httpx.Client, body: dict) -> tuple[list[dict], str]:
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = r.read().decode()
    frames = raw.split("\n\n")
    assert frames[-1] == "" and frames[-2] == "data: [DONE]"
    assert all(f.startswith("data: ") for f in frames[:-1])
    return [json.loads(f[len("data: "):]) for f in frames[:-2]], raw


def test_stream_follows_the_contract(http: httpx.Client):
    chunks, _ = _events(http, {"model": GEMMA, "messages": HELLO, "max_tokens": 8, "stream": True, "seed": 5,
                               "ignore_eos": True,
                               "stream_options": {"include_usage": True}})
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("chatcmpl-")
    assert len({c["created"] for c in chunks}) == 1
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    *content, finish, usage = chunks[1:]
    assert content and all(set(c["choices"][0]["delta"]) == {"content"} for c in content)
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-2])
    assert finish["choices"][0]["delta"] == {} and finish["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 8
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + 8


def test_stream_without_include_usage_has_no_usage_chunk(http: httpx.Client):
    chunks, _ = _events(http, {"model": GEMMA, "messages": HELLO, "max_tokens": 3, "stream": True})
    assert all(c["choices"] for c in chunks) and "usage" not in chunks[-1]


def test_sdk_stream_matches_non_streaming_text(client: openai.OpenAI):
    kwargs = dict(model=GEMMA, messages=HELLO, max_tokens=16, temperature=0, extra_body={"ignore_eos": True})
    whole = client.chat.completions.create(**kwargs).choices[0].message.content
    stream = client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs)
    parts, finish, usage = [], None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            parts.append(c.delta.content or "")
            finish = c.finish_reason or finish
    assert "".join(parts) == whole
    assert finish == "length" and usage.completion_tokens == 16


def test_max_tokens_and_its_alias_end_with_length(client: openai.OpenAI, http: httpx.Client):
    r = client.chat.completions.create(model=GEMMA, messages=HELLO, max_tokens=5, extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 5
    r2 = http.post("/v1/chat/completions", json={"model": GEMMA, "messages": HELLO, "max_completion_tokens": 4,
                                                 "ignore_eos": True}).json()
    assert r2["choices"][0]["finish_reason"] == "length" and r2["usage"]["completion_tokens"] == 4


def test_stop_string_cuts_the_answer(client: openai.OpenAI):
    kwargs = dict(model=GEMMA, messages=HELLO, max_tokens=24, temperature=0, extra_body={"ignore_eos": True})
    full = client.chat.completions.create(**kwargs).choices[0].message.content
    assert len(full) > 12
    stop = full[6:10]
    cut = client.chat.completions.create(stop=[stop, "\u2603never"], **kwargs)
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].message.content == full[: full.index(stop)]


def test_same_seed_same_text_at_positive_temperature(client: openai.OpenAI):
    kwargs = dict(model=GEMMA, messages=HELLO, max_tokens=20, temperature=1.0, extra_body={"ignore_eos": True})
    a = client.chat.completions.create(seed=1234, **kwargs).choices[0].message.content
    client.chat.completions.create(model=GEMMA, messages=[{"role": "user", "content": "Something else"}], max_tokens=3)
    b = client.chat.completions.create(seed=1234, **kwargs).choices[0].message.content
    c = client.chat.completions.create(seed=98765, **kwargs).choices[0].message.content
    assert a == b
    assert c != a


def test_second_turn_reuses_the_cached_prefix(client: openai.OpenAI):
    first = client.chat.completions.create(model=GEMMA, messages=HELLO, max_tokens=10, temperature=0)
    history = HELLO + [{"role": "assistant", "content": first.choices[0].message.content},
                       {"role": "user", "content": "And one about the sky."}]
    second = client.chat.completions.create(model=GEMMA, messages=history, max_tokens=4)
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= first.usage.prompt_tokens
    assert cached < second.usage.prompt_tokens


def test_lenient_input_is_accepted(client: openai.OpenAI):
    r = client.chat.completions.create(
        model=GEMMA,
        messages=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                                                                  "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "42"},
            {"role": "assistant", "content": "The answer", "reasoning_content": "thought"},
        ],
        max_tokens=3, seed=1, user="me", n=1, logprobs=True, top_logprobs=2, parallel_tool_calls=True,
        stream_options=None, extra_body={"some_unknown_field": {"x": 1}, "top_k": 5, "min_p": 0.1,
                                         "repeat_penalty": 1.1},
        presence_penalty=0.5, frequency_penalty=0.5, logit_bias={"100": -100},
    )
    assert r.choices[0].finish_reason in ("stop", "length")


def test_logit_bias_forces_a_token(client: openai.OpenAI):
    from localchat.families import FAMILIES
    from localchat.devtools.tinymodels import vocabulary

    z = vocabulary(FAMILIES["chatml"])[0].index("z")
    r = client.chat.completions.create(model="tiny-chatml", messages=HELLO, max_tokens=3, temperature=0.7,
                                       logit_bias={str(z): 100}, extra_body={"ignore_eos": True})
    assert r.choices[0].message.content == "zzz"


def test_models_and_health(http: httpx.Client):
    models = http.get("/v1/models").json()
    assert models["object"] == "list"
    ids = [m["id"] for m in models["data"]]
    assert "gemma-3-270m" in ids and "tiny-chatml" in ids
    card = next(m for m in models["data"] if m["id"] == "gemma-3-270m")
    assert card["object"] == "model" and card["owned_by"] and isinstance(card["created"], int)
    assert card["context_length"] == 8192
    assert all(isinstance(m["context_length"], int) for m in models["data"] if m["id"] != "ghost")
    assert http.get("/health").json()["status"] == "ok"


def test_any_authorization_header_is_fine_without_a_key(http: httpx.Client):
    r = http.post("/v1/chat/completions", json={"messages": HELLO, "max_tokens": 1},
                  headers={"Authorization": "Bearer sk-dummy"})
    assert r.status_code == 200


def test_cors_allows_localhost_origins_only(http: httpx.Client):
    ok = http.options("/v1/chat/completions", headers={"Origin": "http://localhost:3000",
                                                       "Access-Control-Request-Method": "POST"})
    assert ok.headers.get("access-control-allow-origin") == "http://localhost:3000"
    bad = http.options("/v1/chat/completions", headers={"Origin": "https://evil.example",
                                                        "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in bad.headers


def test_trailing_assistant_message_is_continued(client: openai.OpenAI):
    """A prefill: the answer continues the assistant's text instead of opening a new turn."""
    messages = HELLO + [{"role": "assistant", "content": "The sea is"}]
    with_prefill = client.chat.completions.create(model=GEMMA, messages=messages, max_tokens=2)
    plain = client.chat.completions.create(model=GEMMA, messages=HELLO, max_tokens=2)
    # The prefill's tokens sit in the prompt; no end-of-turn and no new model turn are added.
    assert with_prefill.usage.prompt_tokens == plain.usage.prompt_tokens + 3


def test_serve_prints_the_url_the_model_and_a_curl_line(server):
    banner = server.output()
    assert f"http://127.0.0.1:{server.port}/v1" in banner
    assert f"serving {DEFAULT}" in banner
    assert "curl http://127.0.0.1" in banner and "/chat/completions" in banner


def test_a_default_model_that_cannot_load_stops_the_start_in_one_line(registry_file: Path):
    """The app's lifespan loads the default model before the port takes requests; when it cannot, the
    CLI says why in one line (uvicorn logs no traceback) and exits 1."""
    done = subprocess.run([sys.executable, "-m", "localchat", "serve", "--config", str(registry_file), "--model",
                           "ghost", "--port", str(free_port())], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "lifespan" not in done.stderr
    assert "/nonexistent/ghost.gguf" in done.stderr.splitlines()[-1]
