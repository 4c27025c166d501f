"""The shapes an object may take: its properties, which are required, and what else may
appear, once anyOf/oneOf branches, `not: {required}` and `dependencies` are worked out.

Each shape is a plain object layout that satisfies the schema: a oneOf branch leaves out the
optional keys that another branch requires, so no object matches two branches."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

Schema = dict[str, Any] | bool


@dataclass(frozen=True)
class ObjectShape:
    properties: dict[str, Schema]
    required: list[str]
    additional: Schema = False  # unspecified additionalProperties: no extra keys (stricter, still valid)
    consts: dict[str, Any] = field(default_factory=dict)


def object_shapes(schema: dict[str, Any], resolve: Callable[[Schema], Schema]) -> list[ObjectShape]:
    base = _shape(schema)
    shapes = [base]
    for key in ("oneOf", "anyOf"):
        branches = [resolve(b) for b in schema.get(key) or []]
        if branches:
            shapes = [s for shape in shapes for s in _branch(shape, branches, exclusive=key == "oneOf")]
    shapes = [_apply_not(s, schema.get("not")) for s in shapes]
    shapes = [_apply_dependencies(s, schema) for s in shapes if s is not None]
    return [s for s in shapes if s is not None]


def _shape(schema: dict[str, Any]) -> ObjectShape:
    additional = schema.get("additionalProperties", False)
    if schema.get("patternProperties"):
        values = list(schema["patternProperties"].values())
        additional = values[0] if len(values) == 1 else {"anyOf": values}
    props = dict(schema.get("properties") or {})
    consts = {k: v["const"] for k, v in props.items() if isinstance(v, dict) and "const" in v}
    return ObjectShape(props, list(dict.fromkeys(schema.get("required") or [])), additional, consts)


def _branch(shape: ObjectShape, branches: list[Schema], exclusive: bool) -> list[ObjectShape]:
    from .schema import merge

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
        candidate = ObjectShape(props, required, additional, {**shape.consts, **part.consts})
        candidate = _apply_not(candidate, branches[i].get("not"))
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


def _apply_not(shape: ObjectShape | None, negated: Any) -> ObjectShape | None:
    """`not: {required: [...]}` (or anyOf/oneOf of such): leave out the listed optional keys."""
    if shape is None or not isinstance(negated, dict):
        return shape
    groups = [negated] + [g for k in ("anyOf", "oneOf") for g in negated.get(k) or [] if isinstance(g, dict)]
    for group in groups:
        keys = group.get("required") or []
        if keys and all(k in shape.required for k in keys):
            return None
        shape = _without(shape, {k for k in keys if k not in shape.required})
    return shape


def _apply_dependencies(shape: ObjectShape, schema: dict[str, Any]) -> ObjectShape | None:
    deps = {**(schema.get("dependencies") or {}), **(schema.get("dependentRequired") or {})}
    for key, needs in deps.items():
        if key not in shape.properties and key not in shape.required:
            continue
        if key in shape.required and isinstance(needs, list):
            shape = replace(shape, required=list(dict.fromkeys(shape.required + needs)))
        elif key not in shape.required and not (isinstance(needs, list) and all(n in shape.required for n in needs)):
            shape = _without(shape, {key})
    return shape


def _without(shape: ObjectShape, keys: set[str]) -> ObjectShape:
    if not keys:
        return shape
    return replace(shape, properties={k: v for k, v in shape.properties.items() if k not in keys},
                   additional=False if shape.additional is not False else False)
