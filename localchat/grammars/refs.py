"""Where a `$ref` points inside the schema it is part of, and where each part of that schema is.

Paths are JSON Pointers into the schema as the client sent it, written `#/properties/a`.
References are followed inside the schema only: a JSON Pointer (`#/$defs/node`), an anchor
(`#node`: `$anchor`, or draft 6/7's `"$id": "#node"`), or a sub-schema's or the root's own `$id`.
Nothing is fetched."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

Schema = dict[str, Any] | bool


class Unresolvable(Exception):
    pass


def pointer(path: str, *parts: str | int) -> str:
    """`path` and then `parts`, escaped as JSON Pointer tokens."""
    return path + "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


class Document:
    def __init__(self, root: Schema) -> None:
        self.root = root
        self._ids: dict[str, tuple[Any, str]] | None = None

    def resolve(self, ref: str) -> tuple[Schema, str]:
        """The schema `ref` points at, and its path."""
        if not isinstance(ref, str):
            raise Unresolvable(f"$ref must be a string, not {ref!r}")
        uri, _, fragment = ref.partition("#")
        node, path = self.root, "#"
        if uri:
            if uri not in self.ids():
                raise Unresolvable(f"$ref {ref!r} points outside the schema (only references within it are followed)")
            node, path = self.ids()[uri]
        fragment = unquote(fragment)
        if fragment and not fragment.startswith("/"):  # an anchor
            if fragment not in self.ids():
                raise Unresolvable(f"$ref {ref!r}: no $anchor {fragment!r} in the schema")
            return self.ids()[fragment]
        for token in [t for t in fragment.split("/")[1:]]:
            token = token.replace("~1", "/").replace("~0", "~")
            try:
                node = node[int(token)] if isinstance(node, list) else node[token]
            except (KeyError, IndexError, ValueError, TypeError):
                raise Unresolvable(f"$ref {ref!r} points nowhere in the schema") from None
            path = pointer(path, token)
        if not isinstance(node, (dict, bool)):
            raise Unresolvable(f"$ref {ref!r} points at {type(node).__name__}, not a schema")
        return node, path

    def ids(self) -> dict[str, tuple[Any, str]]:
        """Every `$id` and anchor in the schema (made once, without recursion)."""
        if self._ids is None:
            self._ids = {}
            stack: list[tuple[Any, str]] = [(self.root, "#")]
            while stack:
                node, path = stack.pop()
                if isinstance(node, dict):
                    for key in ("$id", "id", "$anchor", "$dynamicAnchor"):
                        name = node.get(key)
                        if isinstance(name, str) and name:
                            for spelling in _spellings(name):
                                self._ids.setdefault(spelling, (node, path))
                    stack += [(v, pointer(path, k)) for k, v in node.items() if isinstance(v, (dict, list))]
                elif isinstance(node, list):
                    stack += [(v, pointer(path, i)) for i, v in enumerate(node) if isinstance(v, (dict, list))]
        return self._ids


def _spellings(name: str) -> list[str]:
    """An id as a $ref may name it: whole, without its fragment, or the anchor alone."""
    out = [name, name.rstrip("#")]
    if name.startswith("#"):
        out.append(name[1:])
    return out
