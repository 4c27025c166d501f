"""llama-server's own routes, as its clients call them: fill-in-the-middle for editors
(`/infill`, `/props`, `/tokenize`, `/detokenize`: infill.py), LoRA adapters (`/lora-adapters`:
lora.py) and reranking (`/v1/rerank`, `/rerank`: rerank.py). Errors in OpenAI's shape."""

from __future__ import annotations

from starlette.routing import Route

from ...generation import Chat
from . import infill, lora, rerank


def routes(chat: Chat) -> list[Route]:
    return [*infill.routes(chat), *lora.routes(chat), *rerank.routes(chat)]
