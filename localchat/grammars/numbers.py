"""Integer ranges as GBNF: the digit strings between two bounds, exactly."""

from __future__ import annotations

from decimal import Decimal

MAX_DIGITS = 40  # a number's integer part (JSON writers stay far below: 17 significant digits, 20 for an int64)


def _same_length(a: str, b: str) -> str:
    """Digit strings of len(a) == len(b) from a to b inclusive."""
    if a == b:
        return f'"{a}"'
    if a.strip("0") == "" and b.strip("9") == "":  # every string of this length: without this the two
        return f"[0-9]{{{len(a)}}}"                  # recursive calls below make it exponential in the digits
    if len(a) == 1:
        return f"[{a}-{b}]"
    if a[0] == b[0]:
        return f'"{a[0]}" ({_same_length(a[1:], b[1:])})'
    n = len(a) - 1
    parts = [f'"{a[0]}" ({_same_length(a[1:], "9" * n)})']
    if int(b[0]) - int(a[0]) > 1:
        parts.append(f"[{int(a[0]) + 1}-{int(b[0]) - 1}] [0-9]{{{n}}}")
    parts.append(f'"{b[0]}" ({_same_length("0" * n, b[1:])})')
    return " | ".join(parts)


def natural_range(lo: int, hi: int | None) -> str:
    """Non-negative integers lo..hi (hi None: unbounded, up to MAX_DIGITS digits)."""
    assert lo >= 0 and (hi is None or hi >= lo)
    parts = []
    top = len(str(hi)) if hi is not None else MAX_DIGITS
    for digits in range(len(str(lo)), top + 1):
        a = max(lo, 10 ** (digits - 1) if digits > 1 else 0)
        b = min(hi, 10 ** digits - 1) if hi is not None else 10 ** digits - 1
        if a > b:
            continue
        if hi is None and digits > len(str(lo)):
            parts.append(f"[1-9] [0-9]{{{digits - 1},{MAX_DIGITS - 1}}}")
            break
        parts.append(_same_length(str(a), str(b)))
    return " | ".join(f"({p})" for p in parts)


def integer_range(lo: int | None, hi: int | None) -> str:
    if lo is not None and lo >= 0:
        return natural_range(lo, hi)
    if hi is not None and hi < 0:
        return f'"-" ({natural_range(-hi, None if lo is None else -lo)})'
    negative = f'"-" ({natural_range(1, None if lo is None else -lo)})'
    return f"{negative} | {natural_range(0, hi)}"


# -- decimals ------------------------------------------------------------------------------------
# A number between two bounds, written as JSON writes it without an exponent: `-`? integer part,
# then `.` and digits or nothing. Compared with a bound digit by digit: the integer part first,
# then the fraction, where a fraction that runs out compares as if it went on with zeros.

Bound = tuple[Decimal, bool]  # the value, and whether it is allowed itself (inclusive)


def decimal_range(low: Bound | None, high: Bound | None) -> str | None:
    """GBNF for the decimal numbers within the bounds (None: unbounded); None if there are none."""
    if low is not None and high is not None and (low[0] > high[0] or low[0] == high[0] and not (low[1] and high[1])):
        return None
    parts = []
    if high is None or high[0] >= 0:  # zero and up
        a = (Decimal(0), True) if low is None or low[0] < 0 else low
        body = _nonnegative(a, high)
        if body:
            parts.append(body)
    if low is None or low[0] < 0:  # below zero: "-" y with y > 0
        up = None if low is None else (-low[0], low[1])
        down = (Decimal(0), False) if high is None or high[0] >= 0 else (-high[0], high[1])
        body = _nonnegative(down, up)
        if body:
            parts.append(f'"-" ( {body} )')
    return " | ".join(f"( {p} )" for p in parts) if parts else None


def _split(value: Decimal) -> tuple[int, str]:
    """The integer part and the fraction's digits (no trailing zeros) of a value >= 0."""
    whole = int(value)
    text = format(value - whole, "f")
    return whole, text.split(".")[1].rstrip("0") if "." in text else ""


