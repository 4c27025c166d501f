"""llama-server's own routes, as its clients call them: fill-in-the-middle for editors
(`/infill`, `/props`, `/tokenize`, `/detokenize`: infill.py), LoRA adapters (`/lora-adapters`:
lora.py), reranking (`/v1/rerank`, `/rerank`: rerank.py), the chat template applied
(`/apply-template`: template.py) and the slots' prompt caches (`/slots`: slots.py). Errors in
OpenAI's shape (llama-server's `not_supported_error` is a 501 of that shape)."""

from __future__ import annotations

from starlette.routing import Route

from ...generation import Chat
from .. import errors
from . import infill, lora, rerank, slots, template

ERRORS: list[errors.ErrorShape] = []  # OpenAI's shape and names, the default


def routes(chat: Chat) -> list[Route]:
    return [*infill.routes(chat), *lora.routes(chat), *rerank.routes(chat), *slots.routes(chat),
            *template.routes(chat)]
