"""An error after the stream has started is reported in-band, then [DONE].

The engine cannot be made to fail on demand, so this one drives the SSE writer with a turn
whose engine fails after its first token."""

from __future__ import annotations

import asyncio
import json

from localchat.api.openai.chat import _Form, _stream
from localchat.generation import Delta
from localchat.errors import EngineError


class FailingTurn:
    model = "m"
    n = 1

    async def events(self):
        yield 0, Delta("Hello")
        raise EngineError("llama_decode returned -3")


def test_error_after_start_is_an_error_event_then_done():
    async def collect() -> list[bytes]:
        return [c async for c in _stream(FailingTurn(), {"id": "chatcmpl-x", "created": 1, "model": "m"},
                                        _Form(include_usage=True), "/v1/chat/completions")]

    frames = asyncio.run(collect())
    assert frames[-1] == b"data: [DONE]\n\n"
    error = json.loads(frames[-2][len(b"data: "):])
    assert error["error"]["message"] == "llama_decode returned -3" and error["error"]["type"] == "server_error"
    first = json.loads(frames[0][len(b"data: "):])
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
