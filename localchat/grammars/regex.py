"""JSON Schema `pattern` (an ECMAScript regular expression) as GBNF over the characters of a
JSON string.

The regex is parsed into a small tree, then written out. A string the grammar allows matches
the whole pattern, which is stricter than the pattern's "somewhere in the string" and so still
valid. Features outside the subset (lookaround, backreferences, word boundaries, flags) raise
`Unsupported`, and the caller enforces less (and says so); a pattern that is not a regular
expression at all raises `PatternError`."""

from __future__ import annotations

import re
from collections.abc import Callable

from . import charsets as cs
from .gbnf import literal
from .dfa import ANY_CHAR, dfa_rules
from .regex_parse import _EMPTY, MAX_REPEAT, Node, PatternError, Unsupported, _Parser

Rules = tuple[Callable[[str], str], Callable[[], str], Callable[[str, str], None]]  # add, reserve, fill

__all__ = ["MAX_REPEAT", "PatternError", "Unsupported", "class_run", "compile_pattern", "pattern_to_gbnf",
           "search_pattern"]


def pattern_to_gbnf(pattern: str) -> str | None:
    """GBNF for strings matching `pattern` (the text between the quotes); None if the pattern
    uses an unsupported feature. Raises PatternError if it is not a regular expression."""
    try:
        return compile_pattern(pattern)
    except Unsupported:
        return None


def compile_pattern(pattern: str) -> str:
    try:
        tree = _Parser(pattern).parse()
        tree = _anchored(tree, True, True)
    except PatternError as exc:
        if _python_accepts(pattern):  # a dialect difference, not a broken pattern
            raise Unsupported(str(exc)) from None
        raise
    except Unsupported:
        if not _python_accepts(pattern):
            raise PatternError(_python_error(pattern)) from None
        raise
    body = _emit(tree)
    if nesting(body) > 48:  # GBNF groups nest at most 64 deep (gbnf.MAX_DEPTH)
        raise Unsupported("groups nested too deeply")
    return body or '""'


def search_pattern(pattern: str, rules: Rules | None = None) -> str:
    """GBNF for the strings in which `pattern` matches somewhere (JSON Schema's reading: only
    `^` and `$` tie it to the start or the end), as the text between the quotes. With `rules`
    (add, reserve, fill: the converter's) it is written as a deterministic automaton where one
    is small enough (dfa.py), so that llama.cpp reads each character one way."""
    try:
        tree = _Parser(pattern).parse()
    except PatternError:
        if _python_accepts(pattern):
            raise Unsupported("a dialect difference") from None
        raise
    except Unsupported:
        if not _python_accepts(pattern):
            raise PatternError(_python_error(pattern)) from None
        raise
    options = tree[1] if tree[0] == "alt" else (tree,)
    bodies, searched = [], []
    anything = ("rep", ("set", ANY_CHAR), 0, None)
    for option in options:
        items = option[1] if option[0] == "seq" else (option,)
        start = bool(items) and items[0] == ("bol",)
        end = bool(items) and items[-1] == ("eol",)
        node = _anchored(option, start, end)
        if nullable(node) and not (start and end):
            return "char*"  # it matches (nothing) in every string
        body = _emit(node) or '""'
        bodies.append(" ".join(p for p in ("" if start else "char*", body, "" if end else "char*") if p))
        searched.append(("seq", tuple(p for p in ((None if start else anything), node, (None if end else anything))
                                      if p is not None)))
    if rules is not None:
        made = dfa_rules([("alt", tuple(searched))], *rules)
        if made is not None:
            return made
    body = bodies[0] if len(bodies) == 1 else "( " + " | ".join(bodies) + " )"
    if nesting(body) > 48:
        raise Unsupported("groups nested too deeply")
    return body


_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|[()]')


def nesting(body: str) -> int:
    """How deeply the groups of a GBNF body nest (literals and classes skipped)."""
    depth = deepest = 0
    for m in _TOKEN.finditer(body):
        if m.group() == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif m.group() == ")":
            depth -= 1
    return deepest


def class_run(pattern: str) -> tuple[str, int, int | None] | None:
    """(GBNF for one character, least, most) when the pattern is one class repeated (`^[a-z]+$`)."""
    try:
        tree = _Parser(pattern).parse()
        if tree[0] != "seq" or len(tree[1]) < 2 or tree[1][0] != ("bol",) or tree[1][-1] != ("eol",):
            return None  # not tied to both ends: it matches inside longer strings too
        tree = _anchored(tree, True, True)
    except (PatternError, Unsupported):
        return None
    if tree[0] == "seq":
        items = [n for n in tree[1] if n != _EMPTY]
        tree = items[0] if len(items) == 1 else tree
    if tree[0] != "rep" or tree[1][0] != "set" or (one := cs.to_gbnf(tree[1][1])) is None:
        return None
    return one, tree[2], tree[3]


def _python_accepts(pattern: str) -> bool:
    return _python_error(pattern) == ""


