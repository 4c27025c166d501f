"""Where a `$ref` points inside the schema it is part of, and where each part of that schema is.

Paths are JSON Pointers into the schema as the client sent it, written `#/properties/a`.
References are followed inside the schema only: a JSON Pointer (`#/$defs/node`), an anchor
(`#node`: `$anchor`, or draft 6/7's `"$id": "#node"`), or a sub-schema's or the root's own `$id`
— and the metaschemas of drafts 3 to 7 by their URLs (jsonschema's own copies, put inside the
schema by `with_metaschemas`). Nothing is fetched."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from jsonschema_specifications import REGISTRY

Schema = dict[str, Any] | bool


METASCHEMAS = tuple(f"http://json-schema.org/draft-0{n}/schema" for n in (3, 4, 6, 7))  # one file each
BUNDLED = "x-localchat-metaschemas"  # where with_metaschemas puts them


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


def with_metaschemas(schema: Schema) -> Schema:
    """The schema, with the metaschemas its `$ref`s name by URL (Swagger 2.0's
    `http://json-schema.org/draft-04/schema#/properties/minimum`) put under BUNDLED, their own
    `$ref`s made absolute: their `id` makes them resolve as any `$id` inside the schema does."""
    if not isinstance(schema, dict):
        return schema
    named: set[str] = set()
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("http://json-schema.org/"):
                named.update(m for m in METASCHEMAS if ref.partition("#")[0].rstrip("/") == m)
            stack += [v for v in node.values() if isinstance(v, (dict, list))]
        elif isinstance(node, list):
            stack += [v for v in node if isinstance(v, (dict, list))]
    if not named:
        return schema
    return {**schema, BUNDLED: {m: _absolute(REGISTRY.contents(m), m) for m in sorted(named)}}


def _absolute(node: Any, base: str) -> Any:
    """A metaschema's copy with its `$ref`s to itself (`#/definitions/…`) written with its URL."""
    if isinstance(node, dict):
        return {k: base + v if k == "$ref" and isinstance(v, str) and v.startswith("#") else _absolute(v, base)
                for k, v in node.items()}
    if isinstance(node, list):
        return [_absolute(v, base) for v in node]
    return node
