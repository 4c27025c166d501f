"""What the rules for arrays (arrays.py) and objects (objects.py) call back on the converter:
schema.py's `Converter`, which imports them. Named here as a protocol so that neither imports it."""

from __future__ import annotations

from typing import Any, Protocol

from ..errors import GrammarError
from .regex import PatternError

Schema = dict[str, Any] | bool


class Converting(Protocol):
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
