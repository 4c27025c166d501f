"""The Starlette app: thin routes (parse → chat layer → serialize), errors mapped once."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..generation import (Chat, Delta, Finish, Logprobs, ReasoningDelta, ToolCallArguments, ToolCallStart, Turn, Usage,
                    total_usage)
from ..errors import LocalchatError
from ..logs import escape_request_text
from ..models import Registry, Settings
from . import errors
from .access import AccessLog
from . import webui as page
from .health import health as health_body
from .protocols import PROTOCOLS
from .body import parse, read_json
from .openai_media import media_capabilities
from .guard import LOCAL_ORIGINS, LocalOnly, Origins  # noqa: F401 - LOCAL_ORIGINS: the defaults, kept importable here
from .schemas import ChatCompletionRequest
from .sse import DONE, EventStream, frame, json_answer, loosened_headers

log = logging.getLogger("localchat.api")


def create_app(chat: Chat, *, api_key: str | None = None, loopback_only: bool = True,
               origins: Origins | None = None, webui: bool = True) -> Starlette:
    """webui: serve the chat page at `/` (and its files under /ui/)."""
    registry: Registry = chat.host.registry
    origins = origins or Origins()  # one list of allowed browser origins: CORS headers and the 403 check
    recent: deque[dict[str, Any]] = deque(maxlen=20)  # the last requests answered, newest first (GET /health)

    async def health(request: Request) -> Response:
        return JSONResponse(health_body(chat, recent))

    async def models(request: Request) -> Response:
        def cards() -> list[dict[str, Any]]:  # reading GGUF headers: off the event loop
            return [{**_model_card(registry, name, chat.host.context_length(name), name in chat.host.loaded),
                     "capabilities": media_capabilities(chat.host.projector(name))} for name in registry.models]

        return JSONResponse({"object": "list", "data": await asyncio.to_thread(cards)})

    async def chat_completions(request: Request) -> Response:
        limits: Settings = chat.host.settings
        body = await read_json(request, limits.max_body_bytes)
        def prepare() -> tuple[ChatCompletionRequest, Any]:  # schema checks and images take a while: off the loop
            req = parse(ChatCompletionRequest, body, limits=limits)
            return req, req.to_chat(limits)

        req, chat_request = await asyncio.to_thread(prepare)
        turn = await chat.start(chat_request)
        meta = {"id": f"chatcmpl-{secrets.token_hex(12)}", "created": int(time.time()), "model": turn.model}
        logprobs = req.logprobs
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            return EventStream(_stream(turn, meta, include_usage, logprobs), on_close=turn.close,
                               headers=loosened_headers(turn))
        return await json_answer(request.receive, lambda: _collect(turn, meta, logprobs), turn.close,
                                 loosened_headers(turn))

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/models", models, methods=["GET"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/chat/completions", chat_completions, methods=["POST"]),
        *(route for protocol in PROTOCOLS for route in protocol.routes(chat)),
        *(page.routes() if webui else []),
    ]
    public = (page.PUBLIC_PATHS, page.PUBLIC_PREFIXES) if webui else ((), ())
    middleware = [
        Middleware(AccessLog, enabled=chat.host.settings.log_requests, recent=recent),
        Middleware(LocalOnly, api_key=api_key, loopback_only=loopback_only, origins=origins,
                   public_paths=public[0], public_prefixes=public[1]),
        Middleware(CORSMiddleware, **origins.cors_options()),
    ]
    return Starlette(routes=routes, middleware=middleware, exception_handlers={
        LocalchatError: _error_response, HTTPException: _http_error, Exception: _crash,
    })


# -- responses ------------------------------------------------------------------------------

def _delta(piece: Delta | ReasoningDelta | ToolCallStart | ToolCallArguments) -> dict[str, Any]:
    if isinstance(piece, Delta):
        return {"content": piece.content}
    if isinstance(piece, ReasoningDelta):
        return {"reasoning_content": piece.text}
    if isinstance(piece, ToolCallStart):
        return {"tool_calls": [{"index": piece.index, "id": piece.id, "type": "function",
                                "function": {"name": piece.name, "arguments": ""}}]}
    return {"tool_calls": [{"index": piece.index, "function": {"arguments": piece.fragment}}]}


async def _stream(turn: Turn, meta: dict[str, Any], include_usage: bool, logprobs: bool) -> AsyncIterator[bytes]:
    def chunk(i: int, delta: dict[str, Any], finish: str | None = None, lp: list | None = None) -> bytes:
        choice: dict[str, Any] = {"index": i, "delta": delta, "finish_reason": finish}
        if logprobs:
            choice["logprobs"] = {"content": lp, "refusal": None} if lp else None
        return frame({**meta, "object": "chat.completion.chunk", "choices": [choice]})

    pending: list[list[dict[str, Any]]] = [[] for _ in range(turn.n)]  # logprobs not yet sent, per choice
    finishes: list[Finish] = []
    for i in range(turn.n):
        yield chunk(i, {"role": "assistant", "content": ""})
    try:
        async for i, event in turn.events():
            if isinstance(event, Logprobs):
                pending[i] += [_logprob(t) for t in event.tokens]
            elif isinstance(event, Finish):
                finishes.append(event)
                yield chunk(i, {}, event.reason, pending[i])
            else:
                lp, pending[i] = (pending[i], []) if isinstance(event, Delta) else (None, pending[i])
                yield chunk(i, _delta(event), None, lp)
        if include_usage and finishes:
            yield frame({**meta, "object": "chat.completion.chunk", "choices": [], "usage": _usage(total_usage(finishes))})
    except LocalchatError as exc:
        yield frame(exc.to_json())
    except Exception as exc:  # noqa: BLE001 - the stream has started: report in-band, never crash
        log.exception("stream failed")
        yield frame({"error": {"message": f"internal error: {exc}", "type": "server_error", "param": None, "code": None}})
    yield DONE


class _Choice:
    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.logprobs: list[dict[str, Any]] = []
        self.finish: Finish | None = None

    def add(self, event: Any) -> None:
        if isinstance(event, Delta):
            self.content.append(event.content)
        elif isinstance(event, ReasoningDelta):
            self.reasoning.append(event.text)
        elif isinstance(event, ToolCallStart):
            self.calls.append({"id": event.id, "type": "function", "function": {"name": event.name, "arguments": ""}})
        elif isinstance(event, ToolCallArguments):
            self.calls[event.index]["function"]["arguments"] += event.fragment
        elif isinstance(event, Logprobs):
            self.logprobs += [_logprob(t) for t in event.tokens]
        else:
            self.finish = event

    def message(self, index: int, logprobs: bool) -> dict[str, Any]:
        text = "".join(self.content)
        message: dict[str, Any] = {"role": "assistant", "content": text if text or not self.calls else None}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = self.calls
        assert self.finish is not None
        return {"index": index, "message": message, "finish_reason": self.finish.reason,
                "logprobs": {"content": self.logprobs, "refusal": None} if logprobs else None}


async def _collect(turn: Turn, meta: dict[str, Any], logprobs: bool) -> dict[str, Any]:
    choices = [_Choice() for _ in range(turn.n)]
    async for i, event in turn.events():
        choices[i].add(event)
    usage = total_usage([c.finish for c in choices if c.finish is not None])
    return {**meta, "object": "chat.completion", "choices": [c.message(i, logprobs) for i, c in enumerate(choices)],
            "usage": _usage(usage)}


def _logprob(t: Any) -> dict[str, Any]:
    return {"token": t.token, "logprob": t.logprob, "bytes": t.bytes,
            "top_logprobs": [{"token": x.token, "logprob": x.logprob, "bytes": x.bytes} for x in t.top]}


def _usage(u: Usage) -> dict[str, Any]:
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
            "total_tokens": u.total_tokens, "prompt_tokens_details": {"cached_tokens": u.cached_tokens}}


def _model_card(registry: Registry, name: str, context_length: int | None, loaded: bool) -> dict[str, Any]:
    spec = registry.models[name]
    return {"id": name, "object": "model", "created": 0, "owned_by": "localchat",
            "aliases": spec.aliases, "default": name == registry.default,
            "context_length": context_length, "family": spec.family, "loaded": loaded}


# -- errors, mapped once --------------------------------------------------------------------

async def _error_response(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LocalchatError)
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
    content = errors.body(request.url.path, exc.status, exc.type, exc.message, exc.param, exc.code)
    return JSONResponse(content, status_code=exc.status, headers=headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kind = "not_found" if exc.status_code == 404 else "invalid_request_error"
    message = f"no route {request.method} {request.url.path}" if exc.status_code in (404, 405) else str(exc.detail)
    return JSONResponse(errors.body(request.url.path, exc.status_code, kind, message), status_code=exc.status_code)


async def _crash(request: Request, exc: Exception) -> Response:
    log.exception("request failed: %s %s", request.method, request.url.path)
    return JSONResponse(errors.body(request.url.path, 500, "server_error", f"internal error: {exc}"), status_code=500)


escape_request_text()  # request text never reaches a log line raw (logs.py)
