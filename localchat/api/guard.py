"""Localhost safety: refuse DNS-rebinding Host headers, and check the API key if one is set."""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "[::1]", "::1"}


class LocalOnly:
    def __init__(self, app: ASGIApp, *, api_key: str | None, loopback_only: bool) -> None:
        self.app = app
        self.api_key = api_key
        self.loopback_only = loopback_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        if self.loopback_only:
            host = headers.get(b"host", b"").decode("latin-1").lower()
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if name not in LOOPBACK_HOSTS:
                return await _deny(send, 403, "permission_error",
                                   f"Host {host!r} is not a loopback name; this server answers localhost only")
        if self.api_key and scope["method"] != "OPTIONS" and scope["path"] != "/health":
            given = headers.get(b"authorization", b"").decode("latin-1").removeprefix("Bearer ").strip()
            if not hmac.compare_digest(given.encode(), self.api_key.encode()):
                return await _deny(send, 401, "authentication_error",
                                   "missing or wrong API key: send `Authorization: Bearer <key>`")
        await self.app(scope, receive, send)


async def _deny(send: Send, status: int, kind: str, message: str) -> None:
    body = json.dumps({"error": {"message": message, "type": kind, "param": None, "code": None}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
