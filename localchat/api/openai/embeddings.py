"""OpenAI embeddings, `POST /v1/embeddings`: the request parsed, embedded by the generation service
(generation/embed.py: which models embed, tokens, limits; vectors L2-normalized) and answered in
OpenAI's shape, as floats or base64. `dimensions` other than the model's is refused."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...generation import Chat, EmbedRequest
from ..body import parse, read_json
from ..common import Lenient


class EmbeddingRequest(Lenient):
    model: str | None = None
    input: str | list[str] | list[int] | list[list[int]] = Field(min_length=1)
    encoding_format: str = Field("float", pattern="^(float|base64)$")
    dimensions: int | None = Field(None, ge=1)

    def inputs(self) -> list[Any]:
        """Texts, or lists of token ids: one string or one list of ids is one input."""
        data = self.input
        if isinstance(data, str) or all(isinstance(x, int) for x in data):
            return [data]
        return list(data)


def routes(chat: Chat) -> list[Route]:
    async def embeddings(request: Request) -> Response:
        req = parse(EmbeddingRequest, await read_json(request, chat.settings.max_body_bytes))
        done = await chat.embed(EmbedRequest(req.inputs(), req.model, dimensions=req.dimensions))
        used = done.prompt_tokens
        return JSONResponse({"object": "list", "model": done.model, "data": [
            {"object": "embedding", "index": i, "embedding": _encode(v, req.encoding_format)}
            for i, v in enumerate(done.vectors)], "usage": {"prompt_tokens": used, "total_tokens": used}})

    return [Route("/v1/embeddings", embeddings, methods=["POST"]), Route("/embeddings", embeddings, methods=["POST"])]


def _encode(vector: list[float], fmt: str) -> Any:
    if fmt == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()
    return vector
