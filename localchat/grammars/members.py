"""Rules for the values of an object schema's properties one by one (for tool-call syntaxes
that write each argument on its own, as XML elements), `$ref`s resolved in the whole schema."""

from __future__ import annotations

from typing import Any

from .gbnf import MAX_BYTES
from .refs import pointer
from .schema import Converter, convert


class _Members(Converter):
    keys: tuple[str, ...] = ()

    def run(self, schema: Any) -> str:
        properties = schema.get("properties") if isinstance(schema, dict) else None
        self.members = {key: self.child(properties[key], pointer("#", "properties", key)) for key in self.keys}
        self.drain()
        return ""


def member_rules(schema: Any, keys: list[str], *, prefix: str, rules: dict[str, str], param: str,
                 max_bytes: int = MAX_BYTES) -> tuple[dict[str, str], list[str]]:
    """{property: the rule for its JSON value}, and what those rules do not enforce."""
    kind = type("_Members", (_Members,), {"keys": tuple(keys)})
    converter = convert(schema, prefix, rules, param, max_bytes=max_bytes, kind=kind)
    return converter.members, list(converter.loosened)  # type: ignore[attr-defined]
