"""What no grammar holds, checked as the JSON is written.

A grammar made from a schema lets through every valid value, and for a few keywords more
(`uniqueItems`, `not`, `if`, `multipleOf` on decimals, a leap day: the converter lists them).
`ValueChecker` reads the JSON text as it comes, and each time a value is complete (a string,
a number, an array once its `]` is read) it validates that value against every sub-schema that
holds for it whatever the rest of the document turns out to be: the ones reached from the
root through `properties`, `patternProperties`, `additionalProperties`, `items`, `prefixItems`,
`$ref` and `allOf`. A keyword that depends on the rest of an unfinished value (`if` or `anyOf`
of the object around it) waits until that value is complete; the root, once complete, is
validated whole. So the first value found to break the schema is as small as can be told, and
the caller can cut the answer back to where it began (`Violation.start`) and write it again.

Validation is `jsonschema`'s, with the formats held as the grammar holds them (formats.py), and
never fetches anything: a `$ref` to
another document it does not have is no error here (the converter refuses those first)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import jsonschema
import referencing
import referencing.jsonschema
from jsonschema.validators import validator_for
from jsonschema_specifications import REGISTRY as _METASCHEMAS

from .formats import format_checker

Path = tuple[str | int, ...]
_NUMBER = frozenset("0123456789+-.eE")
_WS = frozenset(" \t\n\r")


@dataclass(frozen=True)
class Violation:
    start: int  # where the value that breaks the schema begins, in the text fed so far
    end: int  # just past its end
    path: Path  # where it is in the document
    message: str
    members: tuple[tuple[int, int], ...] = ()  # an array's items or an object's values: where each starts and ends


class _Frame:
    __slots__ = ("kind", "value", "start", "key", "expect")

    def __init__(self, kind: str, start: int) -> None:
        self.kind = kind  # "object" or "array"
        self.value: Any = {} if kind == "object" else []
        self.start = start
        self.key: str | None = None
        self.expect = "key" if kind == "object" else "value"  # object: key, colon, value, next


class ValueChecker:
    """Feed the text of one JSON value; `feed` returns the first Violation met (the checker
    then stops: `rewind` to where the caller cut the text). Syntax is the grammar's business:
    text that is not JSON stops the checking quietly."""

    def __init__(self, schema: Any) -> None:
        cls = validator_for(schema) if isinstance(schema, dict) else jsonschema.Draft202012Validator
        registry = referencing.Registry().combine(_METASCHEMAS)  # no retrieval: nothing is fetched
        self.validator = cls(schema, registry=registry, format_checker=format_checker(cls.FORMAT_CHECKER))
        self.schema = schema
        self._spec = referencing.jsonschema.specification_with(cls.META_SCHEMA.get("$schema", ""),
                                                              default=referencing.jsonschema.DRAFT202012)
        self._applicable = cls._APPLICABLE_VALIDATORS
        self._legacy_items = "prefixItems" not in cls.VALIDATORS  # draft 4-2019: items may be a list
        self._walks: dict[Path, list[tuple[Any, Any]]] = {}
        self.text = ""
        self.broken = False  # not JSON: nothing more is checked
        self.checks = 0
        self._reset()

    def _reset(self) -> None:
        self.stack: list[_Frame] = []
        self.scalar: list[Any] | None = None  # [kind, start, is_key, escaped]
        self.done = False
        self.end = 0  # once done: just past the value's last character
        self.spans: dict[Path, tuple[int, int]] = {}  # the completed values: where each starts and ends
        self.violation: Violation | None = None

    # -- feeding -----------------------------------------------------------------------------

    def feed(self, text: str) -> Violation | None:
        if self.violation is not None or self.broken:
            return self.violation
        base = len(self.text)
        self.text += text
        for i, ch in enumerate(text):
            self._char(ch, base + i, check=True)
            if self.violation is not None or self.broken:
                break
        return self.violation

    def finish(self) -> Violation | None:
        """The text is over: a number at the very end is complete now."""
        if self.violation is None and not self.broken and self.scalar is not None and self.scalar[0] == "num":
            self._end_scalar(len(self.text), check=True)
        return self.violation

    def rewind(self, offset: int) -> None:
        """Forget the text from `offset` on (the values before it were checked already)."""
        text = self.text[:offset]
        self.text, self.broken = "", False
        self._reset()
        self.text = text
        for i, ch in enumerate(text):
            self._char(ch, i, check=False)
            if self.broken:
                break

    @property
    def complete(self) -> bool:
        return self.done

    def _char(self, ch: str, at: int, check: bool) -> None:
        s = self.scalar
        if s is not None:
            if s[0] == "str":
                if s[3]:
                    s[3] = False
                elif ch == "\\":
                    s[3] = True
                elif ch == '"':
                    self._end_scalar(at + 1, check)
                return
            if ch in _NUMBER or ch.isalpha():
                return
            self._end_scalar(at, check)
            if self.violation is not None or self.broken:
                return
        if ch in _WS:
            return
        if self.done:
            self.broken = True
            return
        top = self.stack[-1] if self.stack else None
        if top is not None and top.kind == "object" and top.expect != "value":
            if top.expect == "key" and ch == '"':
                self.scalar = ["str", at, True, False]
            elif top.expect == "key" and ch == "}" and not top.value:
                self._end_container(at + 1, check)
            elif top.expect == "colon" and ch == ":":
                top.expect = "value"
            elif top.expect == "next" and ch == ",":
                top.expect = "key"
            elif top.expect == "next" and ch == "}":
                self._end_container(at + 1, check)
            else:
                self.broken = True
            return
        if top is not None and top.kind == "array" and top.expect == "next":
            if ch == ",":
                top.expect = "value"
            elif ch == "]":
                self._end_container(at + 1, check)
            else:
                self.broken = True
            return
        # a value starts here
        if ch == "]" and top is not None and top.kind == "array" and not top.value:
            self._end_container(at + 1, check)
        elif ch in "{[":
            self.stack.append(_Frame("object" if ch == "{" else "array", at))
        elif ch == '"':
            self.scalar = ["str", at, False, False]
        elif ch in _NUMBER or ch.isalpha():
            self.scalar = ["num", at, False, False]
        else:
            self.broken = True

    def _end_scalar(self, end: int, check: bool) -> None:
        _, start, is_key, _ = self.scalar  # type: ignore[misc]
        self.scalar = None
        try:
            value = json.loads(self.text[start:end])
        except ValueError:
            self.broken = True
            return
        if is_key:
            top = self.stack[-1]
            top.key, top.expect = value, "colon"
            return
        self._complete(value, start, end, check)

    def _end_container(self, end: int, check: bool) -> None:
        frame = self.stack.pop()
        self._complete(frame.value, frame.start, end, check)

    def _complete(self, value: Any, start: int, end: int, check: bool) -> None:
        path = self._path()
        if self.stack:
            top = self.stack[-1]
            if top.kind == "object":
                top.value[top.key] = value
            else:
                top.value.append(value)
            top.expect = "next"
        else:
            self.done, self.end = True, end
        self.spans[path] = (start, end)
        if check:
            found = self._check(path, value)
            if found is None and self.stack and self.stack[-1].kind == "array":
                found = self._unique_so_far(path[:-1], self.stack[-1].value)
            if found is not None:
                message, inner = found
                at = next((path + inner[:k] for k in range(len(inner), 0, -1) if path + inner[:k] in self.spans), path)
                members = sorted(span for p, span in self.spans.items() if len(p) == len(at) + 1 and p[:len(at)] == at)
                self.violation = Violation(*self.spans[at], at, message, tuple(members))

    def _path(self) -> Path:
        path: list[str | int] = []
        for frame in self.stack:
            path.append(frame.key if frame.kind == "object" else len(frame.value))  # type: ignore[arg-type]
        return tuple(path)

    # -- checking ----------------------------------------------------------------------------

    def _check(self, path: Path, value: Any) -> tuple[str, Path] | None:
        """The first error of `value` (at `path`) against the sub-schemas that hold for it, and
        where in the value it is (an `if` whose `then` a member breaks: that member)."""
        self.checks += 1
        try:
            if not path:
                error = next(self.validator.iter_errors(value), None)
                return None if error is None else (error.message, tuple(error.absolute_path))
            for schema, resolver, _ in self._schemas_at(path):
                error = next(self.validator.descend(value, schema, resolver=resolver), None)
                if error is not None:
                    return error.message, tuple(error.absolute_path)
        except (referencing.exceptions.Unresolvable, jsonschema.exceptions.SchemaError, RecursionError,
                re.error, ValueError, TypeError):
            return None  # what cannot be checked here is not an error
        return None

    def _unique_so_far(self, path: Path, items: list) -> tuple[str, Path] | None:
        """`uniqueItems` told at the item that repeats one before it (not only once the array ends)."""
        try:
            if any(isinstance(schema, dict) and schema.get("uniqueItems") is True
                   for schema, _, _ in self._schemas_at(path)):
                error = next(self.validator.descend(items, {"uniqueItems": True}), None)
                return None if error is None else (error.message, ())
        except (referencing.exceptions.Unresolvable, RecursionError, TypeError, ValueError):
            return None
        return None

    def open_values(self) -> list[tuple[int, Path]]:
        """The values begun and not complete, outermost first: (where each starts, its path)."""
        out, path = [], []
        for frame in self.stack:
            out.append((frame.start, tuple(path)))
            path.append(frame.key if frame.kind == "object" else len(frame.value))  # type: ignore[arg-type]
        if self.scalar is not None and not self.scalar[2]:
            out.append((self.scalar[1], tuple(path)))
        return out

    def pointers_at(self, path: Path) -> list[str] | None:
        """JSON pointers (into the schema) of the sub-schemas that hold for the value at `path`
        whatever the rest is; None where one cannot be named (a `$ref` to another document)."""
        found = self._schemas_at(path)
        return None if any(p is None for _, _, p in found) else [p for _, _, p in found]  # type: ignore[misc]

    def _schemas_at(self, path: Path) -> list[tuple[Any, Any, str | None]]:
        if path in self._walks:
            return self._walks[path]
        if not path:
            root = self.validator._resolver.in_subresource(self._spec.create_resource(self.schema))
            found = self._expand([(self.schema, root, "#")])
        else:
            found = []
            for schema, resolver, where in self._schemas_at(path[:-1]):
                for child, step in self._children(schema, path[-1]):
                    if child is True:
                        continue
                    child_resolver = resolver.in_subresource(self._spec.create_resource(child)) \
                        if isinstance(child, dict) else resolver
                    found.append((child, child_resolver, None if where is None else where + step))
            found = self._expand(found)
        if len(self._walks) > 4096:
            self._walks.clear()
        self._walks[path] = found
        return found

    def _expand(self, schemas: list[tuple[Any, Any, str | None]]) -> list[tuple[Any, Any, str | None]]:
        """The schemas, with what `$ref` and `allOf` bring (unconditionally)."""
        out: list[tuple[Any, Any, str | None]] = []
        todo = list(schemas)
        seen: set[int] = set()
        while todo and len(out) < 256:
            schema, resolver, where = todo.pop(0)
            if id(schema) in seen or schema is True:
                continue
            seen.add(id(schema))
            out.append((schema, resolver, where))
            if not isinstance(schema, dict):
                continue
            applicable = dict(self._applicable(schema))
            ref = applicable.get("$ref")
            if isinstance(ref, str):
                try:
                    resolved = resolver.lookup(ref)
                except referencing.exceptions.Unresolvable:
                    continue
                target = resolved.contents
                todo.append((target, resolved.resolver.in_subresource(self._spec.create_resource(target))
                             if isinstance(target, dict) else resolved.resolver,
                             ref if ref.startswith("#") and "%" not in ref else None))
            parts = applicable.get("allOf")
            for i, sub in enumerate(parts if isinstance(parts, list) else []):
                todo.append((sub, resolver.in_subresource(self._spec.create_resource(sub))
                             if isinstance(sub, dict) else resolver, None if where is None else f"{where}/allOf/{i}"))
        return out

    def _children(self, schema: Any, step: str | int) -> list[tuple[Any, str]]:
        """The sub-schemas of `schema` for its member `step`, each with its pointer's tail."""
        if not isinstance(schema, dict):
            return [] if schema is not False else [(False, "")]
        applicable = dict(self._applicable(schema))
        if isinstance(step, str):
            out = []
            props = applicable.get("properties")
            named = isinstance(props, dict) and step in props
            if named:
                out.append((props[step], "/properties/" + _escape(step)))
            matched = False
            patterns = applicable.get("patternProperties")
            for pattern, sub in (patterns.items() if isinstance(patterns, dict) else ()):
                try:
                    if re.search(pattern, step):
                        out.append((sub, "/patternProperties/" + _escape(pattern)))
                        matched = True
                except re.error:
                    continue
            if not named and not matched and "additionalProperties" in applicable:
                out.append((applicable["additionalProperties"], "/additionalProperties"))
            return out
        items = applicable.get("items")
        prefix = applicable.get("prefixItems")
        word = "/prefixItems/"
        if self._legacy_items and isinstance(items, list):
            prefix, rest, word, more = items, applicable.get("additionalItems"), "/items/", "/additionalItems"
        else:
            rest, more = items, "/items"
        if isinstance(prefix, list) and step < len(prefix):
            return [(prefix[step], f"{word}{step}")]
        return [] if rest is None else [(rest, more)]


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")