def _python_error(pattern: str) -> str:
    """Python's complaint about `pattern` once the ECMAScript-only syntax is rewritten ('' if none)."""
    p = re.sub(r"\(\?<(?![=!])", "(?P<", pattern)
    p = re.sub(r"\\[pP]\{[A-Za-z_=]+\}|\\u\{[0-9a-fA-F]+\}|\\c[A-Za-z]", "x", p).replace("[^]", "[\\s\\S]")
    try:
        re.compile(p)
        return ""
    except (re.error, RecursionError, OverflowError) as exc:
        return str(exc)


# -- anchors and writing out ----------------------------------------------------------------------

def _anchored(node: Node, start: bool, end: bool) -> Node:
    """The tree with `^` and `$` removed where they hold for a whole-string match; elsewhere
    (`a^b`, `(^a)*`) they are not supported."""
    kind = node[0]
    if kind == "bol" and start or kind == "eol" and end:
        return _EMPTY
    if kind in ("bol", "eol"):
        raise Unsupported("an anchor inside the pattern")
    if kind == "alt":
        return ("alt", tuple(_anchored(n, start, end) for n in node[1]))
    if kind == "seq":
        items = node[1]
        return ("seq", tuple(_anchored(n, start and i == 0, end and i == len(items) - 1) for i, n in enumerate(items)))
    if kind == "rep":
        return ("rep", _anchored(node[1], False, False), node[2], node[3])
    return node


def nullable(node: Node) -> bool:
    kind = node[0]
    if kind == "lit":
        return node[1] == ""
    if kind == "set":
        return False
    if kind == "seq":
        return all(nullable(n) for n in node[1])
    if kind == "alt":
        return any(nullable(n) for n in node[1])
    return node[2] == 0 or nullable(node[1])  # rep


def _nonempty(node: Node) -> Node | None:
    """The node without the empty string (None if that leaves nothing): a loop over a part that
    can match nothing (`(a*)*`) would be left-recursive in GBNF."""
    if not nullable(node):
        return node
    kind = node[0]
    if kind == "lit":
        return None
    if kind == "alt":
        options = [o for o in (_nonempty(n) for n in node[1]) if o is not None]
        return None if not options else options[0] if len(options) == 1 else ("alt", tuple(options))
    if kind == "seq":  # the first part that is not empty, then the rest as they are
        items, options = node[1], []
        for i, item in enumerate(items):
            first = _nonempty(item)
            if first is not None:
                options.append(("seq", (first, *items[i + 1:])))
        return None if not options else options[0] if len(options) == 1 else ("alt", tuple(options))
    inner, hi = node[1], node[3]  # rep
    first = _nonempty(inner)
    if first is None or hi == 1:
        return first
    return ("seq", (first, ("rep", inner, 0, None if hi is None else hi - 1)))


def _emit(node: Node) -> str:
    kind = node[0]
    if kind == "lit":
        return literal("".join(cs.json_char(ord(c)) for c in node[1])) if node[1] else ""
    if kind == "set":
        body = cs.to_gbnf(node[1])
        if body is None:
            raise Unsupported("a class that matches no character a JSON string can hold")
        return body
    if kind == "seq":  # runs of single characters as one literal
        parts: list[Node] = []
        for n in node[1]:
            if n[0] == "lit" and parts and parts[-1][0] == "lit":
                parts[-1] = ("lit", parts[-1][1] + n[1])
            else:
                parts.append(n)
        return " ".join(p for p in (_emit(n) for n in parts) if p)
    if kind == "alt":
        return "( " + " | ".join(_emit(n) or '""' for n in node[1]) + " )"
    inner, lo, hi = node[1], node[2], node[3]
    if hi == 0:
        return ""
    while inner[0] == "rep" and inner[3] is None and hi is None and inner[2] <= 1:
        # (x*)*, (x+)*, (x+)+ and (x*)+ are x* or x+: nested loops make llama.cpp's stacks grow
        # exponentially with the length of a run
        inner, lo = inner[1], 0 if lo == 0 or inner[2] == 0 else 1
    if inner[0] == "seq" and len(inner[1]) == 1:
        return _emit(("rep", inner[1][0], lo, hi))
    if nullable(inner):  # x{lo,hi} over a nullable x is (x without "") {0,hi}
        inner, lo = _nonempty(inner), 0
        if inner is None:
            return ""
    body = _emit(inner)
    if not _single(body):
        body = f"( {body} )"
    if (lo, hi) == (0, None):
        return f"{body}*"
    if (lo, hi) == (1, None):
        return f"{body}+"
    if (lo, hi) == (0, 1):
        return f"{body}?"
    if lo == hi:
        return body if lo == 1 else f"{body}{{{lo}}}"
    return f"{body}{{{lo},{'' if hi is None else hi}}}"


def _single(body: str) -> bool:
    """One GBNF item: a literal, a class or a group, to which a repetition applies as a whole."""
    return bool(re.fullmatch(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|\((?:[^()"]|"(?:\\.|[^"\\])*")*\)', body))
