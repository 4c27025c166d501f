"""Which JSON types a schema allows, and whether oneOf's branches can ever both hold."""

from __future__ import annotations

import json
from typing import Any

from .refs import Document, Unresolvable

ALL_TYPES = ("object", "array", "string", "number", "boolean", "null")
_IMPLIED = {
    "object": ("properties", "required", "additionalProperties", "patternProperties", "propertyNames",
               "minProperties", "maxProperties", "dependencies", "dependentRequired", "dependentSchemas"),
    "array": ("items", "prefixItems", "additionalItems", "contains", "minItems", "maxItems", "uniqueItems"),
    "string": ("minLength", "maxLength", "pattern", "format"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
}


def kinds(schema: dict[str, Any]) -> set[str] | None:
    """The types `schema` allows; None for any (without `type`, `minLength` constrains the
    strings among them and lets every other value through)."""
    declared = schema.get("type")
    if isinstance(declared, str):
        types = {declared}
    elif isinstance(declared, list):
        types = {t for t in declared if isinstance(t, str)}
    else:
        types = None
    if types is not None and schema.get("nullable") is True:
        types.add("null")
    if types is not None and {"number", "integer"} <= types:
        types.discard("integer")
    return types


def implied(schema: dict[str, Any]) -> bool:
    """Whether keywords of some type (`minLength`, `properties`) constrain a schema without `type`."""
    return any(w in schema for words in _IMPLIED.values() for w in words)


def family_of(words: set[str]) -> set[str] | None:
    """The types whose keywords these are; None if some keyword belongs to no one type."""
    families = set()
    for word in words:
        owners = {kind for kind, owned in _IMPLIED.items() if word in owned}
        if not owners:
            return None
        families |= owners
    return families or None


def _values(schema: dict[str, Any]) -> list[str] | None:
    if "const" in schema:
        return [json.dumps(schema["const"], sort_keys=True)]
    if isinstance(schema.get("enum"), list):
        return [json.dumps(v, sort_keys=True) for v in schema["enum"]]
    return None


def _resolved(schema: Any, doc: Document) -> Any:
    for _ in range(8):
        if isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and len(schema) == 1:
            try:
                schema = doc.resolve(schema["$ref"])[0]
            except Unresolvable:
                return True
    return schema


def _apart(a: Any, b: Any, doc: Document) -> bool:
    """Whether no value can hold for both `a` and `b` (True only when that is plain to see)."""
    a, b = _resolved(a, doc), _resolved(b, doc)
    if a is False or b is False:
        return True
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    va, vb = _values(a), _values(b)
    if va is not None and vb is not None:
        return not set(va) & set(vb)
    ka, kb = kinds(a), kinds(b)
    if ka is not None and kb is not None:
        wide = lambda k: k | ({"integer"} if "number" in k else set())  # noqa: E731
        if not wide(ka) & wide(kb):
            return True
    pa, pb = a.get("properties") or {}, b.get("properties") or {}
    ra, rb = set(a.get("required") or []), set(b.get("required") or [])
    if _forbids(b, ra) or _forbids(a, rb):
        return True
    return any(_apart(pa[k], pb[k], doc) for k in ra & rb if k in pa and k in pb)


def _forbids(schema: dict[str, Any], keys: set[str]) -> bool:
    """Whether an object with these keys is refused by `schema` (additionalProperties: false)."""
    props = schema.get("properties") or {}
    return schema.get("additionalProperties") is False and not schema.get("patternProperties") and \
        any(k not in props for k in keys)


def disjoint(branches: list[Any], doc: Document) -> bool:
    """Whether every two of oneOf's branches are apart: then "one of" is "any of"."""
    return all(_apart(x, y, doc) for i, x in enumerate(branches) for y in branches[i + 1:])
