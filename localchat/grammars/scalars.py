"""Rules for strings and numbers: formats, patterns, lengths and numeric bounds.

Each function gets `loose(keyword)` to call for a keyword it cannot enforce exactly; it
returns a rule body, or None when no value satisfies the schema."""

from __future__ import annotations

import math
import re
from decimal import Decimal
from collections.abc import Callable
from typing import Any

from .gbnf import literal
from .numbers import Bound, decimal_range, integer_range, multiple_rules, multiples
from .regex import Rules, Unsupported, class_run, search_pattern

Loose = Callable[[str], None]
Define = Callable[[str, str | None], str]  # (a name's hint, a body or None to name it first) → the rule's name
STRING_FORMATS = {"date", "time", "date-time", "duration", "uuid", "email", "idn-email", "hostname", "idn-hostname",
                  "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uri-template", "json-pointer",
                  "relative-json-pointer", "regex"}
CHECKED_FORMATS = {"regex", "idn-hostname", "hostname"}  # their grammar lets more through (a regex, IDNA, 253 characters): the checker holds them
MAX_LENGTH = 2000  # GBNF repeats at most this many times (llama.cpp's limit)
BIG = 10 ** 39  # numbers are written with at most 40 digits before the point (numbers.MAX_DIGITS)
MAX_STEP = 64  # multipleOf a whole number up to this is read digit by digit (a rule per remainder)


def string_body(schema: dict[str, Any], loose: Loose, rules: Rules | None = None) -> str | None:
    low = _count(schema.get("minLength"))
    high = number(schema.get("maxLength"))
    high = None if high is None else max(math.floor(high), 0)
    if high is not None and low > high:
        return None
    fmt = schema.get("format")
    pattern = schema.get("pattern")
    if fmt in STRING_FORMATS:
        for keyword in ("pattern", "minLength", "maxLength"):
            if keyword in schema and (keyword != "minLength" or low):
                loose(keyword)
        if fmt in CHECKED_FORMATS:
            loose("format")
        return f'"\\"" {fmt} "\\"" ws'
    if isinstance(pattern, str):
        body = _pattern(pattern, low, high, loose, rules)
        if body is not None:
            return f'"\\"" {body} "\\"" ws'
    if low > MAX_LENGTH:
        loose("minLength")
        low = MAX_LENGTH
    high = None if high is None else min(high, MAX_LENGTH)  # fewer characters: stricter
    count = "*" if not low and high is None else f"{{{low},}}" if high is None else f"{{{low},{high}}}"
    return f'"\\"" char{count} "\\"" ws'


def _pattern(pattern: str, low: int, high: int | None, loose: Loose, rules: Rules | None = None) -> str | None:
    """The pattern's body; with lengths, only when the pattern is one repeated class
    (`^[a-z]+$`), whose bounds then combine. Raises PatternError for a broken pattern."""
    try:
        body = search_pattern(pattern, rules if not low and high is None else None)
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


def number_body(schema: dict[str, Any], kind: str, loose: Loose, define: Define,
                integral_floats: bool = True) -> str | None:
    """A number (or integer) within the schema's bounds, exactly: decimals compared digit by
    digit, written without an exponent once bounded. `multipleOf` a whole number is held by
    listing the multiples between two bounds, or by reading the digits keeping the remainder
    (`define` makes those rules); a fractional step is left to the checker (jsonschema divides
    floats: 0.3 is no multiple of 0.1 there). An integer may be written `2.0` (draft 6 on) and,
    unbounded, `2e3`."""
    low, high = _bounds(schema)
    if low is not None and high is not None and (low[0] > high[0] or low[0] == high[0] and not (low[1] and high[1])):
        return None
    for bound, keyword in ((low, "minimum"), (high, "maximum")):
        if bound is not None and abs(bound[0]) >= BIG:  # past what a number's digits hold here
            loose(keyword)
            low, high = (None, high) if keyword == "minimum" else (low, None)
    step = number(schema.get("multipleOf"))
    whole_step = step is not None and step > 0 and float(step).is_integer()
    if step is not None and step > 0 and not whole_step:
        loose("multipleOf")
    if kind == "integer" or whole_step:
        a = None if low is None else math.ceil(low[0]) + (1 if not low[1] and low[0] == math.ceil(low[0]) else 0)
        b = None if high is None else math.floor(high[0]) - (1 if not high[1] and high[0] == math.floor(high[0]) else 0)
        if a is not None and b is not None and a > b:
            return None
        tail = ' ( "." zeros )?' if integral_floats or kind != "integer" else ""  # a number `multipleOf: 1` is 2.0 too
        k = int(step) if whole_step else 1
        if k > 1:
            listed = _multiples(k, a, b)
            if listed is not None:
                return f"( {listed} ){tail} ws" if listed else None
            if a is None and b is None and k <= MAX_STEP:
                return f'( "-"? {_multiple_rule(k, define)} ){tail} ws'
            loose("multipleOf")
        if a is None and b is None:
            return "whole ws" if integral_floats or kind != "integer" else "integer ws"
        return f"( {integer_range(a, b)} ){tail} ws"
    if low is None and high is None:
        return "number"
    body = decimal_range(low, high)
    signed = _exponent_form(low, high)
    if signed is not None:  # 1e-06 within a bound at zero (Python's JSON writes small numbers so)
        body = signed if body is None else f"{body} | {signed}"
    return None if body is None else f"( {body} ) ws"


