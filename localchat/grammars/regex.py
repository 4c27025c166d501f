"""A practical subset of regular expressions (JSON Schema `pattern`) as GBNF over the
characters of a JSON string. Anything outside the subset (lookaround, backreferences) returns
None, and the caller falls back to a plain string."""

from __future__ import annotations

from .gbnf import literal

PLAIN = r'[^"\\\x7F\x00-\x1F]'  # one unescaped JSON string character
_CLASSES = {"d": "0-9", "w": "a-zA-Z0-9_", "s": " "}


class _Unsupported(Exception):
    pass


def pattern_to_gbnf(pattern: str) -> str | None:
    p = pattern
    if p.startswith("^"):
        p = p[1:]
    if p.endswith("$") and not p.endswith("\\$"):
        p = p[:-1]
    try:
        body, end = _alternation(p, 0)
        if end != len(p):
            raise _Unsupported
        return body
    except (_Unsupported, IndexError):
        return None


def _alternation(p: str, i: int) -> tuple[str, int]:
    options = []
    seq, i = _sequence(p, i)
    options.append(seq)
    while i < len(p) and p[i] == "|":
        seq, i = _sequence(p, i + 1)
        options.append(seq)
    return (" | ".join(f"({o})" if o else '""' for o in options) if len(options) > 1 else options[0] or '""'), i


def _sequence(p: str, i: int) -> tuple[str, int]:
    items = []
    while i < len(p) and p[i] not in "|)":
        atom, i = _atom(p, i)
        if i < len(p) and p[i] in "*+?{":
            atom, i = _quantify(p, i, atom)
        items.append(atom)
    return " ".join(items), i


def _atom(p: str, i: int) -> tuple[str, int]:
    c = p[i]
    if c == "(":
        if p.startswith("(?:", i):
            i += 3
        elif p.startswith("(?P<", i):
            i = p.index(">", i) + 1
        elif p.startswith("(?", i):
            raise _Unsupported
        else:
            i += 1
        inner, i = _alternation(p, i)
        if p[i] != ")":
            raise _Unsupported
        return f"({inner})", i + 1
    if c == "[":
        return _class(p, i)
    if c == ".":
        return PLAIN, i + 1
    if c == "\\":
        e = p[i + 1]
        if e in _CLASSES:
            return f"[{_CLASSES[e]}]", i + 2
        if e in "DWS":
            return f'[^"\\\\\\x7F\\x00-\\x1F{_CLASSES[e.lower()]}]', i + 2
        if e.isdigit() or e in "bBAzZ":
            raise _Unsupported
        return _char(e), i + 2
    if c in "*+?{":
        raise _Unsupported
    return _char(c), i + 1


def _char(c: str) -> str:
    """A literal character as it appears inside a JSON string."""
    if c == '"':
        return literal('\\"')
    if c == "\\":
        return literal("\\\\")
    if ord(c) < 0x20 or c == "\x7f":
        raise _Unsupported
    return literal(c)


def _class(p: str, i: int) -> tuple[str, int]:
    i += 1
    negate = p[i] == "^"
    if negate:
        i += 1
    parts = []
    first = True
    while p[i] != "]" or first:
        first = False
        c = p[i]
        if c == "\\":
            e = p[i + 1]
            if e in _CLASSES:
                parts.append(_CLASSES[e])
                i += 2
                continue
            if e in "DWSbB":
                raise _Unsupported
            c, i = e, i + 2
        else:
            i += 1
        if p[i] == "-" and p[i + 1] != "]":
            hi = p[i + 1]
            if hi == "\\":
                hi, i = p[i + 2], i + 3
            else:
                i += 2
            parts.append(f"{_class_char(c)}-{_class_char(hi)}")
        else:
            parts.append(_class_char(c))
    body = "".join(parts)
    if negate:  # never a raw quote, backslash or control character inside a JSON string
        return f'[^"\\\\\\x7F\\x00-\\x1F{body}]', i + 1
    safe = body.replace('\\"', "").replace("\\\\", "")
    if not safe:
        raise _Unsupported
    return f"[{safe}]", i + 1


def _class_char(c: str) -> str:
    if c in '"\\':
        return ""  # a quote or backslash would need JSON escaping: left out (stricter)
    if c in "[]^-":
        return "\\" + c if c in "[]" else c
    if ord(c) < 0x20:
        raise _Unsupported
    return c


def _quantify(p: str, i: int, atom: str) -> tuple[str, int]:
    c = p[i]
    if c in "*+?":
        i += 1
        if i < len(p) and p[i] == "?":
            i += 1  # lazy: same language
        return f"({atom}){c}", i
    end = p.index("}", i)
    spec = p[i + 1:end]
    low, _, high = spec.partition(",")
    if not low.isdigit() or (high and not high.isdigit()):
        raise _Unsupported
    if int(low) > 2000 or (high and int(high) > 2000):
        raise _Unsupported
    rep = f"{{{low}}}" if "," not in spec else f"{{{low},{high}}}"
    i = end + 1
    if i < len(p) and p[i] == "?":
        i += 1
    return f"({atom}){rep}", i
