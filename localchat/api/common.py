"""What every protocol does the same way: lenient request models, answering a turn streamed
or at once, and an error that happens once the stream has begun."""

from __future__ import annotations

import logging
from urllib.parse import urlsplit
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict
from starlette.requests import Request
from starlette.responses import Response

from ..generation import KNOBS
from ..errors import EngineError, LocalchatError
from ..generation.media import b64, data_uri
from ..neutral import EFFORTS, REASONING_OFF, Image, Reasoning, Sampling
from .sse import COMMENT, EventStream, Keepalive, json_answer

log = logging.getLogger("localchat.api")
SSE = "text/event-stream; charset=utf-8"


class Lenient(BaseModel):
    """A request model that ignores fields it does not know (clients send many)."""

    model_config = ConfigDict(extra="ignore")


Headers = dict[str, str] | Callable[[], dict[str, str]] | None


async def respond(request: Request, stream: bool, chunks: Callable[[], AsyncIterator[bytes]],
                  collect: Callable[[], Awaitable[dict[str, Any]]], close: Callable[[], None],
                  headers: Headers = None, keepalive: Keepalive = COMMENT, media_type: str = SSE) -> Response:
    """The answer, streamed (`chunks`, with keepalives while nothing comes) or at once
    (`collect`); `close` ends the turn(s) whatever happens. `headers` may be a function: a
    streamed answer's are known before it starts, a whole one's once it is written (what the
    checking of written values gave up on, x-localchat-loosened)."""
    if stream:
        made = headers() if callable(headers) else headers
        return EventStream(chunks(), on_close=close, keepalive=keepalive, headers=made, media_type=media_type)
    return await json_answer(request.receive, collect, close, headers)


def stream_error(exc: Exception) -> LocalchatError:
    """An error after the first byte, to report in-band: a localchat error as it is, anything
    else logged and reported as an internal error (the stream must never crash the server)."""
    if isinstance(exc, LocalchatError):
        return exc
    log.exception("stream failed")
    return EngineError(f"internal error: {exc}")


def sampling(fields: dict[str, Any], *, stop: str | list[str] | tuple[str, ...] | None = None,
             logit_bias: dict[str, float] | None = None, ignore_eos: bool = False) -> Sampling:
    """The neutral sampling overrides: the knobs the client set (None: not set), its stop
    strings, logit bias (token ids as the client wrote them) and ignore_eos."""
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    return Sampling(**{k: v for k, v in fields.items() if k in KNOBS and v is not None}, stop=stops or None,
                    logit_bias=dict(logit_bias or {}), ignore_eos=ignore_eos or None)


def openai_reasoning(effort: str | None) -> Reasoning | None:
    """OpenAI's `reasoning_effort` (chat) and `reasoning.effort` (Responses): "none" and
    "minimal" turn reasoning off, "low" / "medium" / "high" set its effort, another value turns
    it on at the template's default effort; None (not sent) leaves the template's default."""
    if effort is None:
        return None
    if effort in ("none", "minimal"):
        return REASONING_OFF
    return Reasoning(True, effort if effort in EFFORTS else None)  # type: ignore[arg-type]


def url_image(url: str, where: str, url_where: str | None = None) -> Image:
    """An image by URL: a data URI (`data:image/png;base64,…`), decoded here, or an http(s) or
    file URL, which generation loads where the server allows it. Errors about the image name
    `where` (the part), errors about the URL `url_where`."""
    url_where = url_where or where
    if urlsplit(url).scheme.lower() in ("http", "https", "file"):
        return Image(b"", None, where, url=url, url_where=url_where)
    return Image(data_uri(url, url_where), None, where)


def base64_image(data: str, media_type: str | None, where: str) -> Image:
    return Image(b64(data, where), media_type, where)
