"""Server-sent events, and cancelling work when the client goes away.

Starlette's StreamingResponse only notices a disconnect when a write fails (ASGI 2.4 servers);
here a watcher on `receive` cancels the stream as soon as the client closes the connection, so
decoding stops within a token and a request still queued never starts."""

from __future__ import annotations

import json
from urllib.parse import quote
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import anyio
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

T = TypeVar("T")


def frame(data: dict[str, Any], event: str | None = None) -> bytes:
    """One SSE event; with `event`, a named one (`event: NAME` before its data, as Anthropic's)."""
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def ndjson(data: dict[str, Any]) -> bytes:
    """One line of newline-delimited JSON (Ollama's streaming)."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


DONE = b"data: [DONE]\n\n"


async def _watch(receive: Receive, scope: anyio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


async def until_disconnect(receive: Receive, work: Callable[[], Awaitable[T]]) -> T | None:
    """Run `work`; if the client disconnects first, cancel it and return None."""
    result: list[T] = []
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_watch, receive, tg.cancel_scope)
            result.append(await work())
            tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:  # a task group wraps the body's error: hand on the error itself
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    return result[0] if result else None


async def json_answer(receive: Receive, work: Callable[[], Awaitable[Any]], close: Callable[[], None],
                      headers: dict[str, str] | None = None) -> Response:
    """A non-streamed answer: `work` builds the JSON body, `close` ends the request's turn(s)
    whatever happens; a client that left first gets no body (499, "client closed request")."""
    try:
        body = await until_disconnect(receive, work)
    finally:
        close()
    return JSONResponse(body, headers=headers) if body else Response(status_code=499)


LOOSENED_HEADER = "x-localchat-loosened"
_LOOSENED_MAX = 64  # entries in the header; the server log has them all


def loosened_headers(*turns: Any) -> dict[str, str]:
    """The x-localchat-loosened header for the schema keywords the turns' grammars do not
    enforce: `[tool name]#/json/pointer:keyword`, comma-separated, with a pointer's characters
    outside printable ASCII (and `%`, `,`, space) percent-encoded."""
    entries = list(dict.fromkeys(e for turn in turns for e in getattr(turn, "loosened", ())))
    if not entries:
        return {}
    shown = [quote(e, safe="#/:~!$&'()*+;=@[]{}|^`<>?.-_") for e in entries[:_LOOSENED_MAX]]
    if len(entries) > _LOOSENED_MAX:
        shown.append(f"+{len(entries) - _LOOSENED_MAX} more")
    return {LOOSENED_HEADER: ", ".join(shown)}


class EventStream:
    """An ASGI response streaming pre-framed chunks: SSE by default, or NDJSON."""

    def __init__(self, chunks: AsyncIterator[bytes], on_close: Callable[[], None] | None = None,
                 media_type: str = "text/event-stream; charset=utf-8", headers: dict[str, str] | None = None) -> None:
        self.chunks = chunks
        self.media_type = media_type
        self.headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
        self.on_close = on_close  # runs once the response is over, even if the stream never started

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", self.media_type.encode()),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
            *self.headers,
        ]})

        async def pump() -> None:
            try:
                async for chunk in self.chunks:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            finally:
                with anyio.CancelScope(shield=True):
                    await self.chunks.aclose()
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        try:
            await until_disconnect(receive, pump)
        finally:
            if self.on_close is not None:
                self.on_close()