def _exponent_form(low: Bound | None, high: Bound | None) -> str | None:
    """Numbers written with an exponent where their sign alone decides a bound at zero (the
    mantissa's sign is the number's): >= 0, > 0, <= 0, < 0 with no other bound."""
    positive = '( [1-9] [0-9]{0,39} fraction? | "0" "." "0"{0,39} [1-9] digits )'
    if high is None and low is not None and low[0] == 0:
        return f"( {'natural fraction?' if low[1] else positive} ) exponent"
    if low is None and high is not None and high[0] == 0:
        return f'"-" ( {positive} ) exponent' + (' | "0" fraction? exponent' if high[1] else "")
    return None


def _bounds(schema: dict[str, Any]) -> tuple[Bound | None, Bound | None]:
    """The tighter of minimum and exclusiveMinimum (draft 4: a flag on minimum), and of the maxima."""
    lo, xlo = number(schema.get("minimum")), schema.get("exclusiveMinimum")
    hi, xhi = number(schema.get("maximum")), schema.get("exclusiveMaximum")
    if isinstance(xlo, bool):
        xlo, lo = (lo if xlo else None), (None if xlo else lo)
    if isinstance(xhi, bool):
        xhi, hi = (hi if xhi else None), (None if xhi else hi)
    xlo, xhi = number(xlo), number(xhi)
    lows = [(_dec(v), inclusive) for v, inclusive in ((lo, True), (xlo, False)) if v is not None]
    highs = [(_dec(v), inclusive) for v, inclusive in ((hi, True), (xhi, False)) if v is not None]
    low = max(lows, key=lambda b: (b[0], not b[1])) if lows else None
    high = min(highs, key=lambda b: (b[0], b[1])) if highs else None
    return low, high


def _dec(value: int | float) -> Decimal:
    return Decimal(value) if isinstance(value, int) else Decimal(repr(value))


def _multiple_rule(k: int, define: Define) -> str:
    """The name of a rule for the non-negative multiples of k (digits read keeping the remainder)."""
    names = {r: define(f"mod{k}-{r}", None) for r in range(k)}
    for r, body in multiple_rules(k).items():
        define(names[int(r.rsplit("-", 1)[1])], re.sub(r"mod\d+-(\d+)", lambda m: names[int(m[1])], body))
    first = re.sub(r"mod\d+-(\d+)", lambda m: names[int(m[1])], multiples(k) or "")
    return define(f"mod{k}", first)


def _multiples(step: int, low: int | None, high: int | None) -> str | None:
    """The multiples of `step` between two bounds, listed: "" if there are none, None if they
    cannot be listed (a bound missing, more than 100 of them)."""
    if low is None or high is None:
        return None
    first, last = math.ceil(low / step), math.floor(high / step)
    if last - first >= 100:
        return None
    return " | ".join(literal(str(k * step)) for k in range(first, last + 1)) if last >= first else ""


def _count(value: Any) -> int:
    n = number(value)
    return max(math.ceil(n), 0) if n is not None else 0


def number(value: Any) -> int | float | None:
    """A bound this grammar can use: a finite number. Anything else (a string, a list, NaN,
    Infinity: refused by the metaschema check, but a caller may skip it) is no bound: looser."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if isinstance(value, int) or math.isfinite(value) else None
