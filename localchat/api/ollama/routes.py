"""Ollama's API on the same port, for the clients that speak it (VS Code Copilot's Ollama
provider, Open WebUI, the `ollama` libraries): the models (`/api/tags`, `/api/show`, `/api/ps`:
models.py; `/api/pull`, `/api/delete`: pull.py), chat and generate (chat.py, stream.py),
embeddings (`/api/embed`, `/api/embeddings`: generation/embed.py, which Ollama's `truncate` and
`dimensions` ask to cut inputs and vectors) and `/api/version` here. Errors are Ollama's
`{"error": "message"}` (`ERRORS`, registered by create_app)."""

from __future__ import annotations

import time
from functools import partial

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...generation import Chat, EmbedRequest
from ..body import parse, read_json
from .chat import KeepAlive, chat_route, generate_route, model_name
from .models import Catalog, ps, show, tags
from .pull import delete_route, pull_route
from .stream import ERROR_SHAPE, nanos

VERSION = "0.9.0"  # the Ollama API this follows: `think` (0.9), structured outputs (0.5), tools


ERRORS = [ERROR_SHAPE]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str = ""


class EmbedBody(_Body):
    input: str | list[str] = ""
    truncate: bool = True
    keep_alive: KeepAlive = None
    dimensions: int | None = Field(None, ge=1)


class EmbeddingsBody(_Body):
    prompt: str = ""
    keep_alive: KeepAlive = None


def routes(chat: Chat) -> list[Route]:
    catalog = Catalog()  # each model's GGUF facts, for tags, show and ps
    return [Route("/api/version", version, methods=["GET"]),
            Route("/api/tags", partial(tags, chat, catalog), methods=["GET"]),
            Route("/api/show", partial(show, chat, catalog), methods=["POST"]),
            Route("/api/ps", partial(ps, chat, catalog), methods=["GET"]),
            Route("/api/chat", partial(chat_route, chat), methods=["POST"]),
            Route("/api/generate", partial(generate_route, chat), methods=["POST"]),
            Route("/api/embed", partial(embed, chat), methods=["POST"]),
            Route("/api/embeddings", partial(embeddings, chat), methods=["POST"]),
            Route("/api/pull", partial(pull_route, chat), methods=["POST"]),
            Route("/api/delete", partial(delete_route, chat), methods=["DELETE"]),
            *(Route(f"/api/{p}", unsupported, methods=["POST", "DELETE"]) for p in ("push", "create", "copy"))]


async def version(request: Request) -> Response:
    return JSONResponse({"version": VERSION})


async def embed(chat: Chat, request: Request) -> Response:
    started = time.perf_counter()
    body = parse(EmbedBody, await read_json(request, chat.settings.max_body_bytes))
    texts = ([body.input] if body.input else []) if isinstance(body.input, str) else body.input
    done = await chat.embed(EmbedRequest(texts, model_name(chat.models, body.model), body.keep_alive,
                                         truncate=body.truncate, dimensions=body.dimensions, shorten=True))
    return JSONResponse({"model": body.model or done.model, "embeddings": done.vectors,
                         "total_duration": nanos(time.perf_counter() - started),
                         "load_duration": nanos(done.ready - started),
                         "prompt_eval_count": done.prompt_tokens})


async def embeddings(chat: Chat, request: Request) -> Response:
    body = parse(EmbeddingsBody, await read_json(request, chat.settings.max_body_bytes))
    texts = [body.prompt] if body.prompt else []
    done = await chat.embed(EmbedRequest(texts, model_name(chat.models, body.model), body.keep_alive, truncate=True))
    return JSONResponse({"embedding": done.vectors[0] if done.vectors else []})


async def unsupported(request: Request) -> Response:
    return JSONResponse({"error": f"localchat does not manage models through {request.url.path}: pull a GGUF with "
                                  "/api/pull (hf.co/OWNER/REPO:QUANT), or add one with `localchat models add PATH`"},
                        status_code=501)
