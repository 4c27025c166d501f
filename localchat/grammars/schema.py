"""JSON Schema → GBNF.

A grammar made here only lets through JSON that is valid for the schema, except for the
keywords listed in `loosened` (`#/properties/tags:uniqueItems`): those it cannot enforce, and
for them it allows more. Where exact is impossible but stricter is not (`\\s` as a space, a
bound rounded inwards, a date in a year that exists), it is stricter and says nothing.
Words that only describe (description, title, examples, default) are ignored.

Depth: the converter recurses once per level of the schema as written, at most
`max_schema_depth` (96 at most: about 6 Python frames a level, under Python's limit of 1000),
and never through a `$ref`: every `$ref` target is one rule, named when first met and made
from a queue, so a chain of 200 references or a recursive tree is a loop of rules, not of
Python calls. Each value rule ends in bounded `ws`."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from jsonschema.validators import validator_for

from ..errors import GrammarError
from .arrays import array_rule
from .combine import CONSTRAINING, UNMERGED, constraining, is_plain_ref, merge
from . import library
from .compact import assemble
from .gbnf import MAX_BYTES
from .values import value_literal
from .metaschema import DEPTH_CAP
from .objects import object_rule
from .refrules import RefRules, Unsatisfiable
from .refs import Document, pointer, with_metaschemas
from .regex import PatternError
from .scalars import number_body, string_body
from .kinds import ALL_TYPES, disjoint, family_of, implied, kinds

MAX_TRIES = 32  # conversions of one schema, each knowing more $ref targets that nothing satisfies
MAX_RULES = 20_000  # as many as the validator takes
TIME_BUDGET = 10.0  # seconds: a last guard; the grammar's size stops a large schema long before
Schema = dict[str, Any] | bool


class _Dead(Exception):
    """A `$ref` target (named before it was made) that no value satisfies."""

    def __init__(self, key: Any) -> None:
        super().__init__(key)
        self.key = key


class Converter(RefRules):
    def __init__(self, root: Schema, prefix: str = "", rules: dict[str, str] | None = None, *,
                 max_depth: int = DEPTH_CAP, max_bytes: int = MAX_BYTES, closed: bool = False) -> None:
        self.doc = Document(root)
        self.closed = closed
        self.prefix = prefix
        self.rules: dict[str, str] = {} if rules is None else rules  # may be shared by several converters
        self._by_body: dict[str, str] = {b: n for n, b in self.rules.items()}
        self._refs: dict[Any, str] = {}  # a $ref target (by identity) → its rule
        self._memo: dict[bytes, str] = {}  # a sub-schema (by a hash of its JSON) → its rule
        self._active: dict[Any, str | None] = {}  # sub-schemas being converted → a name, once one refers back
        self._todo: deque[tuple[str, Schema, str, Any, frozenset[int]]] = deque()  # $ref targets to convert
        self.dead: set[Any] = set()  # $ref targets found unsatisfiable (by an earlier try)
        self._chain: frozenset[int] = frozenset()  # the $ref targets that lead to this one with no value between
        self._level = 0  # values inside values (properties, items) on the way to the current one
        # the $refs an allOf merged in, in the visits under way of the current value (refrules._parts):
        # from `_inlined_from` on, those of this value (a property's or an item's start afresh)
        self._inlined: list[str] = []
        self._inlined_from = 0
        self._pairs: dict[int, int] = {}  # a $ref target → how many "$ref with keywords" rules use it
        self.depth, self.max_depth = 0, max_depth  # values nest at most as deeply as the schema's JSON
        self.size, self.max_bytes = 0, max_bytes
        self._deadline = time.monotonic() + TIME_BUDGET
        self._reserved = set(library.rules()) | {"root"}
        self._validator: Any = None
        self.loosened: list[str] = []  # "path:keyword" for each keyword not enforced exactly
        self._defined: dict[str, str] = {}  # shared rules (define) by their hint
        self._shared: dict[Any, str] = {}  # rules made of the same rules (shared)
        dialect = root.get("$schema") if isinstance(root, dict) else None
        self._integral_floats = not (isinstance(dialect, str) and re.search(r"draft-0[34]/", dialect))  # 2.0 is an integer

        self.root_rule = ""

    # -- the whole schema --------------------------------------------------------------------

    def run(self, schema: Schema) -> str:
        self.root_rule = self.visit(schema, "#")
        self.drain()
        return self.root_rule

    def drain(self) -> None:
        """Convert the `$ref` targets met so far (and those they meet)."""
        while self._todo:
            name, target, path, key, self._chain = self._todo.popleft()
            try:
                self.rules[name] = self.visit(target, path)
            except Unsatisfiable:
                raise _Dead(key) from None

    def grammar(self, root_body: str) -> str:
        return assemble(root_body, self.rules)

    # -- rules -------------------------------------------------------------------------------

    def loose(self, path: str, keyword: str) -> None:
        entry = f"{path}:{keyword}"
        if entry not in self.loosened:
            self.loosened.append(entry)

    def add(self, path: str, body: str) -> str:
        """A rule for `body` (reusing an identical one), named after `path`."""
        if re.fullmatch(r"[a-zA-Z0-9-]+", body):
            return body  # already a rule: no wrapper
        if body in self._by_body:
            return self._by_body[body]
        name = self._name(path)
        self.rules[name] = body
        self._by_body[body] = name
        self.size += len(name) + len(body) + 6
        if self.size > 4 * self.max_bytes:  # compacting shrinks it, but not by that much
            raise GrammarError(f"the grammar made from the schema is more than {self.max_bytes} bytes "
                               "(max_grammar_bytes)", param="schema")
        return name

    def define(self, hint: str, body: str | None) -> str:
        """A rule shared by the whole grammar, named after `hint`: named first (body None), then
        filled; asked for again, the same rule."""
        if body is None:
            if hint not in self._defined:
                self._defined[hint] = self.reserve("#/" + hint)
            return self._defined[hint]
        if hint in self.rules:
            if not self.rules[hint]:
                self.fill(hint, body)
            return hint
        if hint not in self._defined:
            self._defined[hint] = self.add("#/" + hint, body)
        return self._defined[hint]

    def shared(self, key: Any, make: Callable[[], str]) -> str:
        """The rule `make` makes, made once for each `key` (rules whose parts are the same rules:
        an object written out twice with different descriptions)."""
        if key not in self._shared:
            self._shared[key] = make()
        return self._shared[key]

    def rules_at(self, path: str) -> tuple[Callable[[str], str], Callable[[], str], Callable[[str, str], None]]:
        """Ways to make rules named after `path`: (add a body, name one first, fill it) for a
        pattern's automaton (dfa.py)."""
        return (lambda body: self.add(path, body), lambda: self.reserve(path), self.fill)

    def reserve(self, path: str) -> str:
        """A rule's name, given before its body (a rule that refers to itself): see `fill`."""
        name = self._name(path)
        self.rules[name] = ""
        return name

    def fill(self, name: str, body: str) -> None:
        if not body:
            raise Unsatisfiable
        self.rules[name] = body
        self.size += len(name) + len(body) + 6
        if self.size > 4 * self.max_bytes:
            raise GrammarError(f"the grammar made from the schema is more than {self.max_bytes} bytes "
                               "(max_grammar_bytes)", param="schema")

    def _name(self, path: str) -> str:
        words = [w for w in path.split("/") if w not in _PATH_WORDS and not w.isdigit()][-2:]
        hint = re.sub(r"[^a-zA-Z0-9-]+", "-", "-".join(words)).strip("-")[:24].lower() or "r"
        base = self.prefix + (hint if hint[0].isalpha() else "r" + hint)
        name, i = base, 1
        while name in self.rules or name in self._reserved:
            i += 1
            name = f"{base}-{i}"
        if len(self.rules) >= MAX_RULES:
            raise GrammarError(f"the schema needs more than {MAX_RULES} grammar rules", param="schema")
        if time.monotonic() > self._deadline:
            raise GrammarError(f"the schema took more than {TIME_BUDGET:g} s to turn into a grammar", param="schema")
        return name

    # -- values ------------------------------------------------------------------------------

    def visit(self, schema: Schema, path: str) -> str:
        """The name of a rule matching `schema` (followed by ws)."""
        if self.depth >= self.max_depth:
            raise GrammarError(f"the schema at {path!r} is nested more than {self.max_depth} levels deep "
                               "(max_schema_depth)", param="schema")
        self.depth += 1
        inlined = len(self._inlined)
        try:
            return self._visit(schema, path)
        finally:
            self.depth -= 1
            del self._inlined[inlined:]

    def child(self, schema: Schema, path: str) -> str:
        """A value inside this one: a property, an item."""
        self._level += 1
        floor, self._inlined_from = self._inlined_from, len(self._inlined)
        try:
            return self.visit(schema, path)
        finally:
            self._level -= 1
            self._inlined_from = floor

    def _visit(self, schema: Schema, path: str) -> str:
        if schema is True:
            return "value"
        if schema is False:
            raise Unsatisfiable
        if not isinstance(schema, dict):
            raise GrammarError(f"the schema at {path!r} must be an object or a boolean", param="schema")
        schema = self.flatten(schema, path, refs=False)
        if schema is False:
            raise Unsatisfiable
        if schema is True or not constraining(schema):
            return "value"
        if is_plain_ref(schema):
            return self.ref_rule(schema["$ref"], path)
        if isinstance(schema.get("$ref"), str):
            return self._merged_ref_rule(schema, path)
        try:
            key = hashlib.sha1(json.dumps(schema, sort_keys=True).encode()).digest()
        except (TypeError, ValueError):
            return self._dispatch(schema, path)
        if key in self._memo:
            return self._memo[key]
        if key in self._active:  # met again inside itself (a $ref merged in by an object's anyOf): a rule
            if key in self.dead:
                raise Unsatisfiable
            self._active[key] = self._active[key] or self._name(path)
            self.rules[self._active[key]] = ""  # filled in below
            return self._active[key]
        self._active[key] = None
        try:
            name = self._dispatch(schema, path)
        except Unsatisfiable:
            if self._active[key] is not None:  # something refers to it already: try again without it
                raise _Dead(key) from None
            raise
        finally:
            reserved = self._active.pop(key)
        if reserved is not None:
            self.rules[reserved] = name
        self._memo[key] = name
        return name

    def _dispatch(self, schema: dict[str, Any], path: str) -> str:
        for keyword in schema.get(UNMERGED, []):
            self.loose(path, keyword)
        if "if" in schema and ("then" in schema or "else" in schema):
            self.loose(path, "if")
        if "$dynamicRef" in schema:
            self.loose(path, "$dynamicRef")
        if "const" in schema or "enum" in schema:
            return self._enum(schema, path)
        types = kinds(schema)
        if "not" in schema and types != {"object"}:
            types = self._not(schema, types, path)
        if types is not None and not types:
            raise Unsatisfiable
        if ("anyOf" in schema or "oneOf" in schema) and types != {"object"}:
            return self._alternatives(schema, path)
        if types is None:
            if not implied(schema):
                return "value"
            types = set(ALL_TYPES)  # `minLength` without `type`: strings are held to it, other values pass
        if len(types) > 1:
            return self._union(schema, types, path)
        return self._single(schema, next(iter(types)), path)

    def _single(self, schema: dict[str, Any], kind: str, path: str) -> str:
        if kind == "object":
            return object_rule(self, schema, path)
        if kind == "array":
            return array_rule(self, schema, path)
        if kind == "string":
            try:
                body = string_body(schema, lambda k: self.loose(path, k), self.rules_at(path))
            except PatternError as exc:
                raise self.invalid_pattern(pointer(path, "pattern"), exc) from None
        elif kind in ("number", "integer"):
            body = number_body(schema, kind, lambda k: self.loose(path, k), self.define, self._integral_floats)
        else:
            return "boolean" if kind == "boolean" else "null"
        if body is None:
            raise Unsatisfiable
        return self.add(path, body)

    def invalid_pattern(self, where: str, exc: PatternError) -> GrammarError:
        return GrammarError(f"the regular expression at {where!r} is not valid: {exc}", param="schema")

    def _union(self, schema: dict[str, Any], types: set[str], path: str) -> str:
        rest = {k: v for k, v in schema.items() if k not in ("type", "nullable")}
        names = []
        for kind in sorted(types):
            try:
                names.append(self._single({**rest, "type": kind}, kind, path))
            except Unsatisfiable:
                continue
        if not names:
            raise Unsatisfiable
        return self.add(path, " | ".join(dict.fromkeys(names)))

    def _not(self, schema: dict[str, Any], types: set[str] | None, path: str) -> set[str] | None:
        """`not: {type: ...}` takes those types away; a `not` whose keywords all belong to one type
        (`not: {required: [...]}`) takes every other type away, since those values pass what it
        negates (the object rule holds `required` in it; other keywords are not held)."""
        negated = schema["not"]
        if negated is True or negated == {}:
            return set()
        if not isinstance(negated, dict):
            return types
        words = set(constraining(negated))
        if words == {"type"}:
            gone = kinds(negated)
            if not gone or "integer" in gone and "number" not in gone and "number" in (types or {"number"}):
                self.loose(path, "not")  # (a number that is not an integer has no grammar here)
                return types
            gone = gone | ({"integer"} if "number" in gone else set())
            return (types or set(ALL_TYPES)) - gone
        families = family_of(words)
        if families is not None and len(families) == 1:
            family = next(iter(families))
            if family != "object" or words - {"required", "anyOf"}:
                self.loose(path, "not")
            return (types or set(ALL_TYPES)) & ({family, "integer"} if family == "number" else {family})
        self.loose(path, "not")
        return types

    def _alternatives(self, schema: dict[str, Any], path: str) -> str:
        key = "anyOf" if isinstance(schema.get("anyOf"), list) else "oneOf"
        branches = schema.get(key) or []
        rest = {k: v for k, v in schema.items() if k != key}
        names = []
        for i, branch in enumerate(branches):
            where = pointer(path, key, i)
            try:
                if is_plain_ref(branch) and not constraining(rest):
                    names.append(self.ref_rule(branch["$ref"], where))
                elif (both := merge(rest, branch)) is not False:
                    names.append(self.visit(both, where))
            except Unsatisfiable:
                continue
        if not names:
            raise Unsatisfiable
        if key == "oneOf" and len(names) > 1 and not disjoint(branches, self.doc):
            self.loose(path, "oneOf")
        return self.add(path, " | ".join(dict.fromkeys(names)))

    def _enum(self, schema: dict[str, Any], path: str) -> str:
        values = [schema["const"]] if "const" in schema else list(schema["enum"] or [])
        if "const" in schema and isinstance(schema.get("enum"), list):
            values = [v for v in schema["enum"] if _dump(v) == _dump(schema["const"])]
        rest = {k: v for k, v in schema.items() if k not in ("const", "enum")}
        if constraining(rest):
            values = [v for v in values if self._valid(v, rest)]
        if not values:
            raise Unsatisfiable
        options = list(dict.fromkeys(value_literal(v) for v in values))
        return self.add(path, f"{options[0]} ws" if len(options) == 1 else f"( {' | '.join(options)} ) ws")

    def valid(self, value: Any, schema: Schema) -> bool:
        return self._valid(value, schema)

    def _valid(self, value: Any, schema: Schema) -> bool:
        """Whether an enum's value holds for the keywords beside it (when that can be told)."""
        try:
            if self._validator is None:
                self._validator = validator_for(self.doc.root)(self.doc.root)
            return self._validator.evolve(schema=schema).is_valid(value)
        except Exception:  # a $ref it cannot follow, a broken pattern: keep the value
            return True


