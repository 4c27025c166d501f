"""Server-sent events, and cancelling work when the client goes away.

Starlette's StreamingResponse only notices a disconnect when a write fails (ASGI 2.4 servers);
here a watcher on `receive` cancels the stream as soon as the client closes the connection, so
decoding stops within a token and a request still queued never starts.

A stream is never silent for long: while a request waits in the queue or its prompt is being
read, a keepalive (an SSE comment, or the protocol's own ping) goes out every KEEPALIVE seconds,
so agents that drop a silent connection after a few minutes keep waiting."""

from __future__ import annotations

import asyncio
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
COMMENT = b": keepalive\n\n"  # an SSE comment: every SSE client skips it
Keepalive = bytes | Callable[[], bytes] | None  # what a silent stream sends: fixed bytes, or made each time
KEEPALIVE = 10.0  # seconds a stream may stay silent before a keepalive goes out


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
                      headers: dict[str, str] | Callable[[], dict[str, str]] | None = None) -> Response:
    """A non-streamed answer: `work` builds the JSON body, `close` ends the request's turn(s)
    whatever happens; a client that left first gets no body (499, "client closed request").
    `headers` may be a function, called once the body is made."""
    try:
        body = await until_disconnect(receive, work)
    finally:
        close()
    made = headers() if callable(headers) else headers
    return JSONResponse(body, headers=made) if body else Response(status_code=499)


LOOSENED_HEADER = "x-localchat-loosened"
CHECKED_HEADER = "x-localchat-checked"
_LOOSENED_MAX = 64  # entries in a header; the server log has them all


def loosened_headers(*turns: Any) -> dict[str, str]:
    """The schema keywords the turns' grammars do not hold exactly, `[tool name]#/json/pointer:keyword`
    comma-separated (a pointer's characters outside printable ASCII, and `%`, `,`, space,
    percent-encoded): x-localchat-checked for those a check of each written value holds (a
    value that breaks them is written again), x-localchat-loosened for those nothing holds,
    and those whose checking gave up (known once the answer is written)."""
    checked = list(dict.fromkeys(e for turn in turns for e in getattr(turn, "checked", ())))
    loosened = list(dict.fromkeys(e for turn in turns for e in (*getattr(turn, "loosened", ()),
                                                               *getattr(turn, "unchecked", ()))))
    return {name: _listed(entries) for name, entries in ((CHECKED_HEADER, checked), (LOOSENED_HEADER, loosened))
            if entries}


def _listed(entries: list[str]) -> str:
    shown = [quote(e, safe="#/:~!$&'()*+;=@[]{}|^`<>?.-_") for e in entries[:_LOOSENED_MAX]]
    if len(entries) > _LOOSENED_MAX:
        shown.append(f"+{len(entries) - _LOOSENED_MAX} more")
    return ", ".join(shown)


class EventStream:
    """An ASGI response streaming pre-framed chunks: SSE by default, or NDJSON. `keepalive` is
    sent whenever the next chunk takes longer than KEEPALIVE seconds to come (None: nothing)."""

    def __init__(self, chunks: AsyncIterator[bytes], on_close: Callable[[], None] | None = None,
                 media_type: str = "text/event-stream; charset=utf-8", keepalive: Keepalive = COMMENT,
                 headers: dict[str, str] | None = None) -> None:
        self.chunks = chunks
        self.media_type = media_type
        self.on_close = on_close  # runs once the response is over, even if the stream never started
        self.keepalive = keepalive if media_type.startswith("text/event-stream") else None
        self.headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", self.media_type.encode()),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
            *self.headers,
        ]})

        async def pump() -> None:
            chunks = self._kept_alive()
            try:
                async for chunk in chunks:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            finally:
                with anyio.CancelScope(shield=True):
                    await chunks.aclose()  # first: it ends a read of self.chunks still under way
                    await self.chunks.aclose()
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        try:
            await until_disconnect(receive, pump)
        finally:
            if self.on_close is not None:
                self.on_close()

    async def _kept_alive(self) -> AsyncIterator[bytes]:
        """The chunks, with a keepalive whenever the next one is slow to come. The wait for a
        chunk is never cancelled by the timer: the same pending read is awaited again."""
        if self.keepalive is None:
            async for chunk in self.chunks:
                yield chunk
            return
        it = aiter(self.chunks)
        while True:
            pending = asyncio.ensure_future(anext(it))
            try:
                while not (await asyncio.wait({pending}, timeout=KEEPALIVE))[0]:
                    yield self.keepalive() if callable(self.keepalive) else self.keepalive
            finally:
                if not pending.done():  # cancelled, or the client left: the read ends before the stream is closed
                    pending.cancel()
                    with anyio.CancelScope(shield=True):
                        await asyncio.wait({pending})
            try:
                chunk = pending.result()
            except StopAsyncIteration:
                return
            yield chunk
