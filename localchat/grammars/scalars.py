"""Rules for strings and numbers: formats, patterns, lengths and numeric bounds.

Each function gets `loose(keyword)` to call for a keyword it cannot enforce exactly; it
returns a rule body, or None when no value satisfies the schema."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .gbnf import literal
from .numbers import integer_range, natural_range
from .regex import Unsupported, class_run, compile_pattern

Loose = Callable[[str], None]
STRING_FORMATS = {"date", "time", "date-time", "uuid", "email", "ipv4", "ipv6", "hostname", "uri",
                  "uri-reference", "duration", "json-pointer", "relative-json-pointer", "regex"}
FORMAT_ALIASES = {"idn-email": "email", "idn-hostname": "hostname", "iri": "uri", "iri-reference": "uri-reference",
                  "uri-template": "uri"}  # a value of the second is one of the first
MAX_LENGTH = 2000  # GBNF repeats at most this many times (llama.cpp's limit)
BIG = 10 ** 16  # numbers are written with at most 16 digits before the point


def string_body(schema: dict[str, Any], loose: Loose) -> str | None:
    low = _count(schema.get("minLength"))
    high = number(schema.get("maxLength"))
    high = None if high is None else max(math.floor(high), 0)
    if high is not None and low > high:
        return None
    fmt = FORMAT_ALIASES.get(schema.get("format"), schema.get("format"))
    pattern = schema.get("pattern")
    if fmt in STRING_FORMATS:
        for keyword in ("pattern", "minLength", "maxLength"):
            if keyword in schema and (keyword != "minLength" or low):
                loose(keyword)
        return f'"\\"" {fmt} "\\"" ws'
    if isinstance(pattern, str):
        body = _pattern(pattern, low, high, loose)
        if body is not None:
            return f'"\\"" {body} "\\"" ws'
    if low > MAX_LENGTH:
        loose("minLength")
        low = MAX_LENGTH
    high = None if high is None else min(high, MAX_LENGTH)  # fewer characters: stricter
    count = "*" if not low and high is None else f"{{{low},}}" if high is None else f"{{{low},{high}}}"
    return f'"\\"" char{count} "\\"" ws'


def _pattern(pattern: str, low: int, high: int | None, loose: Loose) -> str | None:
    """The pattern's body; with lengths, only when the pattern is one repeated class
    (`^[a-z]+$`), whose bounds then combine. Raises PatternError for a broken pattern."""
    try:
        body = compile_pattern(pattern)
    except Unsupported:
        loose("pattern")
        return None
    if not low and high is None:
        return body
    run = class_run(pattern)
    if run is None:
        loose("minLength" if low else "maxLength")
        if low and high is not None:
            loose("maxLength")
        return body
    one, least, most = run
    least = max(least, low)
    most = min(x for x in (most, high, MAX_LENGTH) if x is not None)
    return None if least > most else f"{one}{{{least},{most}}}"


def number_body(schema: dict[str, Any], kind: str, loose: Loose) -> str | None:
    """An integer or number within the schema's bounds. Bounds are rounded inwards to whole
    numbers (stricter); `multipleOf` is enforced for whole steps between two bounds."""
    lo, xlo = number(schema.get("minimum")), schema.get("exclusiveMinimum")
    hi, xhi = number(schema.get("maximum")), schema.get("exclusiveMaximum")
    if isinstance(xlo, bool):  # draft 4: a flag on minimum
        xlo, lo = (lo if xlo else None), (None if xlo else lo)
    if isinstance(xhi, bool):
        xhi, hi = (hi if xhi else None), (None if xhi else hi)
    xlo, xhi = number(xlo), number(xhi)
    low = _pick(max, None if lo is None else math.ceil(lo), None if xlo is None else math.floor(xlo) + 1)
    high = _pick(min, None if hi is None else math.floor(hi), None if xhi is None else math.ceil(xhi) - 1)
    step = number(schema.get("multipleOf"))
    if step is not None and step > 0 and step != 1:
        listed = _multiples(step, low, high)
        if listed is not None:
            return listed or None
        loose("multipleOf")
    if low is not None and low >= BIG or high is not None and high <= -BIG:
        loose("minimum" if low is not None and low >= BIG else "maximum")
        return "number" if kind == "number" else "integer ws"
    low = None if low is not None and low <= -BIG else low
    high = None if high is not None and high >= BIG else high
    if low is not None and high is not None and low > high:
        if kind == "integer" or _empty_interval(lo, xlo, hi, xhi):
            return None
        loose("minimum" if lo is not None or xlo is not None else "maximum")  # no whole number between them
        return "number"
    if kind == "integer" or step == 1:
        return "integer ws" if low is None and high is None else f"({integer_range(low, high)}) ws"
    if low is None and high is None:
        return "number"
    parts = _bounded(low, high)
    if xlo is not None and lo is None and float(xlo).is_integer() and xlo >= 0 and (high is None or xlo < high):
        parts.append(f'"{int(xlo)}." [0-9]{{0,15}} [1-9]')  # just above an exclusive minimum
    return f"( {' | '.join(parts)} ) ws"


def _bounded(low: int | None, high: int | None) -> list[str]:
    """Numbers from low to high (whole numbers, either may be None), fractions included."""
    parts = []
    if high is None or high >= 0:  # 0 and up
        start = max(low, 0) if low is not None else 0
        if high is None:
            parts.append(f"({natural_range(start, None)}) fraction?")
        else:
            if high > start:
                parts.append(f"({natural_range(start, high - 1)}) fraction?")
            parts.append(literal(str(high)))
    if low is None or low < 0:  # below 0: "-k.f" is -(k + f)
        least = -high if high is not None and high < 0 else 0
        if low is None:
            parts.append(f'"-" ({natural_range(least, None)}) fraction?')
        else:
            if -low - 1 >= least:
                parts.append(f'"-" ({natural_range(least, -low - 1)}) fraction?')
            parts.append(literal(str(low)))
    return parts


def _multiples(step: float, low: int | None, high: int | None) -> str | None:
    """The whole multiples of a whole `step` between two bounds, listed: "" if there are none,
    None if they cannot be listed (no bounds, a fractional step, more than 100 of them)."""
    if not float(step).is_integer() or low is None or high is None:
        return None
    first, last = math.ceil(low / step), math.floor(high / step)
    if last - first >= 100:
        return None
    return "( " + " | ".join(literal(str(int(k * step))) for k in range(first, last + 1)) + " ) ws" if last >= first else ""


def _empty_interval(lo: Any, xlo: Any, hi: Any, xhi: Any) -> bool:
    bottom = max([v for v in (lo, xlo) if v is not None], default=-math.inf)
    top = min([v for v in (hi, xhi) if v is not None], default=math.inf)
    return bottom > top or bottom == top and (xlo == bottom or xhi == top)


def _count(value: Any) -> int:
    n = number(value)
    return max(math.ceil(n), 0) if n is not None else 0


def number(value: Any) -> int | float | None:
    """A bound this grammar can use: a finite number. Anything else (a string, a list, NaN,
    Infinity: refused by the metaschema check, but a caller may skip it) is no bound: looser."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if isinstance(value, int) or math.isfinite(value) else None


def _pick(f: Callable[..., int], *xs: int | None) -> int | None:
    vals = [x for x in xs if x is not None]
    return f(vals) if vals else None
