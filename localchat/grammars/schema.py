"""JSON Schema → GBNF.

Every keyword that real tool schemas use is enforced; one that cannot be falls back to the
looser rule (valid JSON of the right type) instead of failing. Words that only describe
(description, title, examples, default) are ignored. Each value rule ends in bounded `ws`."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from ..errors import GrammarError
from . import library
from .gbnf import literal
from .objects import ObjectShape, object_shapes
from .scalars import number, number_body, string_body

MAX_RULES = 5000
TIME_BUDGET = 2.0  # seconds
Schema = dict[str, Any] | bool


class Converter:
    def __init__(self, root: Schema, prefix: str = "", rules: dict[str, str] | None = None) -> None:
        self.root = root
        self.prefix = prefix
        self.rules: dict[str, str] = {} if rules is None else rules  # may be shared by several converters
        self._by_body: dict[str, str] = {b: n for n, b in self.rules.items()}
        self._refs: dict[str, str] = {}
        self._deadline = time.monotonic() + TIME_BUDGET
        self._reserved = set(library.rules()) | {"root"}
        self.loosened: list[str] = []  # what could not be enforced exactly

    # -- rules -----------------------------------------------------------------------------

    def add(self, hint: str, body: str) -> str:
        """A rule for `body` (reusing an identical one), named after `hint`."""
        if re.fullmatch(r"[a-zA-Z0-9-]+", body):
            return body  # already a rule: no wrapper
        if body in self._by_body:
            return self._by_body[body]
        name = self._name(hint)
        self.rules[name] = body
        self._by_body[body] = name
        return name

    def _name(self, hint: str) -> str:
        base = self.prefix + (re.sub(r"[^a-zA-Z0-9-]+", "-", hint).strip("-")[:48] or "r")
        name, i = base, 1
        while name in self.rules or name in self._reserved:
            i += 1
            name = f"{base}-{i}"
        if len(self.rules) >= MAX_RULES or time.monotonic() > self._deadline:
            raise GrammarError("the schema is too large or too deeply nested to turn into a grammar", param="schema")
        return name

    def grammar(self, root_body: str) -> str:
        return assemble(root_body, self.rules)

    # -- values ----------------------------------------------------------------------------

    def visit(self, schema: Schema, hint: str) -> str:
        """The name of a rule matching `schema` (followed by ws)."""
        if schema is True or schema == {}:
            return "value"
        if schema is False:
            raise _Unsatisfiable
        if not isinstance(schema, dict):
            raise GrammarError(f"schema at {hint!r} must be an object or a boolean", param="schema")
        if "$ref" in schema:
            return self._ref(schema["$ref"], schema, hint)
        if "allOf" in schema:
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for part in schema["allOf"]:
                merged = merge(merged, self._resolve(part))
            return self.visit(merged, hint)
        if "const" in schema:
            return self.add(hint, f"{literal(_dump(schema['const']))} ws")
        if "enum" in schema:
            options = [literal(_dump(v)) for v in schema["enum"]]
            if not options:
                raise _Unsatisfiable
            return self.add(hint, f"({' | '.join(options)}) ws")
        kind = schema.get("type")
        if isinstance(kind, list) or schema.get("nullable") is True:
            kinds = list(kind) if isinstance(kind, list) else [kind] if kind else []
            if schema.get("nullable") is True and "null" not in kinds:
                kinds.append("null")
            if not kinds:
                return "value"
            rest = {k: v for k, v in schema.items() if k not in ("type", "nullable")}
            return self.add(hint, " | ".join(self.visit({**rest, "type": k}, f"{hint}-{k}") for k in kinds))
        if kind == "object" or (kind is None and _looks_like_object(schema)):
            return self._object(schema, hint)
        if kind is None and ("anyOf" in schema or "oneOf" in schema):
            return self._alternatives(schema, hint)
        if kind == "array" or (kind is None and ("items" in schema or "prefixItems" in schema)):
            return self._array(schema, hint)
        if kind == "string":
            return self._string(schema, hint)
        if kind in ("number", "integer"):
            return self._number(schema, kind, hint)
        if kind == "boolean":
            return "boolean"
        if kind == "null":
            return "null"
        return "value"

    def _alternatives(self, schema: dict[str, Any], hint: str) -> str:
        rest = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
        names = []
        for i, branch in enumerate(schema.get("anyOf") or schema.get("oneOf") or []):
            try:
                names.append(self.visit(merge(rest, self._resolve(branch)), f"{hint}-{i}"))
            except _Unsatisfiable:
                continue
        if not names:
            raise _Unsatisfiable
        return self.add(hint, " | ".join(dict.fromkeys(names)))

    def _ref(self, ref: str, schema: dict[str, Any], hint: str) -> str:
        extra = {k: v for k, v in schema.items() if k != "$ref" and k not in _DESCRIPTIVE}
        if extra:  # siblings of $ref constrain too (2019-09+): merge them in
            return self.visit(merge(self._resolve({"$ref": ref}), extra), hint)
        if ref not in self._refs:
            target = self._resolve({"$ref": ref})
            name = self._refs[ref] = self._name(f"ref-{ref.rsplit('/', 1)[-1]}")
            self.rules[name] = "value"  # placeholder, so recursion finds the name
            body = self.visit(target, f"{name}-body")
            self.rules[name] = body
        return self._refs[ref]

    def _resolve(self, schema: Schema) -> Schema:
        seen = 0
        while isinstance(schema, dict) and "$ref" in schema and len(schema) == 1:
            ref = schema["$ref"]
            if not isinstance(ref, str) or not ref.startswith("#"):
                raise GrammarError(f"only local $ref (#/...) is supported, not {ref!r}", param="schema")
            node: Any = self.root
            for part in [p for p in ref[1:].split("/") if p]:
                part = part.replace("~1", "/").replace("~0", "~")
                try:
                    node = node[int(part)] if isinstance(node, list) else node[part]
                except (KeyError, IndexError, ValueError, TypeError):
                    raise GrammarError(f"$ref {ref!r} points nowhere", param="schema") from None
            schema, seen = node, seen + 1
            if seen > 64:
                raise GrammarError(f"$ref {ref!r} loops", param="schema")
        return schema

    def _object(self, schema: dict[str, Any], hint: str) -> str:
        shapes = object_shapes(schema, self._resolve)
        bodies = []
        for i, shape in enumerate(shapes):
            try:
                bodies.append(self._object_body(shape, f"{hint}-{i}" if len(shapes) > 1 else hint))
            except _Unsatisfiable:
                continue
        if not bodies:  # the combinators contradict each other: drop them (looser), say so
            self.loosened.append(f"{hint}: no object satisfies its anyOf/oneOf/not; those were not enforced")
            plain = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf", "not", "dependencies")}
            bodies = [self._object_body(object_shapes(plain, self._resolve)[0], hint)]
        return self.add(hint, " | ".join(dict.fromkeys(bodies)))

    def _object_body(self, shape: ObjectShape, hint: str) -> str:
        def pair(key: str, value: Schema) -> str:
            return self.add(f"{hint}-{key}-kv", f'{literal(_dump(key))} ":" ws {self.visit(value, f"{hint}-{key}")}')

        required = [pair(k, shape.properties.get(k, shape.additional or True)) for k in shape.required]
        optional = []
        for key, value in shape.properties.items():
            if key not in shape.required:
                try:
                    optional.append(pair(key, value))
                except _Unsatisfiable:
                    continue
        extra = None
        if shape.additional is not False:
            extra = self.add(f"{hint}-extra-kv", f'string ":" ws {self.visit(shape.additional, f"{hint}-extra")}')
        tail = f' ( "," ws {extra} )*' if extra else ""
        if required:
            body = " ".join([required[0], *(f'"," ws {r}' for r in required[1:])])
            body += "".join(f' ( "," ws {o} )?' for o in optional) + tail
            return self.add(hint, f'"{{" ws {body} "}}" ws')
        if not optional and not extra:
            return self.add(hint, '"{" ws "}" ws')
        # No required keys: whichever key comes first has no comma before it.
        rest = self.add(f"{hint}-rest-end", f'( "," ws {extra} )*') if extra else None
        starts = []
        for i in range(len(optional) - 1, -1, -1):
            after = rest
            starts.append(optional[i] + (f" {after}" if after else ""))
            if i:  # the chain of optional keys that may follow key i-1
                rest = self.add(f"{hint}-rest{i}", f'( "," ws {optional[i]} )?' + (f" {after}" if after else ""))
        if extra:
            starts.append(f'{extra} ( "," ws {extra} )*')
        return self.add(hint, f'"{{" ws ( {" | ".join(reversed(starts))} )? "}}" ws')

    def _array(self, schema: dict[str, Any], hint: str) -> str:
        low = max(int(number(schema.get("minItems")) or 0), 0)
        high = number(schema.get("maxItems"))
        high = None if high is None else max(int(high), 0)
        items = schema.get("items", True)
        prefix = schema.get("prefixItems") or (items if isinstance(items, list) else None)
        if prefix is not None:
            more = schema.get("additionalItems", True) if isinstance(items, list) else items
            firsts = [self.visit(p, f"{hint}-{i}") for i, p in enumerate(prefix)]
            if high is not None:
                firsts = firsts[:high]
            tail = "" if more is False or (high is not None and high <= len(firsts)) else \
                f' ( "," ws {self.visit(more, f"{hint}-more")} )*'
            need = min(max(low, 0), len(firsts))
            body, closing = "", ""
            for i, name in enumerate(firsts):
                sep = "" if i == 0 else '"," ws '
                if i < need:
                    body += f" {sep}{name}"
                else:
                    body += f" ( {sep}{name}"
                    closing += " )?"
            return self.add(hint, f'"[" ws{body}{tail if len(firsts) else ""}{closing} "]" ws')
        item = self.visit(items, f"{hint}-item")
        if high is not None and high > 2000:
            high = None
        if high == 0:
            return self.add(hint, '"[" ws "]" ws')
        if low > 2000:
            raise GrammarError(f"minItems {low} is more than this server enforces (2000)", param="schema")
        more = ("*" if low <= 1 else f"{{{low - 1},}}") if high is None else f"{{{max(low - 1, 0)},{high - 1}}}"
        inner = f'{item} ( "," ws {item} ){more}'
        return self.add(hint, f'"[" ws {inner} "]" ws' if low else f'"[" ws ( {inner} )? "]" ws')

    def _string(self, schema: dict[str, Any], hint: str) -> str:
        return self.add(hint, string_body(schema))

    def _number(self, schema: dict[str, Any], kind: str, hint: str) -> str:
        body = number_body(schema, kind)
        if body is None:
            raise _Unsatisfiable
        return self.add(hint, body)


def assemble(root_body: str, rules: dict[str, str]) -> str:
    """A whole grammar: `root`, the generated rules, and the library rules they use."""
    lines = [f"root ::= {root_body}"] + [f"{n} ::= {b}" for n, b in rules.items()]
    needed = set().union(*(library.references(b) for b in [root_body, *rules.values()]))
    lines += [f"{n} ::= {b}" for n, b in library.closure(needed).items()]
    return "\n".join(lines) + "\n"


class _Unsatisfiable(Exception):
    pass


_DESCRIPTIVE = {"description", "title", "examples", "default", "$comment", "deprecated", "readOnly", "writeOnly"}


def _looks_like_object(schema: dict[str, Any]) -> bool:
    return any(k in schema for k in ("properties", "required", "additionalProperties", "patternProperties",
                                     "dependencies", "dependentRequired"))


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def merge(a: Schema, b: Schema) -> Schema:
    """Both schemas at once (for allOf and for a branch of anyOf/oneOf), as far as they combine."""
    if a is False or b is False:
        return False
    if a is True:
        return b
    if b is True:
        return a
    out = dict(a)
    for key, value in b.items():
        if key == "properties" and isinstance(out.get(key), dict):
            props = dict(out[key])
            for name, sub in value.items():
                props[name] = merge(props[name], sub) if name in props else sub
            out[key] = props
        elif key == "required" and isinstance(out.get(key), list):
            out[key] = list(dict.fromkeys(out[key] + list(value)))
        elif key == "type" and key in out and out[key] != value:
            a_types = set(out[key] if isinstance(out[key], list) else [out[key]])
            b_types = set(value if isinstance(value, list) else [value])
            both = a_types & b_types or ({"integer"} if {"integer", "number"} <= a_types | b_types else set())
            out[key] = sorted(both)[0] if len(both) == 1 else sorted(both)
            if not both:
                return False
        else:
            out[key] = value
    return out


def convert(schema: Schema, prefix: str = "", rules: dict[str, str] | None = None, param: str = "schema") -> Converter:
    """Convert `schema`; the result's `grammar()` has start rule `root`, and `loosened` lists
    what was not enforced exactly."""
    converter = Converter(schema, prefix, rules)
    try:
        converter.root_rule = converter.visit(schema, "schema")
    except _Unsatisfiable:
        raise GrammarError("the schema cannot be satisfied by any JSON value", param=param) from None
    except RecursionError:
        raise GrammarError("the schema is nested too deeply", param=param) from None
    except GrammarError as exc:
        exc.param = param
        raise
    return converter


def schema_to_gbnf(schema: Schema) -> str:
    """A GBNF grammar (start rule `root`) whose sentences are JSON documents valid for
    `schema`, as far as its keywords can be enforced."""
    converter = convert(schema)
    return converter.grammar(converter.root_rule)
