"""OpenAI's API: chat completions and models (chat.py, schemas.py), legacy completions and
fill-in-the-middle (completions.py), embeddings (embeddings.py). Errors in OpenAI's shape."""

from __future__ import annotations

from starlette.routing import Route

from ...generation import Chat
from dataclasses import replace

from . import chat as _chat, completions as _completions, embeddings as _embeddings

ERRORS = [_completions.ERROR_SHAPE, replace(_completions.ERROR_SHAPE, prefix="/completions")]


def routes(chat: Chat) -> list[Route]:
    return [*_chat.routes(chat), *_completions.routes(chat), *_embeddings.routes(chat)]
