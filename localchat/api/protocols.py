"""The protocols, one package each: `routes(chat)` (Starlette routes onto the one generation
step) and `ERRORS` (its error shapes and field names, errors.py), both taken by create_app."""

from __future__ import annotations

from types import ModuleType

from . import anthropic, llamacpp, ollama, openai, responses

PROTOCOLS: list[ModuleType] = [openai, llamacpp, anthropic, responses, ollama]
