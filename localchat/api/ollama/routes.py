"""Ollama's API on the same port, for the clients that speak it (VS Code Copilot's Ollama
provider, Open WebUI, the `ollama` libraries): the models (`/api/tags`, `/api/show`, `/api/ps`:
models.py; `/api/pull`, `/api/delete`: pull.py), chat and generate (chat.py, stream.py),
embeddings (`/api/embed`, `/api/embeddings`) and `/api/version` here. Errors are Ollama's
`{"error": "message"}` (`ERRORS`, registered by create_app)."""

from __future__ import annotations

import asyncio
import math
import time
from functools import partial
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...engine.params import EMBED_BATCH
from ...errors import InvalidRequest
from ...generation import Chat
from .. import errors
from ..body import parse, read_json
from .chat import KeepAlive, chat_route, generate_route, model_name
from .models import Catalog, ps, show, tags
from .pull import delete_route, pull_route
from .stream import Clock, nanos

VERSION = "0.9.0"  # the Ollama API this follows: `think` (0.9), structured outputs (0.5), tools
EMBED_MAX_TOKENS = EMBED_BATCH  # the longest input one embedding takes


def render(status: int, kind: str, message: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": message}


ERRORS = [errors.ErrorShape("/api/", render, fields=[(r"tools\.(\d+)\.parameters", r"tools.\1.function.parameters"),
                                                (r"json_schema", "format"), (r"json_object", "format"),
                                                (r"stop", "options.stop")])]


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
    clock = Clock()
    body = parse(EmbedBody, await read_json(request, chat.host.settings.max_body_bytes))
    texts = ([body.input] if body.input else []) if isinstance(body.input, str) else body.input
    name, vectors, count = await _embed(chat, body.model, texts, body.truncate, body.keep_alive, clock)
    if body.dimensions is not None and vectors:
        vectors = [_shorten(v, body.dimensions) for v in vectors]
    return JSONResponse({"model": body.model or name, "embeddings": vectors,
                         "total_duration": nanos(time.perf_counter() - clock.start),
                         "load_duration": nanos((clock.ready or clock.start) - clock.start),
                         "prompt_eval_count": count})


async def embeddings(chat: Chat, request: Request) -> Response:
    body = parse(EmbeddingsBody, await read_json(request, chat.host.settings.max_body_bytes))
    texts = [body.prompt] if body.prompt else []
    _, vectors, _ = await _embed(chat, body.model, texts, True, body.keep_alive, Clock())
    return JSONResponse({"embedding": vectors[0] if vectors else []})


async def unsupported(request: Request) -> Response:
    return JSONResponse({"error": f"localchat does not manage models through {request.url.path}: pull a GGUF with "
                                  "/api/pull (hf.co/OWNER/REPO:QUANT), or add one with `localchat models add PATH`"},
                        status_code=501)


async def _embed(chat: Chat, model: str, texts: list[str], truncate: bool, keep_alive: float | None,
                 clock: Clock) -> tuple[str, list[list[float]], int]:
    """(the model's name, one L2-normalized vector per text, the tokens embedded)."""
    lease = await chat.host.lease(model_name(chat.host.registry, model), keep_alive)
    try:
        loaded = lease.model
        if not loaded.can_embed:
            raise InvalidRequest(f"the model {loaded.spec.name} does not embed: its GGUF declares no pooling type; "
                                 f"set `embedding = true` under [models.{loaded.spec.name}] in models.toml to embed "
                                 "with it (mean pooling), or use an embedding model", param="model")
        clock.ready = time.perf_counter()

        def tokenize() -> list[list[int]]:
            tokens = [loaded.engine.tokenizer.tokenize([(text, True)]) for text in texts]
            return [t[:EMBED_MAX_TOKENS] for t in tokens] if truncate else tokens

        tokens = await asyncio.to_thread(tokenize)
        vectors = await loaded.engine.embed(tokens) if tokens else []
    finally:
        lease.release()
    return loaded.spec.name, vectors, sum(map(len, tokens))


def _shorten(vector: list[float], dimensions: int) -> list[float]:
    if dimensions > len(vector):
        raise InvalidRequest(f"dimensions: this model's embeddings have {len(vector)} dimensions", param="dimensions")
    cut = vector[:dimensions]
    norm = math.sqrt(sum(x * x for x in cut)) or 1.0
    return [x / norm for x in cut]
