"""An error after the stream has started is reported in-band, in each protocol's own shape; before
it started, it is an HTTP error. Over the scripted engine (engine/fake.py), in-process: the engine
fails on demand — an engine error, a worker crash, a broken script — after its first token or
before it. The same over a real server with the SDKs: test_fake_served.py; a real worker's
death: test_worker.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import TINY_CTX
from localchat.engine.fake import Crash, Wait
from localchat.errors import EngineError
from localchat.models import ModelSpec, Registry, Settings
from test_protocols import post, sse_events

pytestmark = pytest.mark.fast

HI = [{"role": "user", "content": "Hi"}]
DECODE_FAILED = "llama_decode returned -3"
FAILS = {"error": ["Hello", EngineError(DECODE_FAILED)], "crash": ["Hello", Crash()]}
CODES = {"error": "engine_error", "crash": "engine_crashed"}


@pytest.fixture(scope="module")
def registry(tiny_models: dict[str, Path]) -> Registry:
    spec = ModelSpec(name="chatml", path=tiny_models["chatml"], context_length=TINY_CTX, parallel=2)
    return Registry({"chatml": spec}, "chatml", settings=Settings(worker=False))


def test_error_after_start_is_an_error_event_then_done(registry: Registry):
    events = sse_events(post(registry, FAILS["error"], "/v1/chat/completions",
                             {"messages": HI, "stream": True, "stream_options": {"include_usage": True}}))
    assert events[0][1]["choices"][0]["delta"] == {"role": "assistant", "content": ""}  # type: ignore[index]
    assert events[1][1]["choices"][0]["delta"] == {"content": "Hello"}  # type: ignore[index]
    assert events[-1] == (None, "[DONE]")
    error = events[-2][1]["error"]  # type: ignore[index]
    assert error == {"message": DECODE_FAILED, "type": "server_error", "param": None, "code": "engine_error"}


@pytest.mark.parametrize("kind", list(FAILS))
@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"messages": HI}), ("/v1/completions", {"prompt": "Hi"}),
    ("/v1/messages", {"messages": HI, "max_tokens": 50}), ("/v1/responses", {"input": "Hi"}),
    ("/api/chat", {"messages": HI}), ("/api/generate", {"prompt": "Hi"})])
def test_every_protocol_reports_it_in_band_streamed_and_as_a_500_whole(registry: Registry, path: str, body: dict,
                                                                        kind: str):
    streamed = post(registry, FAILS[kind], path, {**body, "stream": True})
    assert streamed.status_code == 200 and "Hello" in streamed.text
    if path.startswith("/api/"):
        last = json.loads(streamed.text.splitlines()[-1])
        assert set(last) == {"error"} and (DECODE_FAILED in last["error"] or "crashed" in last["error"])
    else:
        events = sse_events(streamed)
        error = next(data for name, data in reversed(events) if name == "error" or (
            isinstance(data, dict) and "error" in data and name is None))
        flat = error.get("error") or error  # type: ignore[union-attr]
        assert DECODE_FAILED in flat["message"] or "crashed (signal SIGSEGV)" in flat["message"]
    whole = post(registry, FAILS[kind], path, {**body, "stream": False})
    assert whole.status_code == 500, whole.text
    if path in ("/v1/chat/completions", "/v1/completions", "/v1/responses"):
        assert whole.json()["error"]["code"] == CODES[kind]


def test_a_failure_before_the_first_token_still_opens_the_stream(registry: Registry):
    events = sse_events(post(registry, [Wait(0.05), EngineError(DECODE_FAILED)], "/v1/messages",
                             {"messages": HI, "max_tokens": 50, "stream": True}))
    assert [name for name, _ in events] == ["message_start", "ping", "error"]
    assert events[-1][1] == {"type": "error", "error": {"type": "api_error", "message": DECODE_FAILED}}


def test_a_script_that_raises_ends_the_stream_not_hangs_it(registry: Registry):
    def broken(request, choice):
        yield "Hi"
        raise RuntimeError("the script broke")

    events = sse_events(post(registry, broken, "/v1/chat/completions", {"messages": HI, "stream": True}))
    assert events[-1] == (None, "[DONE]")
    assert events[-2][1]["error"]["message"] == "internal error: the script broke"  # type: ignore[index]
