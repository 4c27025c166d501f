"""The `$ref` half of the converter: merging allOf and `$ref`s in, and the rules for `$ref`
targets, which are named when first met and converted later from the converter's queue."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from ..errors import GrammarError
from .combine import constraining, is_plain_ref, merge
from .refs import Document, Unresolvable

Schema = dict[str, Any] | bool
MAX_PAIRS = 256  # rules for one $ref target with different keywords beside it


class Unsatisfiable(Exception):
    pass


class RefRules:
    """Mixed into Converter, which provides `visit`, `loose`, `_name` and `rules`."""

    doc: Document
    rules: dict[str, str]
    dead: set[Any]
    _refs: dict[Any, str]
    _todo: deque[tuple[str, Schema, str, Any, frozenset[int]]]
    _chain: frozenset[int]
    _level: int
    _pairs: dict[int, int]
    _inlined: list[str]
    _inlined_from: int

    def flatten(self, schema: Schema, path: str, refs: bool = True) -> Schema:
        """`schema` with its allOf merged in, and (with `refs`) its `$ref`s that have keywords
        beside them. A `$ref` met again in that is dropped: A and A is A."""
        seen: set[str] = set()
        for _ in range(10_000):
            if not isinstance(schema, dict):
                return schema
            if schema.get("$recursiveRef") == "#":
                schema = {"$ref": "#", **{k: v for k, v in schema.items() if k != "$recursiveRef"}}
            ref = schema.get("$ref")
            if ref is not None and not refs and not is_plain_ref(schema):
                return schema  # converted as a pair, which a recursive schema may reach again
            if ref is None or not refs:
                if not isinstance(schema.get("allOf"), list):
                    return schema
                schema = self._parts(schema, path, seen)
                continue
            siblings = {k: v for k, v in schema.items() if k != "$ref"}
            if not isinstance(ref, str) or ref in seen:
                schema = siblings
                continue
            seen.add(ref)
            target, _ = self._resolve(ref, path)
            schema = in_order(schema, target, siblings)
        raise GrammarError(f"the schema at {path!r} combines too many allOf and $ref", param="schema")

    def _parts(self, schema: dict[str, Any], path: str, seen: set[str], depth: int = 0) -> Schema:
        """`schema` with its allOf's parts merged in, in their order: a part that is a `$ref`, or
        an allOf of its own, is merged where it stands (its properties come there)."""
        rest: Schema = {k: v for k, v in schema.items() if k != "allOf"}
        for part in schema["allOf"]:
            if is_plain_ref(part) and isinstance(part["$ref"], str):
                if part["$ref"] in seen:
                    continue  # A and A is A
                if part["$ref"] in self._inlined[self._inlined_from:]:
                    # merged in already by a visit of this same value under way (an anyOf branch of it
                    # holds the same allOf: its constraints are in the branch's), so A and A is A here
                    # too; merged again, a $ref back to the schema itself grew a branch each time
                    continue
                seen.add(part["$ref"])
                self._inlined.append(part["$ref"])
                part, _ = self._resolve(part["$ref"], path)
            if isinstance(part, dict) and isinstance(part.get("allOf"), list) and depth < 32:
                part = self._parts(part, path, seen, depth + 1)
            rest = merge(rest, part)
        return rest

    def ref_rule(self, ref: str, path: str) -> str:
        """The rule of a `$ref`'s target: named now, converted later (from run's queue)."""
        target, where = self._resolve(ref, path)
        if target is True:
            return "value"
        key = id(target)
        if target is False or never(target) or key in self.dead:
            raise Unsatisfiable
        if key not in self._refs:
            name = self._refs[key] = self._name(where)
            self.rules[name] = ""  # filled in by run()
            self._todo.append((name, target, where, key, self._after(key)))
        return self._refs[key]

    def _resolve(self, ref: Any, path: str) -> tuple[Any, str]:
        """A `$ref`'s target. One that points nowhere in the schema (or outside it: nothing is
        fetched) is an error, as in llama.cpp's converter: a broken schema is refused, not loosened."""
        try:
            return self.doc.resolve(ref)
        except Unresolvable as exc:
            raise GrammarError(f"at {path!r}: {exc}", param="schema") from None

    def _merged_ref_rule(self, schema: dict[str, Any], path: str) -> str:
        """A `$ref` with keywords beside it: one rule for the pair (named before it is made, so
        a recursive schema that repeats the pair inside itself reaches that name)."""
        ref = schema["$ref"]
        siblings = {k: v for k, v in constraining(schema).items() if k != "$ref"}
        key = (ref, json.dumps(siblings, sort_keys=True, default=str))
        if key in self.dead:
            raise Unsatisfiable
        if key not in self._refs:
            target, _ = self._resolve(ref, path)
            if self._level == 0 and id(target) in self._chain:
                raise GrammarError(f"the schema refers to itself ({ref} at {path!r}) without any value in between",
                                   param="schema")
            self._pairs[id(target)] = self._pairs.get(id(target), 0) + 1
            if self._pairs[id(target)] > MAX_PAIRS:
                raise GrammarError(f"the schema at {path!r} combines {ref!r} with other keywords in more than "
                                   f"{MAX_PAIRS} ways", param="schema")
            both = in_order(schema, target, siblings)
            if both is False or never(both):
                raise Unsatisfiable
            name = self._refs[key] = self._name(path)
            self.rules[name] = ""  # filled in by run()
            self._todo.append((name, both, path, key, self._after(id(target))))
        return self._refs[key]

    def _after(self, target: int) -> frozenset[int]:
        """The chain of a $ref target met here: the current one's and it, unless a value is between."""
        return self._chain | {target} if self._level == 0 else frozenset({target})



def in_order(schema: dict[str, Any], target: Schema, siblings: dict[str, Any]) -> Schema:
    """A `$ref`'s target and the keywords beside it, merged so that the properties come in the
    order the schema writes them: the target's first when `$ref` stands before `properties`."""
    keys = list(schema)
    if "properties" in siblings and keys.index("properties") < keys.index("$ref"):
        return merge(siblings, target)
    return merge(target, siblings)


def never(schema: Any) -> bool:
    """A schema nothing satisfies, at a glance."""
    return schema is False or isinstance(schema, dict) and (
        schema.get("not") in (True, {}) or schema.get("enum") == [])
