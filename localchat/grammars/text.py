"""Grammar rules for raw text: any text that does not contain a given closing tag (the value
of an XML-style tool argument, a channel's message), and fixed texts with a call number or
id in them."""

from __future__ import annotations

import re

from .gbnf import literal


def _char(c: str) -> str:
    """A character inside a GBNF character class."""
    if c in "]\\^-[":
        return "\\" + c
    if c == "\n":
        return "\\n"
    if c == "\r":
        return "\\r"
    if c == "\t":
        return "\\t"
    return c


def excluding(closer: str, name: str, rules: dict[str, str]) -> str:
    """A rule (named `name`, with helpers `name-k`) for any text, empty included, in which
    `closer` does not occur: the states of a string matcher (KMP), one rule each."""
    n = len(closer)
    fail = [0] * n  # the longest proper border of closer[:k+1]
    for k in range(1, n):
        j = fail[k - 1]
        while j and closer[k] != closer[j]:
            j = fail[j - 1]
        fail[k] = j + 1 if closer[k] == closer[j] else 0

    def step(state: int, c: str) -> int:
        while state and closer[state] != c:
            state = fail[state - 1]
        return state + 1 if closer[state] == c else 0

    def state_name(k: int) -> str:
        return name if k == 0 else f"{name}-{k}"

    alphabet = sorted(set(closer))
    for k in range(n):
        moves: dict[int, list[str]] = {}
        for c in alphabet:
            if (target := step(k, c)) != 0:
                moves.setdefault(target, []).append(c)
        special = sorted(c for chars in moves.values() for c in chars)
        options = [f"[^{''.join(_char(c) for c in special)}] {state_name(0)}"]  # back to the start
        for target, chars in sorted(moves.items()):
            if target < n:  # (reaching n is the closer itself: not allowed)
                chars_rule = literal(chars[0]) if len(chars) == 1 else f"[{''.join(_char(c) for c in chars)}]"
                options.append(f"{chars_rule} {state_name(target)}")
        rules[state_name(k)] = f"( {' | '.join(options)} )?"
    return name


_PLACEHOLDERS = re.compile(r"(\{index\}|\{number\}|\{id\}|\{type\})")


def fixed(text: str) -> str:
    """GBNF for a syntax's fixed text: `{index}` is a call number, `{id}` a 9-character id."""
    parts = []
    for piece in _PLACEHOLDERS.split(text):
        if piece in ("{index}", "{number}"):
            parts.append("[0-9]{1,3}")
        elif piece == "{type}":  # a JSON value's type, not a string's
            parts.append('( "number" | "boolean" | "null" | "object" | "array" )')
        elif piece == "{id}":
            parts.append("[a-zA-Z0-9]{9}")
        elif piece:
            parts.append(literal(piece))
    return " ".join(parts)
