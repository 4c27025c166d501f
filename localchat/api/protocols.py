"""The protocols, one package each: `routes(chat)` (Starlette routes onto the one generation
step), and its error shape and field names registered with `errors.register` at import."""

from __future__ import annotations

from types import ModuleType

from . import anthropic, llamacpp, ollama, openai, responses

PROTOCOLS: list[ModuleType] = [openai, llamacpp, anthropic, responses, ollama]
