"""Ollama's model management, as far as localchat does it: `POST /api/pull` fetches a Hugging Face
GGUF as `localchat pull` does (`hf.co/OWNER/REPO:QUANT`, Ollama's own way to name one; or
OWNER/REPO[:QUANT], a URL) with Ollama's NDJSON progress lines; `DELETE /api/delete` forgets a
model of the user's registry (its files stay in the Hugging Face cache). Both through the
service's `chat.models` (generation/models.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...errors import InvalidRequest, LocalchatError, PullCancelled
from ...generation import Chat
from ...models.hub import parse_source
from ..body import parse, read_json
from .chat import Named, model_name
from ..sse import EventStream, json_answer, ndjson


class PullBody(Named):
    stream: bool = True
    insecure: bool = False  # Ollama's; ignored (hub downloads are https, and checked)


class Feed:
    """pull.Progress for one request: Ollama's progress lines, into a queue the response reads.
    Once the client has left, the download stops at its next chunk (the next pull resumes it)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.queue = loop, asyncio.Queue[Any]()
        self.cancelled = False
        self.files: dict[str, list[int]] = {}  # file → [total, completed]

    def put(self, item: Any) -> None:
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)

    def status(self, text: str) -> None:
        self.put({"status": text})

    def start(self, file: str, total: int | None, done: int) -> None:
        self.files[file] = [total or 0, done]
        self.put(self._line(file))

    def advance(self, file: str, n: int) -> None:
        if self.cancelled:
            raise PullCancelled("the client left; the download stops here and resumes at the next pull")
        self.files[file][1] += n
        self.put(self._line(file))

    def _line(self, file: str) -> dict[str, Any]:
        total, done = self.files[file]
        return {"status": f"pulling {file}", "digest": file, "total": total, "completed": done}


async def pull_route(chat: Chat, request: Request) -> Response:
    body = parse(PullBody, await read_json(request, chat.settings.max_body_bytes))
    text = body.named
    if not text:
        raise InvalidRequest("model: say what to pull, e.g. hf.co/OWNER/REPO:Q4_K_M", param="model")
    parse_source(text)  # a source it cannot pull is a 400 before anything streams
    feed = Feed(asyncio.get_running_loop())

    def run() -> None:  # in a thread: the download, then the registry read again
        try:
            chat.models.pull(text, feed)
            feed.put({"status": "success"})
        except BaseException as exc:  # noqa: BLE001 - reported to the client, never lost
            feed.put(exc)
        feed.put(None)

    def stop() -> None:
        feed.cancelled = True

    task = asyncio.ensure_future(asyncio.to_thread(run))
    if body.stream:
        return EventStream(_lines(feed, task), on_close=stop, media_type="application/x-ndjson")
    return await json_answer(request.receive, lambda: _last(feed, task), stop)


async def _lines(feed: Feed, task: asyncio.Future[None]):  # noqa: ANN202 - an async generator of NDJSON lines
    while (item := await feed.queue.get()) is not None:
        if isinstance(item, LocalchatError):
            yield ndjson({"error": item.message})
        elif isinstance(item, BaseException):
            yield ndjson({"error": f"pull failed: {item}"})
        else:
            yield ndjson(item)
    await task


async def _last(feed: Feed, task: asyncio.Future[None]) -> dict[str, Any]:
    """stream: false — one object at the end: {"status": "success"}, or the error (raised)."""
    last: dict[str, Any] = {}
    while (item := await feed.queue.get()) is not None:
        if isinstance(item, BaseException):
            await task
            raise item if isinstance(item, LocalchatError) else LocalchatError(f"pull failed: {item}")
        last = item
    await task
    return last


async def delete_route(chat: Chat, request: Request) -> Response:
    body = parse(Named, await read_json(request, chat.settings.max_body_bytes))
    if not body.named:
        raise InvalidRequest("model: say which model to delete", param="model")
    await chat.models.delete(model_name(chat.models, body.named))
    return JSONResponse({})
