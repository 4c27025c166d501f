"""What the rules for arrays (arrays.py) and objects (objects.py) call back on the converter:
schema.py's `Converter`, which imports them. Named here as a protocol so that neither imports it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..errors import GrammarError
from .regex import PatternError
from .refs import Document

Schema = dict[str, Any] | bool


class Converting(Protocol):
    doc: Document  # the whole schema, for `$ref`s
    closed: bool  # an object that lists its keys takes no others unless it says so (a strict answer)

    def add(self, path: str, body: str) -> str:
        """A rule for `body` (reusing an identical one), named after `path`."""
        ...

    def child(self, schema: Schema, path: str) -> str:
        """The rule for a value inside this one: a property, an item."""
        ...

    def loose(self, path: str, keyword: str) -> None:
        """Note a keyword at `path` that the grammar does not enforce."""
        ...

    def flatten(self, schema: Schema, path: str, refs: bool = True) -> Schema:
        """`schema` with its allOf (and, with `refs`, its `$ref`s with keywords beside them) merged in."""
        ...

    def invalid_pattern(self, where: str, exc: PatternError) -> GrammarError: ...

    def shared(self, key: Any, make: Callable[[], str]) -> str:
        """The rule `make` makes, made once per `key`."""
        ...

    def rules_at(self, path: str) -> tuple[Callable[[str], str], Callable[[], str], Callable[[str, str], None]]:
        """(add a body, name one first, fill it), rules named after `path`."""
        ...

    def reserve(self, path: str) -> str:
        """A rule's name, given before its body (a rule that refers to itself)."""
        ...

    def fill(self, name: str, body: str) -> None:
        """The body of a reserved rule (empty: Unsatisfiable)."""
        ...

    def valid(self, value: Any, schema: Schema) -> bool:
        """Whether `value` holds for `schema` (True when that cannot be told)."""
        ...
