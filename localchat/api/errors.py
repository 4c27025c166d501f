"""Errors, mapped once: a localchat error (or Starlette's 404/405, or a crash) becomes the error
body of the protocol the request came in on. Each protocol package lists its `ERRORS`: its path
prefixes, its writer and its table of field names; create_app keeps them on `app.state`. Anything
else gets OpenAI's shape and names. A stream's error, written inside the protocol, uses the
protocol's own shape.

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
    """Requests whose path starts with `prefix` get their errors written by `write`, with the
    neutral request's fields named by `fields` (the others keep their neutral names)."""

    prefix: str
    write: Render = openai
    fields: Fields = OPENAI_FIELDS

    def param_of(self, exc: LocalchatError) -> tuple[str, str | None]:
        """The error's message and parameter as the protocol says them."""
        if exc.field is None:
            return exc.message, exc.param
        name = exc.field
        for pattern, theirs in self.fields:
            if re.fullmatch(pattern, exc.field):
                name = re.sub(f"^{pattern}$", theirs, exc.field)
                break
        return f"{name}: {exc.message}", name

    def render(self, exc: LocalchatError) -> dict[str, Any]:
        """The protocol's error body for a localchat error."""
        message, param = self.param_of(exc)
        return self.write(exc.status, exc.type, message, param, exc.code)

    def body(self, status: int, kind: str, message: str, param: str | None = None,
             code: str | None = None) -> dict[str, Any]:
        return self.write(status, kind, message, param, code)


OPENAI = ErrorShape("")  # every path no protocol names: OpenAI's shape and names


class ErrorShapes:
    """The protocols' error shapes by path prefix: create_app makes one from the protocols' `ERRORS`
    and keeps it as `app.state.error_shapes`; the error handlers and the guard ask it by path."""

    def __init__(self, shapes: Iterable[ErrorShape]) -> None:
        self._shapes = {s.prefix: s for s in shapes}  # a prefix given again replaces the earlier

    def of(self, path: str) -> ErrorShape:
        """The shape of the longest prefix of `path`; OpenAI's if none."""
        return max((s for s in self._shapes.values() if path.startswith(s.prefix)), key=lambda s: len(s.prefix),
                   default=OPENAI)
