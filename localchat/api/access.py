"""The access log: one line per request, written when its response has ended — method, path,
status, model, prompt / cached / generated tokens, time to first token, total time, and for a
failed request (or an error inside a stream) the message it got. Request text is escaped
(logs.py). `log_requests = false` in models.toml, or `localchat serve --quiet`, turns it off."""

from __future__ import annotations

import json
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..logs import start_request

if TYPE_CHECKING:
    from .metrics import Metrics

log = logging.getLogger("localchat.access")
_KEEP = 8192  # bytes of an error response read for its message


class AccessLog:
    """`enabled`: write the log line; `recent`: where the requests that generated are kept, newest
    first (GET /health shows them), whether or not the line is written; `metrics`: what counts
    each request (GET /metrics), if they are on."""

    def __init__(self, app: ASGIApp, enabled: bool = True, recent: deque[dict[str, Any]] | None = None,
                 metrics: Metrics | None = None) -> None:
        self.app, self.enabled, self.recent, self.metrics = app, enabled, recent, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        record = start_request(scope["method"], scope["path"])
        body = bytearray()

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                record.status = message["status"]
            elif message["type"] == "http.response.body" and record.status >= 400 and len(body) < _KEEP:
                body.extend(message.get("body", b"")[:_KEEP])
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except BaseException as exc:
            if record.status == 0:  # a crash: the server's error middleware, outside this one, answers 500
                record.status, record.error = 500, f"internal error: {exc}"
            raise
        finally:
            if record.status >= 400 and not record.error:
                record.error = _message(bytes(body))
            if record.status == 0:
                record.status = 499  # no response: the client left first
            if self.enabled:
                log.info("%s", record.line())
            if self.recent is not None and record.model:
                self.recent.appendleft(record.answered())
            if self.metrics is not None:
                self.metrics.observe(record, scope)


def _message(body: bytes) -> str | None:
    """The message of an error body, whatever the protocol's shape."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()[:500] or None
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        return str(error.get("message"))
    return str(error) if error else None
