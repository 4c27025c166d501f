"""Object keys: any JSON string except a few names (the keys an object lists, for its other
keys), as GBNF.

A key is compared by its characters, each written as a JSON writer writes it (raw, or the
short escape `\\n`, `\\"`); a key that spells a listed name with `\\u` escapes of ordinary
characters is taken as another key. The grammar is a trie of the names: at each point it
either follows a name, ends (where what was read is not a name), or takes any other character
and then any characters at all."""

from __future__ import annotations

from collections.abc import Callable

from .charsets import json_char
from .gbnf import literal

_MAX_GROUPS = 24  # groups written inside one rule before the rest of a name goes to a rule of its own


def string_not_in(names: set[str] | frozenset[str], add: Callable[[str], str]) -> str:
    """A rule body matching a JSON string (quotes included, no whitespace after) whose value is
    not one of `names`. `add(body)` makes a rule and returns its name."""
    rest = add('char* "\\""')
    if not names:
        return f'"\\"" {rest}'
    trie: dict = {}
    for name in names:
        node = trie
        for ch in name:
            node = node.setdefault(ch, {})
        node[""] = {}  # a name ends here
    return f'"\\"" {_node(trie, rest, add)}'


def _node(node: dict, rest: str, add: Callable[[str], str]) -> str:
    """After the characters that led to `node`: the rest of a key that is not a name."""
    children = {ch: sub for ch, sub in node.items() if ch}
    options = [] if "" in node else ['"\\""']  # ending here: a name ends here, or it is no name
    for ch, sub in sorted(children.items()):
        inner = _node(sub, rest, add)
        if inner.count("(") > _MAX_GROUPS:  # GBNF groups nest at most 64 deep: a rule of its own
            inner = add(inner)
        options.append(f"{literal(json_char(ord(ch)))} {inner}")
    options.append(add(f"{_other(set(children))} {rest}"))  # (one rule per set of characters: shared)
    return "( " + " | ".join(options) + " )" if len(options) > 1 else options[0]


def _other(taken: set[str]) -> str:
    """One character of a JSON string other than those in `taken` (as written there)."""
    raw = sorted(c for c in taken if json_char(ord(c)) == c)
    escaped = {json_char(ord(c)) for c in taken} - set(raw)
    excluded = "".join(_class_char(c) for c in raw)
    parts = [f'[^"\\\\\\x00-\\x1F{excluded}]']
    if not escaped:
        return f"( {parts[0]} | escape )" if excluded else "char"
    simple = [e[1] for e in ('\\"', "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t") if e not in escaped]
    if simple:
        parts.append('"\\\\" [' + "".join("\\\\" if c == "\\" else c for c in simple) + "]")
    parts.append('"\\\\u" [0-9a-fA-F]{4}')
    return "( " + " | ".join(parts) + " )"


def _class_char(c: str) -> str:
    cp = ord(c)
    if c in "\\]^-[" or cp < 0x20 or cp >= 0x7F:
        return f"\\x{cp:02X}" if cp < 0x100 else f"\\u{cp:04X}" if cp < 0x10000 else f"\\U{cp:08X}"
    return c
