"""Errors, mapped once: a localchat error (or Starlette's 404/405, or a crash) becomes the error
body of the protocol the request came in on. Each protocol module registers its path prefixes
and its renderer; anything else gets OpenAI's shape."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# (status, type, message, param, code) → the protocol's JSON error body
Render = Callable[[int, str, str, "str | None", "str | None"], dict[str, Any]]


def openai(status: int, kind: str, message: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


_RENDERERS: list[tuple[str, Render]] = []


def register(prefix: str, render: Render) -> None:
    """Requests whose path starts with `prefix` get their errors rendered by `render`."""
    _RENDERERS.append((prefix, render))


def renderer(path: str) -> Render:
    return next((r for prefix, r in _RENDERERS if path.startswith(prefix)), openai)


def body(path: str, status: int, kind: str, message: str, param: str | None = None,
         code: str | None = None) -> dict[str, Any]:
    return renderer(path)(status, kind, message, param, code)
