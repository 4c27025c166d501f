"""OpenAI embeddings, `POST /v1/embeddings`: for models whose GGUF declares a pooling type, or
any model with `embedding = true` in models.toml (mean pooling). Vectors are L2-normalized;
a batch of inputs is embedded in as few llama batches as fit."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np
from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...errors import InvalidRequest
from ...generation import Chat
from ..body import parse, read_json
from ..common import Lenient


class EmbeddingRequest(Lenient):
    model: str | None = None
    input: str | list[str] | list[int] | list[list[int]] = Field(min_length=1)
    encoding_format: str = Field("float", pattern="^(float|base64)$")
    dimensions: int | None = Field(None, ge=1)


def routes(chat: Chat) -> list[Route]:
    async def embeddings(request: Request) -> Response:
        req = parse(EmbeddingRequest, await read_json(request, chat.host.settings.max_body_bytes))
        lease = await chat.host.lease(req.model)
        try:
            loaded = lease.model
            if not loaded.can_embed:
                raise InvalidRequest(
                    f"the model {loaded.spec.name} is not an embedding model: its GGUF declares no pooling type. "
                    f"Set `embedding = true` under [models.{loaded.spec.name}] in models.toml to embed with it "
                    "(mean pooling), or use an embedding model", param="model")
            inputs = await asyncio.to_thread(_tokens, req, loaded.engine)
            vectors = await loaded.engine.embed(inputs)
        finally:
            lease.release()
        if req.dimensions is not None and req.dimensions != len(vectors[0]):
            raise InvalidRequest(f"dimensions: this model's embeddings have {len(vectors[0])} dimensions and "
                                 "cannot be shortened", param="dimensions")
        used = sum(map(len, inputs))
        return JSONResponse({"object": "list", "model": loaded.spec.name, "data": [
            {"object": "embedding", "index": i, "embedding": _encode(v, req.encoding_format)}
            for i, v in enumerate(vectors)], "usage": {"prompt_tokens": used, "total_tokens": used}})

    return [Route("/v1/embeddings", embeddings, methods=["POST"]), Route("/embeddings", embeddings, methods=["POST"])]


def _tokens(req: EmbeddingRequest, engine: Any) -> list[list[int]]:
    """Strings are tokenized as plain text; token ids are taken as they are (checked)."""
    data = req.input
    if isinstance(data, str):
        items: list[Any] = [data]
    elif data and all(isinstance(x, int) for x in data):
        items = [data]
    else:
        items = list(data)
    out = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            out.append(engine.tokenizer.tokenize([(item, True)]))
            continue
        bad = next((t for t in item if not 0 <= t < engine.tokenizer.n_vocab), None)
        if bad is not None:
            raise InvalidRequest(f"input[{i}]: token {bad} is outside the vocabulary (0..{engine.tokenizer.n_vocab - 1})",
                                 param=f"input.{i}")
        out.append(list(item))
    return out


def _encode(vector: list[float], fmt: str) -> Any:
    if fmt == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()
    return vector
