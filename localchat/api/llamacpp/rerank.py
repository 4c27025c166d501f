"""Reranking, `POST /v1/rerank` and `/rerank`, in the shape llama-server, vLLM, Jina and Cohere
share: `query`, `documents`, `top_n`, `return_documents`; results `[{index, relevance_score,
document?}]`, best first. For rerankers (rank pooling) and models with `rerank = true`: which
models rerank, and how, is generation/rerank.py's."""

from __future__ import annotations

import secrets
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...generation import Chat, RerankRequest
from ..body import parse, read_json


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Document(_Lenient):
    text: str


class RerankBody(_Lenient):
    model: str | None = None
    query: str
    documents: list[str | Document] = Field(min_length=1)
    top_n: int | None = Field(None, ge=1)
    return_documents: bool = False


def routes(chat: Chat) -> list[Route]:
    async def rerank_route(request: Request) -> Response:
        body = parse(RerankBody, await read_json(request, chat.settings.max_body_bytes))
        texts = [d if isinstance(d, str) else d.text for d in body.documents]
        ranking = await chat.rerank(RerankRequest(body.query, texts, body.model, body.top_n))
        results: list[dict[str, Any]] = []
        for r in ranking.results:
            result: dict[str, Any] = {"index": r.index, "relevance_score": r.score}
            if body.return_documents:
                result["document"] = {"text": texts[r.index]}
            results.append(result)
        return JSONResponse({"id": f"rerank-{secrets.token_hex(12)}", "object": "list", "model": ranking.model,
                             "results": results, "usage": {"prompt_tokens": ranking.prompt_tokens,
                                                           "total_tokens": ranking.prompt_tokens}})

    return [Route("/v1/rerank", rerank_route, methods=["POST"]), Route("/rerank", rerank_route, methods=["POST"])]
