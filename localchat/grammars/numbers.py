"""Integer ranges as GBNF: the digit strings between two bounds, exactly."""

from __future__ import annotations

MAX_DIGITS = 16


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
