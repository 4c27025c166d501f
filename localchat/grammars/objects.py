"""Objects: the shapes an object may take (its properties, which are required, what else may
appear) once anyOf/oneOf branches, `not: {required}` and dependencies are worked out, and the
rule for each shape.

Each shape is a plain object layout that satisfies the schema: a oneOf branch leaves out the
optional keys that another branch requires, so no object matches two branches."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from .combine import merge
from .converting import Converting
from .gbnf import literal
from .kinds import kinds
from .refrules import Unsatisfiable
from .refs import pointer
from .regex import PatternError, Unsupported, compile_pattern

Schema = dict[str, Any] | bool
Loose = Callable[[str], None]


@dataclass(frozen=True)
class ObjectShape:
    properties: dict[str, Schema]
    required: list[str]
    additional: Schema = False  # unspecified additionalProperties: no extra keys (stricter, still valid)
    consts: dict[str, Any] = field(default_factory=dict)
    patterns: dict[str, Schema] = field(default_factory=dict)  # patternProperties
    names: Schema = True  # propertyNames


def object_rule(conv: Converting, schema: dict[str, Any], path: str) -> str:
    def resolve(branch: Schema) -> Schema:
        branch = conv.flatten(branch, path)
        for keyword in [k for k in ("anyOf", "oneOf", "if", "$ref") if isinstance(branch, dict) and k in branch]:
            loose(keyword)  # a combinator inside a branch: not looked into
        if isinstance(branch, dict) and (types := kinds(branch)) is not None and "object" not in types:
            return False  # a branch for another type: no object matches it
        values = [branch.get("const")] if isinstance(branch, dict) and "const" in branch else \
            branch.get("enum") if isinstance(branch, dict) else None
        if isinstance(values, list) and not any(isinstance(v, dict) for v in values):
            return False
        return branch

    def loose(keyword: str) -> None:
        conv.loose(path, keyword)

    bodies = []
    for shape in object_shapes(schema, resolve, loose):
        try:
            bodies.append(_body(conv, shape, path, loose))
        except Unsatisfiable:
            continue
    if not bodies:  # the combinators contradict each other: drop them (looser), say so
        combinators = [k for k in ("anyOf", "oneOf", "not", "dependentSchemas") if k in schema]
        if not combinators:
            raise Unsatisfiable
        for keyword in combinators:
            loose(keyword)
        plain = {k: v for k, v in schema.items() if k not in combinators}
        bodies = [_body(conv, object_shapes(plain, resolve, loose)[0], path, loose)]
    return conv.add(path, " | ".join(dict.fromkeys(bodies)))


def _body(conv: Converting, shape: ObjectShape, path: str, loose: Loose) -> str:
    def pair(key: str, value: Schema) -> str:
        where = pointer(path, "properties", key)
        return conv.add(pointer(where, "kv"), f'{literal(_dump(key))} ":" ws {conv.child(value, where)}')

    fallback = True if shape.additional is False else shape.additional
    required = [pair(k, shape.properties.get(k, fallback)) for k in shape.required]
    optional = []
    for key, value in shape.properties.items():
        if key not in shape.required:
            try:
                optional.append(pair(key, value))
            except Unsatisfiable:
                continue
    extra = _extra(conv, shape, path)
    tail = f' ( "," ws {extra} )*' if extra else ""
    if required:
        body = " ".join([required[0], *(f'"," ws {r}' for r in required[1:])])
        body += "".join(f' ( "," ws {o} )?' for o in optional) + tail
        return conv.add(path, f'"{{" ws {body} "}}" ws')
    if not optional and not extra:
        return conv.add(path, '"{" ws "}" ws')
    # No required keys: whichever key comes first has no comma before it.
    rest = conv.add(pointer(path, "rest"), f'( "," ws {extra} )*') if extra else None
    starts = []
    for i in range(len(optional) - 1, -1, -1):
        after = rest
        starts.append(optional[i] + (f" {after}" if after else ""))
        if i:  # the chain of optional keys that may follow key i-1
            rest = conv.add(pointer(path, f"rest{i}"), f'( "," ws {optional[i]} )?' + (f" {after}" if after else ""))
    if extra:
        starts.append(f'{extra} ( "," ws {extra} )*')
    return conv.add(path, f'"{{" ws ( {" | ".join(reversed(starts))} )? "}}" ws')


def _extra(conv: Converting, shape: ObjectShape, path: str) -> str | None:
    """One key-value pair beyond the listed properties, or None if there may be none: keys for
    patternProperties' patterns (others are left out: stricter), else any key (within
    propertyNames) for additionalProperties."""
    pairs = []
    sources = [(p, v, pointer(path, "patternProperties", p)) for p, v in shape.patterns.items()] if shape.patterns \
        else [] if shape.additional is False else [(None, shape.additional, pointer(path, "additionalProperties"))]
    for pattern, value, where in sources:
        key: Schema = {"type": "string"}
        if pattern is not None:
            try:
                compile_pattern(pattern)
            except Unsupported:
                continue  # no keys for it: stricter
            except PatternError as exc:
                raise conv.invalid_pattern(where, exc) from None
            key = {"type": "string", "pattern": pattern}
        try:
            key_rule = conv.child(merge(key, shape.names), pointer(path, "propertyNames"))
            pairs.append(conv.add(pointer(where, "kv"), f'{key_rule} ":" ws {conv.child(value, where)}'))
        except Unsatisfiable:
            continue
    return conv.add(pointer(path, "extra"), " | ".join(pairs)) if pairs else None


def object_shapes(schema: dict[str, Any], resolve: Callable[[Schema], Schema], loose: Loose) -> list[ObjectShape]:
    base = _shape(schema)
    shapes: list[ObjectShape | None] = [base]
    for key in ("oneOf", "anyOf"):
        branches = [resolve(b) for b in schema.get(key) or []]
        if branches:
            shapes = [s for shape in shapes if shape for s in _branch(shape, branches, key == "oneOf", loose)]
    shapes = [_apply_not(s, schema.get("not"), loose) for s in shapes]
    shapes = [_apply_dependencies(s, schema, loose) for s in shapes if s is not None]
    counted = [_count(s, schema, loose) for s in shapes if s is not None]
    return [s for s in counted if s is not None]


def _shape(schema: dict[str, Any]) -> ObjectShape:
    props = dict(schema.get("properties") or {})
    consts = {k: v["const"] if "const" in v else v["enum"][0] for k, v in props.items()
              if isinstance(v, dict) and ("const" in v or isinstance(v.get("enum"), list) and len(v["enum"]) == 1)}
    patterns = schema.get("patternProperties")
    return ObjectShape(props, list(dict.fromkeys(schema.get("required") or [])),
                       schema.get("additionalProperties", False), consts,
                       dict(patterns) if isinstance(patterns, dict) else {}, schema.get("propertyNames", True))


def _branch(shape: ObjectShape, branches: list[Schema], exclusive: bool, loose: Loose) -> list[ObjectShape]:
    parts = [_shape(b) if isinstance(b, dict) else None for b in branches]
    out = []
    for i, part in enumerate(parts):
        if part is None:
            continue
        props = dict(shape.properties)
        for key, sub in part.properties.items():
            props[key] = merge(props[key], sub) if key in props else sub
        required = list(dict.fromkeys(shape.required + part.required))
        additional = shape.additional if "additionalProperties" not in branches[i] else part.additional
        candidate: ObjectShape | None = replace(
            shape, properties=props, required=required, additional=additional, consts={**shape.consts, **part.consts},
            patterns={**shape.patterns, **part.patterns}, names=merge(shape.names, part.names))
        candidate = _apply_not(candidate, branches[i].get("not"), loose)
        if candidate is None:
            continue
        if exclusive:
            candidate = _exclude_other_branches(candidate, [p for j, p in enumerate(parts) if j != i and p])
            if candidate is None:
                continue
        out.append(candidate)
    return out


def _exclude_other_branches(shape: ObjectShape, others: list[ObjectShape]) -> ObjectShape | None:
    drop: set[str] = set()
    for other in others:
        if any(k in shape.consts and shape.consts[k] != v for k, v in other.consts.items()):
            continue  # a discriminating const tells the branches apart
        missing = [k for k in other.required if k not in shape.required]
        if not missing:
            return None  # every object of this shape would match the other branch too
        drop.update(missing)
    return _without(shape, drop)


def _apply_not(shape: ObjectShape | None, negated: Any, loose: Loose) -> ObjectShape | None:
    """`not: {required: [...]}` (or anyOf/oneOf of such): leave out the listed optional keys."""
    if shape is None or negated is None:
        return shape
    if not isinstance(negated, dict):
        return None if negated is True else shape
    groups = [negated] + [g for k in ("anyOf", "oneOf") for g in negated.get(k) or [] if isinstance(g, dict)]
    if any(set(g) - {"required", "anyOf", "oneOf", "description", "title"} for g in groups):
        loose("not")
    for group in groups:
        keys = group.get("required") or []
        if keys and all(k in shape.required for k in keys):
            return None
        shape = _without(shape, {k for k in keys if k not in shape.required})
    return shape


def _apply_dependencies(shape: ObjectShape, schema: dict[str, Any], loose: Loose) -> ObjectShape | None:
    deps = {**(schema.get("dependencies") or {}), **(schema.get("dependentRequired") or {})}
    deps.update({k: {"schema": v} for k, v in (schema.get("dependentSchemas") or {}).items()})
    for key, needs in deps.items():
        if key not in shape.properties and key not in shape.required:
            continue
        if key in shape.required and isinstance(needs, list):
            shape = replace(shape, required=list(dict.fromkeys(shape.required + needs)))
        elif key in shape.required:  # a schema that applies when the key is there: not enforced
            loose("dependentSchemas" if "dependentSchemas" in schema else "dependencies")
        elif not (isinstance(needs, list) and all(n in shape.required for n in needs)):
            shape = _without(shape, {key})  # an optional key whose conditions are not met: left out
    return shape


def _count(shape: ObjectShape, schema: dict[str, Any], loose: Loose) -> ObjectShape | None:
    """minProperties and maxProperties, met by making optional keys required or leaving them
    out (stricter); None if they cannot be met."""
    least, most = schema.get("minProperties"), schema.get("maxProperties")
    optional = [k for k in shape.properties if k not in shape.required]
    extras = shape.additional is not False or bool(shape.patterns)
    if isinstance(least, int) and not isinstance(least, bool) and len(shape.required) < least:
        need = least - len(shape.required)
        if len(optional) >= need:
            shape = replace(shape, required=shape.required + optional[:need])
            optional = optional[need:]
        elif extras:
            loose("minProperties")
        else:
            return None
    if isinstance(most, int) and not isinstance(most, bool):
        if len(shape.required) > most:
            return None
        room = most - len(shape.required)
        if extras or len(optional) > room:
            shape = replace(_without(shape, set(optional[room:])), additional=False, patterns={})
    return shape


def _without(shape: ObjectShape, keys: set[str]) -> ObjectShape:
    """The shape without these optional keys, and without extra keys (one could be one of them)."""
    if not keys:
        return shape
    return replace(shape, properties={k: v for k, v in shape.properties.items() if k not in keys},
                   additional=False, patterns={})


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