_PATH_WORDS = {"#", "properties", "items", "prefixItems", "definitions", "$defs", "anyOf", "oneOf", "allOf",
               "additionalProperties", "patternProperties", "not", "components", "schemas"}


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def convert(schema: Schema, prefix: str = "", rules: dict[str, str] | None = None, param: str = "schema", *,
            max_depth: int = DEPTH_CAP, max_bytes: int = MAX_BYTES, kind: type[Converter] = Converter,
            closed: bool = False) -> Converter:
    """Convert `schema`; the result's `grammar(root_rule)` has start rule `root`, and
    `loosened` lists what was not enforced exactly. (`kind`: a Converter whose `run` converts
    other parts of the schema. `closed`: an object that lists its keys and does not say
    `additionalProperties` takes no other keys, as a strict answer does; objects.py.)"""
    before = dict(rules or {})
    dead: set[Any] = set()
    schema = without_ref_siblings(with_metaschemas(schema))
    try:
        for _ in range(MAX_TRIES):  # each try learns of one more unsatisfiable $ref target
            converter = kind(schema, prefix, rules, max_depth=max_depth, max_bytes=max_bytes, closed=closed)
            converter.dead = dead
            try:
                converter.run(schema)
                return converter
            except _Dead as exc:
                dead.add(exc.key)
                if rules is not None:
                    rules.clear()
                    rules.update(before)
        raise GrammarError("the schema cannot be satisfied by any JSON value (through too many of its $refs)",
                           param=param)
    except Unsatisfiable:
        raise GrammarError("the schema cannot be satisfied by any JSON value", param=param) from None
    except RecursionError:  # not expected within max_schema_depth: a clear error all the same
        raise GrammarError(f"the schema is nested too deeply to convert (max_schema_depth is {max_depth})",
                           param=param) from None
    except GrammarError as exc:
        exc.param = param
        raise


def without_ref_siblings(schema: Schema) -> Schema:
    """Drafts 3 to 7 ignore the keywords beside a `$ref` (2019-09 on, they hold too): for those
    drafts, the schema without them (`definitions` stay: a reference may point into them)."""
    dialect = schema.get("$schema") if isinstance(schema, dict) else None
    if not (isinstance(dialect, str) and re.search(r"draft-0[3467]/", dialect)):
        return schema

    def strip(node: Any, depth: int = 0) -> Any:
        if depth > DEPTH_CAP * 4:
            return node
        if isinstance(node, list):
            return [strip(v, depth + 1) for v in node]
        if not isinstance(node, dict):
            return node
        out = {k: strip(v, depth + 1) for k, v in node.items()}
        if isinstance(node.get("$ref"), str):
            out = {k: v for k, v in out.items() if k == "$ref" or k not in CONSTRAINING}
        return out

    return strip(schema)


def schema_to_gbnf(schema: Schema) -> str:
    """A GBNF grammar (start rule `root`) whose sentences are JSON documents valid for
    `schema`, as far as its keywords can be enforced."""
    converter = convert(schema)
    return converter.grammar(converter.root_rule)