def _nonnegative(low: Bound, high: Bound | None) -> str | None:
    if high is not None and (low[0] > high[0] or low[0] == high[0] and not (low[1] and high[1])):
        return None
    a, fa = _split(low[0])
    sa = not low[1]
    if high is not None:
        b, fb = _split(high[0])
        sb = not high[1]
        if a == b:
            bare = fa == "" and not sa and (fb != "" or not sb)
            return _number(str(a), _between(fa, fb, sa, sb, True), bare)
    parts = [_number(str(a), _ge(fa, sa, True), fa == "" and not sa)]
    if high is None:
        parts.append(f"({natural_range(a + 1, None)}) fraction?")
    else:
        if b - 1 >= a + 1:
            parts.append(f"({natural_range(a + 1, b - 1)}) fraction?")
        parts.append(_number(str(b), _le(fb, sb, True), fb != "" or not sb))
    parts = [p for p in parts if p]
    return " | ".join(f"( {p} )" for p in parts) if parts else None


def _number(whole: str, digits: str | None, bare: bool) -> str | None:
    """The integer part, then `.` and one of `digits` (None: none), or nothing if `bare`."""
    if digits is None:
        return f'"{whole}"' if bare else None
    return f'"{whole}" ( "." ( {digits} ) )' + ("?" if bare else "")


# Digit strings R (after the point) compared with a bound's digits f (no trailing zeros): 0.R
# against 0.f. `need`: R has one digit at least. None: no string at all.

def _ge(f: str, strict: bool, need: bool) -> str | None:
    if not f:
        return '"0"{0,39} [1-9] digits' if strict else "[0-9] digits" if need else "digits"
    d = int(f[0])
    options = [f"[{d + 1}-9] digits"] if d < 9 else []
    options.append(_then(str(d), _ge(f[1:], strict, False)))
    return _choice(options)


def _le(f: str, strict: bool, need: bool) -> str | None:
    if not f:
        return None if strict else "zeros" if need else "zeros?"
    d = int(f[0])
    options = [] if need else ['""']
    if d > 0:
        options.append(f"[0-{d - 1}] digits")
    options.append(_then(str(d), _le(f[1:], strict, False)))
    return _choice(options)


def _between(fa: str, fb: str, sa: bool, sb: bool, need: bool) -> str | None:
    if not fa and not fb:
        return None if sa or sb else "zeros" if need else "zeros?"
    options = []
    if not need and not fa and not sa:  # nothing more: 0.fa <= 0 holds, and 0 < 0.fb since fb is not empty
        options.append('""')
    a0, b0 = int(fa[0]) if fa else 0, int(fb[0]) if fb else 0
    for d in range(a0, b0 + 1):
        low_done, high_done = d > a0, d < b0
        if low_done and high_done:
            rest: str | None = "digits"
        elif low_done:
            rest = _le(fb[1:], sb, False)
        elif high_done:
            rest = _ge(fa[1:], sa, False)
        else:
            rest = _between(fa[1:], fb[1:], sa, sb, False)
        options.append(_then(str(d), rest))
    return _choice(options)


def _then(digit: str, rest: str | None) -> str | None:
    if rest is None:
        return None
    return f'"{digit}"' if rest == '""' else f'"{digit}" ( {rest} )'


def _choice(options: list[str | None]) -> str | None:
    kept = [o for o in options if o is not None]
    return " | ".join(kept) if kept else None


def multiples(step: int) -> str | None:
    """GBNF for the non-negative integers divisible by `step` (a small whole number), read digit
    by digit keeping the remainder; the rules come back as one body using rules named
    `mod{step}-{r}` (see multiple_rules)."""
    return None if step < 1 else f'"0" | {_first(step)}'


def _first(step: int) -> str:
    by_state: dict[int, list[int]] = {}
    for d in range(1, 10):
        by_state.setdefault(d % step, []).append(d)
    return " | ".join(f"{_digits(ds)} mod{step}-{r}" for r, ds in sorted(by_state.items()))


def multiple_rules(step: int) -> dict[str, str]:
    rules = {}
    for r in range(step):
        by_state: dict[int, list[int]] = {}
        for d in range(10):
            by_state.setdefault((10 * r + d) % step, []).append(d)
        options = [f"{_digits(ds)} mod{step}-{t}" for t, ds in sorted(by_state.items())]
        if r == 0:
            options.append('""')
        rules[f"mod{step}-{r}"] = " | ".join(options)
    return rules


def _digits(ds: list[int]) -> str:
    if len(ds) == 1:
        return f'"{ds[0]}"'
    if ds == list(range(ds[0], ds[-1] + 1)):
        return f"[{ds[0]}-{ds[-1]}]"
    return "[" + "".join(str(d) for d in ds) + "]"
