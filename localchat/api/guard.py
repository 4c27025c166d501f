"""Localhost safety, checked before any work: refuse DNS-rebinding Host headers, refuse browser
requests from foreign web pages (CSRF), and check the API key if one is set."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send


LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "[::1]", "::1"}
# Web pages that may call the server from a browser: localhost pages on any port, and VS Code webviews.
LOCAL_ORIGINS = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?|vscode-webview://.*|vscode-file://.*"
_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s?#]+")
_BODYLESS = {"GET", "HEAD", "OPTIONS"}


@dataclass(frozen=True)
class Origins:
    """The browser origins allowed to call the server: one list for the CORS headers and the 403 check.

    `extra` are the user's (`--cors-origins`); `*` in them allows any origin, never with credentials."""

    extra: tuple[str, ...] = ()

    @classmethod
    def parse(cls, values: Iterable[str] | None) -> Origins:
        """Origins from repeated and/or comma-separated values; ValueError names a malformed one."""
        extra: list[str] = []
        for value in values or ():
            for item in re.split(r"[,\s]+", value):
                item = item.strip().rstrip("/").lower()
                if not item:
                    continue
                if item != "*" and not _ORIGIN.fullmatch(item):
                    raise ValueError(f"--cors-origins: {item!r} is not an origin: give scheme://host[:port], "
                                     "like https://app.example or http://192.168.1.5:3000 (or * for any origin)")
                if item not in extra:
                    extra.append(item)
        return cls(tuple(extra))

    @property
    def any(self) -> bool:
        return "*" in self.extra

    @property
    def regex(self) -> str:
        return "|".join([LOCAL_ORIGINS, *(re.escape(o) for o in self.extra if o != "*")])

    def allows(self, origin: str) -> bool:
        return self.any or re.fullmatch(self.regex, origin) is not None

    def cors_options(self) -> dict[str, object]:
        """Keyword arguments for Starlette's CORSMiddleware. Credentials are never allowed (the API
        uses keys in headers, not cookies), so `*` is sent as a plain `*`."""
        return {"allow_origins": ["*"] if self.any else [], "allow_origin_regex": self.regex,
                "allow_credentials": False, "allow_methods": ["*"], "allow_headers": ["*"],
                "allow_private_network": True}


class LocalOnly:
    def __init__(self, app: ASGIApp, *, api_key: str | None, loopback_only: bool,
                 origins: Origins | None = None, public_paths: Iterable[str] = (),
                 public_prefixes: tuple[str, ...] = ()) -> None:
        self.app = app
        self.api_key = api_key
        self.loopback_only = loopback_only
        self.origins = origins or Origins()
        # GET routes that need no key: /health, and the web page's files (the page asks for the key)
        self.public_paths = frozenset({"/health", *public_paths})
        self.public_prefixes = public_prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        if self.loopback_only:
            host = headers.get(b"host", b"").decode("latin-1").lower()
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if not _loopback_name(name):
                return await _deny(scope, send, 403, "permission_error",
                                   f"Host {host!r} is not a loopback name; this server answers localhost only")
        refused = self._cross_site(scope["method"], headers)
        if refused:
            return await _deny(scope, send, 403, "permission_error", refused, allow_origin=self._cors_origin(headers))
        if self.api_key and scope["method"] != "OPTIONS" and not self._public(scope["method"], scope["path"]):
            if not self._key_ok(headers):
                return await _deny(scope, send, 401, "authentication_error",
                                   "missing or wrong API key: send the key the server was started with "
                                   "(--api-key or LOCALCHAT_API_KEY) as `Authorization: Bearer <key>` "
                                   "or `x-api-key: <key>`", code="invalid_api_key",
                                   allow_origin=self._cors_origin(headers))
        await self.app(scope, receive, send)

    def _public(self, method: str, path: str) -> bool:
        return method in ("GET", "HEAD") and (path in self.public_paths or path.startswith(self.public_prefixes))

    def _cross_site(self, method: str, headers: dict[bytes, bytes]) -> str | None:
        """Why a browser request from another site is refused, or None. Clients that send no
        `Origin` (curl, SDKs) pass, unless a browser marked the request `Sec-Fetch-Site: cross-site`."""
        origin = headers.get(b"origin")
        if origin is None:
            if headers.get(b"sec-fetch-site", b"").strip().lower() == b"cross-site":
                return ("cross-site browser requests are refused (Sec-Fetch-Site: cross-site): call this server "
                        "from a localhost page, an origin allowed with --cors-origins, or curl or an SDK")
            return None
        shown = origin.decode("latin-1")
        if shown == "null":
            return ("requests from a page with origin null (a file:// or sandboxed page) are refused: "
                    "serve the page from http://localhost, or call the server from curl or an SDK")
        if not self.origins.allows(shown):
            return (f"requests from web pages at {shown} are refused (this server answers localhost pages); "
                    f"to allow that origin, start the server with --cors-origins {shown}")
        if method not in _BODYLESS:
            kind = headers.get(b"content-type", b"").decode("latin-1").split(";", 1)[0].strip().lower()
            if kind != "application/json" and not kind.endswith("+json"):
                return (f"a browser request must send its body as Content-Type: application/json "
                        f"(got {kind or 'no Content-Type'!r})")
        return None

    def _key_ok(self, headers: dict[bytes, bytes]) -> bool:
        assert self.api_key
        bearer = headers.get(b"authorization", b"").strip()
        scheme, _, token = bearer.partition(b" ")
        given = [token.strip() if scheme.lower() == b"bearer" else b"", headers.get(b"x-api-key", b"").strip()]
        # Compare digests: equal lengths, constant time, and never a TypeError on odd bytes.
        want = hashlib.sha256(self.api_key.encode()).digest()
        ok = [hmac.compare_digest(hashlib.sha256(g).digest(), want) for g in given]
        return any(ok)

    def _cors_origin(self, headers: dict[bytes, bytes]) -> str | None:
        """The Access-Control-Allow-Origin for an error answered here, so an allowed page can read it."""
        origin = headers.get(b"origin")
        if origin is None or not self.origins.allows(origin.decode("latin-1")):
            return None
        return "*" if self.origins.any else origin.decode("latin-1")


def _loopback_name(name: str) -> bool:
    if name in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


async def _deny(scope: Scope, send: Send, status: int, kind: str, message: str, *, code: str | None = None,
                allow_origin: str | None = None) -> None:
    body = json.dumps(scope["app"].state.error_shapes.of(scope["path"]).body(status, kind, message, None, code)).encode()  # the protocol's shape
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if allow_origin:
        headers += [(b"access-control-allow-origin", allow_origin.encode("latin-1")), (b"vary", b"Origin")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
