"""Arrays: items (or prefixItems, or draft 4's list of items), counts, and what is not enforced
(uniqueItems, contains)."""

from __future__ import annotations

from typing import Any

from .converting import Converting
from .refrules import Unsatisfiable
from .refs import pointer
from .scalars import MAX_LENGTH, number

Schema = dict[str, Any] | bool


def array_rule(conv: Converting, schema: dict[str, Any], path: str) -> str:
    low = max(int(number(schema.get("minItems")) or 0), 0)
    high = number(schema.get("maxItems"))
    high = None if high is None else max(int(high), 0)
    if high is not None and high < low:
        raise Unsatisfiable
    items = schema.get("items", True)
    prefix = schema.get("prefixItems") or (items if isinstance(items, list) and items else None)
    more = schema.get("additionalItems", True) if isinstance(items, list) else items
    if "items" not in schema and "unevaluatedItems" in schema:  # the items nothing else evaluated
        if any(k in schema for k in ("if", "contains", "anyOf", "oneOf", "not", "$ref", "dependentSchemas")):
            conv.loose(path, "unevaluatedItems")  # a condition may evaluate more of them: any item, checked
        else:
            more = schema["unevaluatedItems"]
    if schema.get("uniqueItems") is True and (high is None or high > 1):
        conv.loose(path, "uniqueItems")
    for keyword in ("contains", "minContains", "maxContains"):
        if keyword in schema and (keyword != "minContains" or "contains" in schema):
            conv.loose(path, keyword)
    if low > MAX_LENGTH:
        conv.loose(path, "minItems")
        low = MAX_LENGTH
    if high is not None and high > MAX_LENGTH:
        high = MAX_LENGTH  # fewer items: stricter
    if prefix is not None:
        return _tuple(conv, prefix, more, low, high, path)
    if high == 0:
        return conv.add(path, '"[" ws "]" ws')
    try:
        item = conv.child(more, pointer(path, "items"))
    except Unsatisfiable:
        if low:
            raise
        return conv.add(path, '"[" ws "]" ws')
    repeat = ("*" if low <= 1 else f"{{{low - 1},}}") if high is None else f"{{{max(low - 1, 0)},{high - 1}}}"
    inner = f'{item} ( "," ws {item} ){repeat}'
    return conv.add(path, f'"[" ws {inner} "]" ws' if low else f'"[" ws ( {inner} )? "]" ws')


def _tuple(conv: Converting, prefix: list[Schema], more: Schema, low: int, high: int | None, path: str) -> str:
    """prefixItems: the first items one by one, then `more` (items / additionalItems) for the rest."""
    firsts = []
    for i, part in enumerate(prefix[:high] if high is not None else prefix):
        try:
            firsts.append(conv.child(part, pointer(path, "prefixItems", i)))
        except Unsatisfiable:
            if i < low:
                raise
            break  # no array may reach this item
    if low > len(firsts) and (more is False or len(firsts) < len(prefix)):
        raise Unsatisfiable
    if not firsts:
        return conv.add(path, '"[" ws "]" ws')
    tail = ""
    if more is not False and (high is None or high > len(firsts)) and len(firsts) == len(prefix):
        try:
            rest = conv.child(more, pointer(path, "items"))
            need = max(low - len(firsts), 0)
            most = "" if high is None else str(high - len(firsts))
            count = "*" if not need and not most else f"{{{need},{most}}}"
            tail = f' ( "," ws {rest} ){count}'
        except Unsatisfiable:
            if low > len(firsts):
                raise
    body, closing = "", ""
    for i, name in enumerate(firsts):
        sep = "" if i == 0 else '"," ws '
        if i < low:
            body += f" {sep}{name}"
        else:
            body += f" ( {sep}{name}"
            closing += " )?"
    return conv.add(path, f'"[" ws{body}{tail}{closing} "]" ws')
