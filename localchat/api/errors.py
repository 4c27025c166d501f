"""Errors, mapped once: a localchat error (or Starlette's 404/405, or a crash) becomes the error
body of the protocol the request came in on. Each protocol package lists its `ERRORS`: its path
prefixes, its renderer and its table of field names; create_app registers them. Anything else gets
OpenAI's shape and names.

An error raised in generation names a `field` of the neutral request (`tools.2.parameters`,
`json_schema`, `messages`); the table turns it into the protocol's own parameter
(`tools.2.function.parameters`, `response_format.json_schema.schema`), which also starts the
message, as the errors raised by the protocol's own parsing do."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import LocalchatError

# (status, type, message, param, code) → the protocol's JSON error body
Render = Callable[[int, str, str, "str | None", "str | None"], dict[str, Any]]
Fields = Sequence[tuple[str, str]]  # (a regular expression matching a whole neutral field, the protocol's name)


def openai(status: int, kind: str, message: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


OPENAI_FIELDS: Fields = ((r"tools\.(\d+)\.parameters", r"tools.\1.function.parameters"),
                         (r"json_schema", "response_format.json_schema.schema"), (r"json_object", "response_format"),
                         (r"continue_final", "continue_final_message"),
                         (r"template_kwargs\.(.+)", r"chat_template_kwargs.\1"))


@dataclass(frozen=True)
class ErrorShape:
    """Requests whose path starts with `prefix` get their errors rendered by `render`, with the
    neutral request's fields named by `fields` (the others keep their neutral names)."""

    prefix: str
    render: Render = openai
    fields: Fields = OPENAI_FIELDS


_SHAPES: dict[str, ErrorShape] = {}  # by prefix


def register(shapes: Iterable[ErrorShape]) -> None:
    """The protocols' error shapes (create_app registers them; a prefix registered again is replaced)."""
    _SHAPES.update((s.prefix, s) for s in shapes)


def shape(path: str) -> ErrorShape:
    """The shape of the longest registered prefix of `path`; OpenAI's if none."""
    return max((s for s in _SHAPES.values() if path.startswith(s.prefix)), key=lambda s: len(s.prefix),
               default=ErrorShape(""))


def param_of(path: str, exc: LocalchatError) -> tuple[str, str | None]:
    """The error's message and parameter as the protocol of `path` says them."""
    if exc.field is None:
        return exc.message, exc.param
    name = exc.field
    for pattern, theirs in shape(path).fields:
        if re.fullmatch(pattern, exc.field):
            name = re.sub(f"^{pattern}$", theirs, exc.field)
            break
    return f"{name}: {exc.message}", name


def render(path: str, exc: LocalchatError) -> dict[str, Any]:
    """The protocol's error body for a localchat error."""
    message, param = param_of(path, exc)
    return shape(path).render(exc.status, exc.type, message, param, exc.code)


def body(path: str, status: int, kind: str, message: str, param: str | None = None,
         code: str | None = None) -> dict[str, Any]:
    return shape(path).render(status, kind, message, param, code)
