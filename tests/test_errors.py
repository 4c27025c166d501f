"""Bad input gets an OpenAI-shaped error naming the field, and never hurts the server."""

from __future__ import annotations

import httpx
import openai
import pytest

from conftest import GEMMA, TINY_CTX

HELLO = [{"role": "user", "content": "hello"}]


def _error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    return err


@pytest.mark.parametrize("body, param", [
    ({"messages": HELLO, "temperature": 5}, "temperature"),
    ({"messages": HELLO, "top_p": -1}, "top_p"),
    ({"messages": HELLO, "max_tokens": 0}, "max_tokens"),
    ({"messages": HELLO, "n": 0}, "n"),
    ({"messages": HELLO, "n": 5}, "n"),  # more than the model's 4 slots
    ({"messages": HELLO, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"messages": HELLO, "stop": ["x"] * 17}, "stop"),
    ({"messages": []}, "messages"),
    ({}, "messages"),
    ({"messages": "hello"}, "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
    ({"messages": [{"content": "x"}]}, "messages.0.role"),
    ({"messages": [{"role": "user"}]}, "messages.0.content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "messages.0.content.0.image_url.url"),
    ({"messages": HELLO, "logit_bias": {"abc": 1}}, "logit_bias"),
    ({"messages": HELLO, "logit_bias": {"99999999": 1}}, "logit_bias"),
    ({"messages": HELLO, "stream": "yes please"}, "stream"),
])
def test_bad_fields_are_400_naming_the_field(http: httpx.Client, body: dict, param: str):
    err = _error(http.post("/v1/chat/completions", json=body), 400)
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param, err
    assert param.split(".")[0] in err["message"]


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b"", "\"\udcff\"".encode("utf-8", "surrogatepass")])
def test_malformed_bodies_are_400(http: httpx.Client, raw: bytes):
    err = _error(http.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"}), 400)
    assert "JSON" in err["message"]


def test_unknown_model_is_404_with_the_sdk(client: openai.OpenAI):
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="no-such-model", messages=HELLO)
    assert info.value.body["code"] == "model_not_found"
    assert "no-such-model" in info.value.body["message"]


def test_unknown_model_is_404_when_streaming_too(http: httpx.Client):
    err = _error(http.post("/v1/chat/completions", json={"model": "nope", "messages": HELLO, "stream": True}), 404)
    assert err["param"] == "model"


@pytest.mark.parametrize("stream", [False, True])
def test_prompt_longer_than_the_context_is_400_before_any_event(http: httpx.Client, stream: bool):
    long = [{"role": "user", "content": "the sea " * TINY_CTX}]
    r = http.post("/v1/chat/completions", json={"model": "tiny-gemma", "messages": long, "stream": stream})
    err = _error(r, 400)
    assert err["code"] == "context_length_exceeded"
    assert not r.headers["content-type"].startswith("text/event-stream")


def test_generation_stops_at_the_end_of_the_context(client: openai.OpenAI):
    # ~2,000 tokens: minutes on a busy 2-core machine, more than the client's usual 120 s
    r = client.with_options(timeout=900).chat.completions.create(
        model="tiny-gemma", messages=HELLO, max_tokens=10_000, seed=1, extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.total_tokens == TINY_CTX


def test_model_whose_file_is_gone_is_503_and_the_server_goes_on(http: httpx.Client, client: openai.OpenAI):
    http.post("/v1/chat/completions", json={"model": GEMMA, "messages": HELLO, "max_tokens": 1})
    err = _error(http.post("/v1/chat/completions", json={"model": "ghost", "messages": HELLO}), 503)
    assert err["code"] == "model_unavailable" and "/nonexistent/ghost.gguf" in err["message"]
    assert http.get("/health").json()["model"] == GEMMA, "the loaded model stayed loaded"
    assert client.chat.completions.create(model=GEMMA, messages=HELLO, max_tokens=1).choices[0].finish_reason


def test_non_loopback_host_header_is_403(http: httpx.Client):
    err = _error(http.get("/v1/models", headers={"Host": "attacker.example:8000"}), 403)
    assert "loopback" in err["message"]


def test_unknown_route_and_method(http: httpx.Client):
    _error(http.get("/v1/nothing"), 404)
    _error(http.get("/v1/chat/completions"), 405)


def test_server_still_answers_after_all_that(client: openai.OpenAI):
    assert client.chat.completions.create(model=GEMMA, messages=HELLO, max_tokens=2).choices[0].finish_reason


def test_api_key_when_configured(registry_file):
    from conftest import Server

    s = Server(registry_file, "--api-key", "s3cret", "--model", "tiny-chatml")
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            c.chat.completions.create(model="", messages=HELLO, max_tokens=1)
        ok = openai.OpenAI(base_url=s.url + "/v1", api_key="s3cret", max_retries=0)
        assert ok.chat.completions.create(model="", messages=HELLO, max_tokens=1).model == "tiny-chatml"
        assert httpx.get(s.url + "/health").status_code == 200
    finally:
        s.stop()


def test_port_in_use_is_a_clear_message(registry_file, server):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "localchat", "serve", "--port", str(server.port),
                        "--config", str(registry_file)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "in use" in r.stderr and "--port" in r.stderr


def test_body_over_the_limit_is_413(http: httpx.Client):
    big = b'{"messages": [{"role": "user", "content": "' + b"a" * (33 * 1024 * 1024) + b'"}]}'
    err = _error(http.post("/v1/chat/completions", content=big, headers={"content-type": "application/json"}), 413)
    assert "MiB" in err["message"]


def test_lone_surrogates_in_text_are_not_a_crash(http: httpx.Client):
    body = b'{"model": "tiny-chatml", "messages": [{"role": "user", "content": "a\\ud800b"}], "max_tokens": 2, "stop": ["\\udfff"]}'
    r = http.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text


def test_overlong_stop_string_is_400(http: httpx.Client):
    err = _error(http.post("/v1/chat/completions", json={"messages": HELLO, "stop": "x" * 1001}), 400)
    assert err["param"] == "stop"


def test_n_above_the_slots_is_a_400_from_the_engine_too(tmp_path):
    """Generation refuses it first; a request that reaches the engine another way gets the same
    400 (field `n`), not a 500."""
    import asyncio

    from localchat.engine import Generate, LocalEngine, SamplingParams
    from localchat.errors import InvalidRequest
    from localchat.families import FAMILIES
    from localchat.devtools.tinymodels import write_tiny_model

    engine = LocalEngine(write_tiny_model(tmp_path / "m.gguf", FAMILIES["chatml"], n_ctx=256), n_ctx=256, parallel=2)

    async def first_event():
        async for event in engine.generate(Generate([1, 2, 3], SamplingParams(max_tokens=1), n=3)):
            return event

    try:
        with pytest.raises(InvalidRequest) as refused:
            asyncio.run(first_event())
        assert refused.value.field == "n" and refused.value.status == 400 and "parallel" in refused.value.message
    finally:
        engine.close()
