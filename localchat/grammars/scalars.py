"""Rules for strings and numbers: formats, patterns, lengths and numeric bounds."""

from __future__ import annotations

import math
from typing import Any

from .gbnf import literal
from .numbers import integer_range
from .regex import pattern_to_gbnf

STRING_FORMATS = {"date", "time", "date-time", "uuid", "email", "ipv4"}


def string_body(schema: dict[str, Any]) -> str:
    fmt = schema.get("format")
    if fmt in STRING_FORMATS:
        return f'"\\"" {fmt} "\\"" ws'
    if isinstance(schema.get("pattern"), str):
        body = pattern_to_gbnf(schema["pattern"])
        if body is not None:
            return f'"\\"" ({body}) "\\"" ws'
    low = min(max(int(number(schema.get("minLength")) or 0), 0), 2000)
    high = number(schema.get("maxLength"))
    count = "*" if not low and high is None else f"{{{low},}}" if high is None else f"{{{low},{min(int(high), 2000)}}}"
    return f'"\\"" char{count} "\\"" ws'


def number_body(schema: dict[str, Any], kind: str) -> str | None:
    """A rule body for an integer or number within the schema's bounds; None when no value
    is within them. Bounds this grammar cannot express give any number (looser)."""
    lo, hi = number(schema.get("minimum")), number(schema.get("maximum"))
    xlo, xhi = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if isinstance(xlo, bool):  # draft 4: a flag on minimum
        xlo, lo = (lo if xlo else None), (None if xlo else lo)
    else:
        xlo = number(xlo)
    if isinstance(xhi, bool):
        xhi, hi = (hi if xhi else None), (None if xhi else hi)
    else:
        xhi = number(xhi)
    if kind == "integer":
        low = _pick(max, math.ceil(lo) if lo is not None else None, math.floor(xlo) + 1 if xlo is not None else None)
        high = _pick(min, math.floor(hi) if hi is not None else None, math.ceil(xhi) - 1 if xhi is not None else None)
        if low is None and high is None:
            return "integer ws"
        if low is not None and high is not None and low > high:
            return None
        return f"({integer_range(low, high)}) ws"
    if hi is None and xhi is None:
        if xlo is not None and xlo >= 0 and lo is None:
            whole = integer_range(max(math.floor(xlo) + 1, 1), None)
            at = integer_range(math.floor(xlo), math.floor(xlo))
            return f'( ({whole}) fraction? | ({at}) "." [0-9]{{0,15}} [1-9] ) ws'
        if (lo is not None and lo >= 0) or (xlo is not None and xlo >= 0):
            return f"({integer_range(math.ceil(lo if lo is not None else xlo), None)}) fraction? ws"
        return "number"
    top = hi if hi is not None else xhi
    bottom = lo if lo is not None else xlo
    if bottom is None or bottom < 0 or not float(top).is_integer() or not float(bottom).is_integer():
        return "number"
    bottom, top = int(bottom), int(top)
    if lo is None:
        bottom += 1
    if hi is None:  # exclusive maximum
        top -= 1
        return f"({integer_range(bottom, top)}) fraction? ws" if top >= bottom else None
    if top <= bottom:
        return f"{literal(str(top))} ws" if top == bottom else None
    return f'( ({integer_range(bottom, top - 1)}) fraction? | {literal(str(top))} ) ws'


def number(value: Any) -> int | float | None:
    """A bound this grammar can use: a finite number. Anything else (a string, a list, NaN,
    Infinity: refused by the metaschema check, but a caller may skip it) is no bound: looser."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if isinstance(value, int) or math.isfinite(value) else None


def _pick(f, *xs: int | None) -> int | None:
    vals = [x for x in xs if x is not None]
    return f(vals) if vals else None
