"""Two schemas at once (allOf, a `$ref` with other keywords beside it, an anyOf branch with the
keywords around it), as one schema a grammar can be made from.

Keywords combine exactly where they can: types intersect, lower bounds take the larger, enums
intersect, sub-schemas of the same name become an allOf of both. Two that cannot (two different
`pattern`s or `format`s) keep the first and are listed under UNMERGED, so the converter says
they were not enforced."""

from __future__ import annotations

import json
import math
import re
from typing import Any

Schema = dict[str, Any] | bool
UNMERGED = "x-localchat-unmerged"  # keywords of which only one of two values is enforced

# Keywords that constrain an instance; anything else (title, description, x-…, unknown words)
# only describes, and a `$ref` with only those beside it is a plain reference.
CONSTRAINING = frozenset({
    "type", "enum", "const", "$ref", "$recursiveRef", "$dynamicRef", "allOf", "anyOf", "oneOf", "not", "if",
    "then", "else", "properties", "required", "additionalProperties", "patternProperties", "propertyNames",
    "minProperties", "maxProperties", "dependencies", "dependentRequired", "dependentSchemas",
    "unevaluatedProperties", "items", "prefixItems", "additionalItems", "contains", "minContains", "maxContains",
    "minItems", "maxItems", "uniqueItems", "unevaluatedItems", "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "nullable", UNMERGED})
_SUBSCHEMA = ("items", "additionalProperties", "additionalItems", "contains", "propertyNames",
              "unevaluatedItems", "unevaluatedProperties")
_LARGER = ("minimum", "minLength", "minItems", "minProperties", "minContains")
_SMALLER = ("maximum", "maxLength", "maxItems", "maxProperties", "maxContains")
MAX_PRODUCT = 64  # anyOf × anyOf branches combined before giving up


def constraining(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k in CONSTRAINING}


def is_plain_ref(schema: Any) -> bool:
    return isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and len(constraining(schema)) == 1


def same(a: Any, b: Any) -> bool:
    return a == b and _dump(a) == _dump(b)  # 1 == 1.0 == True in Python, not in JSON


def merge(a: Schema, b: Schema) -> Schema:
    """A schema that both `a` and `b` hold for (False: none can)."""
    if a is False or b is False:
        return False
    if a is True or not a:
        return b if b is not True else {}
    if b is True or not b:
        return a
    out = dict(a)
    for key, value in b.items():
        if key not in out:
            out[key] = value
            continue
        if same(out[key], value):
            continue
        combined = _combine(key, out[key], value, out)
        if combined is False:
            return False
        if combined is not None:
            out[key] = combined
    _listed_by_one(a, b, out)
    return out


def _listed_by_one(a: dict[str, Any], b: dict[str, Any], out: dict[str, Any]) -> None:
    """A key that one of two object schemas lists is, for the other, one of its other keys: its
    value must also hold for that one's patternProperties or additionalProperties."""
    for mine, theirs in ((a, b), (b, a)):
        props = mine.get("properties")
        if not isinstance(props, dict) or not any(k in theirs for k in ("additionalProperties", "patternProperties")):
            continue
        listed = theirs.get("properties") if isinstance(theirs.get("properties"), dict) else {}
        for key in props:
            if key in listed:
                continue
            extra = _extra_for(theirs, key)
            if extra is True or extra == {}:
                continue
            merged = dict(out["properties"])
            merged[key] = False if extra is False else {"allOf": [merged[key], extra]}
            out["properties"] = merged


def _extra_for(schema: dict[str, Any], key: str) -> Any:
    """What `schema` asks of the value of a key it does not list."""
    patterns = schema.get("patternProperties")
    matched = []
    for pattern, sub in (patterns.items() if isinstance(patterns, dict) else ()):
        try:
            if re.search(pattern, key):
                matched.append(sub)
        except (re.error, RecursionError, OverflowError):
            continue
    if matched:
        return matched[0] if len(matched) == 1 else {"allOf": matched}
    return schema.get("additionalProperties", True)


def _combine(key: str, mine: Any, theirs: Any, out: dict[str, Any]) -> Any:
    """The value of `key` holding both; None when `out` was changed in place (or `mine` stays)."""
    if key == "type":
        return _types(mine, theirs)
    if key == "required" and isinstance(mine, list) and isinstance(theirs, list):
        return list(dict.fromkeys(mine + theirs))
    if key in ("properties", "patternProperties", "dependentSchemas") and isinstance(mine, dict) \
            and isinstance(theirs, dict):
        both = dict(mine)
        for name, sub in theirs.items():
            both[name] = {"allOf": [both[name], sub]} if name in both and not same(both[name], sub) else sub
        return both
    if key in _SUBSCHEMA:
        return {"allOf": [mine, theirs]}
    if key in ("allOf", UNMERGED) and isinstance(mine, list) and isinstance(theirs, list):
        return mine + theirs
    if key == "not":
        return {"anyOf": [mine, theirs]}
    if key == "$ref":
        out["allOf"] = [*out.get("allOf", []), {"$ref": theirs}]
        return None
    if key in ("anyOf", "oneOf") and isinstance(mine, list) and isinstance(theirs, list):
        if len(mine) * len(theirs) <= MAX_PRODUCT:  # (exactly) one of a and one of b: one of the pairs
            return [{"allOf": [x, y]} for x in mine for y in theirs]
    elif key == "enum" and isinstance(mine, list) and isinstance(theirs, list):
        kept = {_dump(v) for v in theirs}
        return [v for v in mine if _dump(v) in kept]
    elif key == "const":
        return False
    elif key in _LARGER + _SMALLER + ("exclusiveMinimum", "exclusiveMaximum") and _numbers(mine, theirs):
        pick = max if key in _LARGER or key == "exclusiveMinimum" else min
        return pick(mine, theirs)
    elif key == "uniqueItems":
        return bool(mine or theirs)
    elif key == "multipleOf" and _numbers(mine, theirs) and float(mine).is_integer() and float(theirs).is_integer():
        return math.lcm(int(mine), int(theirs))
    elif key == "dependentRequired" and isinstance(mine, dict) and isinstance(theirs, dict):
        return {k: list(dict.fromkeys(mine.get(k, []) + theirs.get(k, []))) for k in {**mine, **theirs}}
    elif key not in CONSTRAINING:
        return None  # a description, an extension: the first one stays
    out[UNMERGED] = [*out.get(UNMERGED, []), key]
    return None


def _types(mine: Any, theirs: Any) -> Any:
    a = set(mine if isinstance(mine, list) else [mine])
    b = set(theirs if isinstance(theirs, list) else [theirs])
    both = a & b
    if "integer" in a | b and "number" in a | b:  # an integer is a number
        both |= {"integer"} & (a | b) if ("number" in a and "integer" in b) or ("number" in b and "integer" in a) else set()
    if not both:
        return False
    return sorted(both)[0] if len(both) == 1 else sorted(both)


def _numbers(*values: Any) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)
