"""The Starlette app: each protocol package's routes, the web page, the health route; the
middleware (access log, localhost guard, CORS); errors mapped once, in the protocol's shape."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ..errors import LocalchatError
from ..generation import Chat
from ..logs import escape_request_text
from . import errors
from . import mcp_bridge
from . import webui as page
from .access import AccessLog
from .guard import LocalOnly, Origins
from .health import health as health_body
from .metrics import Metrics, routes as metrics_routes
from .protocols import PROTOCOLS


log = logging.getLogger("localchat.api")


def create_app(chat: Chat, *, api_key: str | None = None, loopback_only: bool = True,
               origins: Origins | None = None, webui: bool = True,
               lifespan: Callable[[Starlette], AbstractAsyncContextManager[None]] | None = None,
               more_routes: Sequence[BaseRoute] = ()) -> Starlette:
    """webui: serve the chat page at `/` (and its files under /ui/). lifespan: what runs before the
    first request and after the last (server.py's loads the default model and closes every model)."""
    origins = origins or Origins()  # one list of allowed browser origins: CORS headers and the 403 check
    recent: deque[dict[str, Any]] = deque(maxlen=20)  # the last requests answered, newest first (GET /health)
    metrics = Metrics() if chat.settings.metrics else None  # GET /metrics (metrics.py), off by default

    async def health(request: Request) -> Response:
        return JSONResponse(await health_body(chat, recent))


    routes = [
        Route("/health", health, methods=["GET"]),
        *(route for protocol in PROTOCOLS for route in protocol.routes(chat)),
        *more_routes,  # server.py's: the peer's, for other localchats' upstream entries (serve --peer)
        *(metrics_routes(chat, metrics) if metrics else []),
        *(page.routes() if webui else []),
        *(mcp_bridge.routes(chat) if webui else []),  # the page's way to MCP servers
    ]
    public = (page.PUBLIC_PATHS, page.PUBLIC_PREFIXES) if webui else ((), ())
    middleware = [
        Middleware(AccessLog, enabled=chat.settings.log_requests, recent=recent, metrics=metrics),
        Middleware(LocalOnly, api_key=api_key, loopback_only=loopback_only, origins=origins,
                   public_paths=public[0], public_prefixes=public[1]),
        Middleware(CORSMiddleware, **origins.cors_options()),
    ]
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan, exception_handlers={
        LocalchatError: _error_response, HTTPException: _http_error, Exception: _crash,
    })
    app.state.error_shapes = errors.ErrorShapes(shape for protocol in PROTOCOLS for shape in protocol.ERRORS)
    return app


# -- errors, mapped once --------------------------------------------------------------------

def _shape(request: Request) -> errors.ErrorShape:
    """The error shape of the request's protocol (app.state.error_shapes, by path)."""
    return request.app.state.error_shapes.of(request.url.path)


async def _error_response(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LocalchatError)
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
    return JSONResponse(_shape(request).render(exc), status_code=exc.status, headers=headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kind = "not_found" if exc.status_code == 404 else "invalid_request_error"
    message = f"no route {request.method} {request.url.path}" if exc.status_code in (404, 405) else str(exc.detail)
    return JSONResponse(_shape(request).body(exc.status_code, kind, message), status_code=exc.status_code)


async def _crash(request: Request, exc: Exception) -> Response:
    log.exception("request failed: %s %s", request.method, request.url.path)
    return JSONResponse(_shape(request).body(500, "server_error", f"internal error: {exc}"), status_code=500)


escape_request_text()  # request text never reaches a log line raw (logs.py)
