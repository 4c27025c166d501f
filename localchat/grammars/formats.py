"""The string formats of grammars/formats.gbnf as Python regular expressions, so that the checker
of completed values (check.py) holds a `format` exactly as the grammar does, and holds what the
grammar cannot (a host name's length, an ECMAScript regex, an IDNA host name) on top.

The GBNF rules there are regular (no rule reaches itself), so each is written out as one regex
over the text between a JSON string's quotes; a decoded string is matched in the form a JSON
writer gives it (json.dumps)."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from jsonschema import FormatChecker

from . import library
from .scalars import STRING_FORMATS

_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|\{\d+(?:,\d*)?\}|[a-zA-Z0-9-]+|[()|*+?]|\s+')
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "[": "[", "]": "]"}
MAX_HOSTNAME = 253


def _unescape(text: str, i: int) -> tuple[str, int]:
    """The character a GBNF escape at text[i] (just past the backslash) stands for, and where it ends."""
    c = text[i]
    if c in "xuU":
        n = {"x": 2, "u": 4, "U": 8}[c]
        return chr(int(text[i + 1:i + 1 + n], 16)), i + 1 + n
    return _ESCAPES.get(c, c), i + 1


def _literal(token: str) -> str:
    body, out, i = token[1:-1], [], 0
    while i < len(body):
        if body[i] == "\\":
            ch, i = _unescape(body, i + 1)
        else:
            ch, i = body[i], i + 1
        out.append(re.escape(ch))
    return "".join(out)


def _class(token: str) -> str:
    body, i = token[1:-1], 0
    negated = body.startswith("^")
    i = 1 if negated else 0
    parts = []
    while i < len(body):
        lo, i = _read(body, i)
        hi = lo
        if i + 1 < len(body) and body[i] == "-":
            hi, i = _read(body, i + 1)
        parts.append(_class_char(lo) + ("" if hi == lo else "-" + _class_char(hi)))
    return "[" + ("^" if negated else "") + "".join(parts) + "]"


def _read(body: str, i: int) -> tuple[str, int]:
    return _unescape(body, i + 1) if body[i] == "\\" else (body[i], i + 1)


def _class_char(ch: str) -> str:
    return ch if ch.isalnum() and ord(ch) < 0x7F else f"\\U{ord(ch):08x}"


def to_regex(name: str, rules: dict[str, str], depth: int = 0) -> str:
    """A regex for library rule `name` (rules it uses written in place)."""
    if depth > 40:
        raise ValueError(f"the rule {name} reaches itself")
    out = []
    for token in _TOKEN.findall(rules[name]):
        if token.isspace():
            continue
        if token.startswith('"'):
            out.append(f"(?:{_literal(token)})")
        elif token.startswith("["):
            out.append(_class(token))
        elif token.startswith("{") or token in "()|*+?":
            out.append("(?:" if token == "(" else token)
        else:
            out.append(f"(?:{to_regex(token, rules, depth + 1)})")
    return "".join(out)


@lru_cache(maxsize=None)
def pattern(fmt: str) -> re.Pattern[str]:
    return re.compile(to_regex(fmt, library.rules()), re.DOTALL)


def holds(fmt: str, value: str) -> bool:
    """Whether a string is of this format, as the grammar writes it (and past what it holds)."""
    text = json.dumps(value, ensure_ascii=False)[1:-1]
    if fmt == "regex":
        try:
            re.compile(value)
            return True
        except (re.error, RecursionError, OverflowError):
            return False
    if not pattern(fmt).fullmatch(text):
        return False
    if fmt in ("hostname", "idn-hostname"):
        return len(value.rstrip(".")) <= MAX_HOSTNAME
    return True


def format_checker(base: FormatChecker) -> FormatChecker:
    """`base` (jsonschema's for the draft), with the formats of formats.gbnf held as the grammar
    holds them."""
    checker = FormatChecker(formats=())
    checker.checkers = dict(base.checkers)
    for fmt in STRING_FORMATS:
        if fmt == "idn-hostname" and fmt in base.checkers:
            continue  # IDNA's own rules (the idna package), stricter than the grammar's
        checker.checkers[fmt] = (_check(fmt), ())
    return checker


def _check(fmt: str):
    def check(value: Any) -> bool:
        return not isinstance(value, str) or holds(fmt, value)
    return check
