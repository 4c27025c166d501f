"""Sets of characters as sorted code point ranges, and as GBNF over the text of a JSON string.

A regular expression's classes (`[a-z]`, `\\d`, `.`, `[^,]`) become one compact GBNF class of
the characters a JSON string may hold as they are, plus the escapes (`\\"`, `\\\\`, `\\n`) of
the few it must escape."""

from __future__ import annotations


Ranges = tuple[tuple[int, int], ...]  # sorted, disjoint, inclusive

MAX = 0x10FFFF
# What a JSON string holds unescaped and UTF-8 can encode: no quote, backslash, control
# characters or surrogates.
_RAW: Ranges = ((0x20, 0x21), (0x23, 0x5B), (0x5D, 0xD7FF), (0xE000, MAX))
_ASCII: Ranges = ((0x20, 0x7E),)
DIGIT: Ranges = ((0x30, 0x39),)
WORD: Ranges = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
# ECMAScript's \s: JSON-escapable controls, the space, and Unicode's spaces and line breaks.
SPACE: Ranges = ((0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
                 (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF))
LINE_BREAKS: Ranges = ((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029))
_ESCAPES = {0x22: '\\"', 0x5C: "\\\\", 0x0A: "\\n", 0x09: "\\t", 0x0D: "\\r", 0x08: "\\b", 0x0C: "\\f"}


def normalize(ranges: list[tuple[int, int]] | Ranges) -> Ranges:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def union(*sets: Ranges) -> Ranges:
    return normalize([r for s in sets for r in s])


def complement(ranges: Ranges) -> Ranges:
    out, at = [], 0
    for lo, hi in normalize(ranges):
        if lo > at:
            out.append((at, lo - 1))
        at = hi + 1
    if at <= MAX:
        out.append((at, MAX))
    return tuple(out)


def intersect(a: Ranges, b: Ranges) -> Ranges:
    return complement(union(complement(a), complement(b)))


def ascii_only(ranges: Ranges) -> Ranges:
    """Python's `re` (which validators use) reads \\d, \\w and \\s as Unicode classes: a negated
    one is kept to ASCII so that its characters are outside them in every dialect."""
    return intersect(ranges, _ASCII)


def json_char(cp: int) -> str:
    """The text a JSON string holds for the character `cp`."""
    if cp in _ESCAPES:
        return _ESCAPES[cp]
    if cp < 0x20:
        return f"\\u{cp:04x}"
    return chr(cp)


def to_gbnf(ranges: Ranges) -> str | None:
    """GBNF for one character of `ranges` as written inside a JSON string; None if it holds none.
    A character JSON must escape is taken in each way a JSON writer escapes it (`\\n` and
    `\\u000a`, either case), a slash raw or as `\\/`."""
    raw = intersect(ranges, _RAW)
    inside = lambda cp: any(lo <= cp <= hi for lo, hi in ranges)  # noqa: E731
    parts = [_class(raw)] if raw else []
    named = "".join(c for cp, c in ((0x08, "b"), (0x09, "t"), (0x0A, "n"), (0x0C, "f"), (0x0D, "r"), (0x22, '"'),
                                    (0x5C, "\\\\"), (0x2F, "/")) if inside(cp))
    if named:
        parts.append(f'"\\\\" [{named}]')
    for high in (0, 1):
        lows = [cp & 0xF for cp in range(high * 16, high * 16 + 16) if inside(cp)]
        if lows:
            digits = "".join(sorted({f"{low:x}" for low in lows} | {f"{low:X}" for low in lows}))
            parts.append(f'"\\\\u00{high}" [{digits}]')
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else "( " + " | ".join(parts) + " )"


def _class(raw: Ranges) -> str:
    """The shorter of `[...]` and `[^...]` for a set within _RAW."""
    inside = "".join(_span(lo, hi) for lo, hi in raw)
    missing = intersect(complement(raw), ((0x20, 0xD7FF), (0xE000, MAX)))  # surrogates never occur
    outside = '"\\\\\\x00-\\x1F' + "".join(_span(lo, hi) for lo, hi in missing
                                         if (lo, hi) not in ((0x22, 0x22), (0x5C, 0x5C)))
    return f"[^{outside}]" if len(outside) < len(inside) else f"[{inside}]"


def _span(lo: int, hi: int) -> str:
    if lo == hi:
        return _one(lo)
    if hi == lo + 1:
        return _one(lo) + _one(hi)
    return f"{_one(lo)}-{_one(hi)}"


def _one(cp: int) -> str:
    if cp < 0x20 or cp >= 0x7F or chr(cp) in "\\]^-[":  # plain ASCII in the grammar's text
        return f"\\x{cp:02X}" if cp < 0x100 else f"\\u{cp:04X}" if cp < 0x10000 else f"\\U{cp:08X}"
    return chr(cp)
