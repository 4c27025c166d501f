"""GBNF checked in Python before llama.cpp sees it.

llama-cpp-python 0.3.36 crashes the whole process on a grammar llama.cpp rejects, so this
parser follows llama.cpp's own (llama-grammar.cpp) rule for rule: the same syntax, the same
expansion of repetitions, the same undefined-rule and left-recursion checks. It is stricter
where that is cheaper (no token references) and bounds size, so a pathological grammar is a
clear error instead of a hang."""

from __future__ import annotations

import re

from ..errors import GrammarError

MAX_BYTES = 1024 * 1024  # the default; a server's `max_grammar_bytes` setting overrides it
MAX_REPETITION = 2000  # llama.cpp's own threshold
MAX_RULES = 20_000
MAX_DEPTH = 64

_HEX = {"x": 2, "u": 4, "U": 8}
_ESC = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]"}

# A rule is a list of alternatives; an alternative a list of elements: ("ref", id) or ("chars", …).


class _Parser:
    def __init__(self, src: str) -> None:
        self.src = src
        self.ids: dict[str, int] = {}
        self.rules: dict[int, list[list[tuple]]] = {}
        self.depth = 0

    def fail(self, what: str, pos: int) -> GrammarError:
        line = self.src.count("\n", 0, pos) + 1
        near = self.src[pos:pos + 20].split("\n")[0]
        return GrammarError(f"invalid grammar: {what} at line {line} near {near!r}", param="grammar")

    def symbol(self, name: str) -> int:
        return self.ids.setdefault(name, len(self.ids))

    def fresh(self, base: str) -> int:
        rid = len(self.ids)
        self.ids[f"{base}_{rid}"] = rid
        if rid > MAX_RULES:
            raise GrammarError(f"grammar too large: more than {MAX_RULES} rules once repetitions expand", param="grammar")
        return rid

    def space(self, pos: int, newline_ok: bool) -> int:
        s = self.src
        while pos < len(s) and (s[pos] in " \t#" or (newline_ok and s[pos] in "\r\n")):
            if s[pos] == "#":
                while pos < len(s) and s[pos] not in "\r\n":
                    pos += 1
            else:
                pos += 1
        return pos

    def name(self, pos: int) -> int:
        m = re.compile(r"[a-zA-Z0-9-]+").match(self.src, pos)
        if not m:
            raise self.fail("expecting a name", pos)
        return m.end()

    def char(self, pos: int) -> int:
        s = self.src
        if pos >= len(s):
            raise self.fail("unexpected end of input", pos)
        if s[pos] != "\\":
            return pos + 1
        esc = s[pos + 1:pos + 2]
        if esc in _HEX:
            digits = s[pos + 2:pos + 2 + _HEX[esc]]
            if len(digits) != _HEX[esc] or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise self.fail(f"expecting {_HEX[esc]} hex digits", pos)
            return pos + 2 + _HEX[esc]
        if esc not in _ESC:
            raise self.fail("unknown escape", pos)
        return pos + 2

    def alternates(self, pos: int, rule: str, rid: int, nested: bool) -> int:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"groups nested more than {MAX_DEPTH} deep", pos)
        alts: list[list[tuple]] = []
        seq: list[tuple] = []
        pos = self.sequence(pos, rule, seq, nested)
        alts.append(seq)
        while pos < len(self.src) and self.src[pos] == "|":
            pos = self.space(pos + 1, True)
            seq = []
            pos = self.sequence(pos, rule, seq, nested)
            alts.append(seq)
        self.rules[rid] = alts
        self.depth -= 1
        return pos

    def sequence(self, pos: int, rule: str, seq: list[tuple], nested: bool) -> int:
        s = self.src
        last = len(seq)
        while pos < len(s):
            c = s[pos]
            if c == '"':
                pos += 1
                last = len(seq)
                while pos >= len(s) or s[pos] != '"':
                    pos = self.char(pos)
                    seq.append(("chars",))
                pos = self.space(pos + 1, nested)
            elif c == "[":
                pos += 1
                if pos < len(s) and s[pos] == "^":
                    pos += 1
                last = len(seq)
                if s[pos:pos + 1] != "]":  # llama.cpp emits nothing for an empty class
                    seq.append(("chars",))
                while pos >= len(s) or s[pos] != "]":
                    pos = self.char(pos)
                    if s[pos:pos + 1] == "-" and s[pos + 1:pos + 2] != "]":
                        if pos + 1 >= len(s):
                            raise self.fail("unexpected end of input", pos)
                        pos = self.char(pos + 1)
                pos = self.space(pos + 1, nested)
            elif re.match(r"[a-zA-Z0-9-]", c):
                end = self.name(pos)
                last = len(seq)
                seq.append(("ref", self.symbol(s[pos:end])))
                pos = self.space(end, nested)
            elif c == "(":
                sub = self.fresh(rule)
                pos = self.alternates(self.space(pos + 1, True), rule, sub, True)
                last = len(seq)
                seq.append(("ref", sub))
                if pos >= len(s) or s[pos] != ")":
                    raise self.fail("expecting ')'", pos)
                pos = self.space(pos + 1, nested)
            elif c == ".":
                last = len(seq)
                seq.append(("chars",))
                pos = self.space(pos + 1, nested)
            elif c in "*+?":
                pos = self.space(pos + 1, nested)
                self.repeat(seq, last, rule, *{"*": (0, -1), "+": (1, -1), "?": (0, 1)}[c], pos)
            elif c == "{":
                pos = self.space(pos + 1, nested)
                m = re.compile(r"\d+").match(s, pos)
                if not m:
                    raise self.fail("expecting an integer", pos)
                low, high = int(m.group()), -1
                pos = self.space(m.end(), nested)
                if s[pos:pos + 1] == "}":
                    high = low
                elif s[pos:pos + 1] == ",":
                    pos = self.space(pos + 1, nested)
                    m = re.compile(r"\d+").match(s, pos)
                    if m:
                        high = int(m.group())
                        pos = self.space(m.end(), nested)
                    if s[pos:pos + 1] != "}":
                        raise self.fail("expecting '}'", pos)
                else:
                    raise self.fail("expecting ','", pos)
                pos = self.space(pos + 1, nested)
                self.repeat(seq, last, rule, low, high, pos)
            else:
                break
        return pos

    def repeat(self, seq: list[tuple], last: int, rule: str, low: int, high: int, pos: int) -> None:
        """S{m,n}: as llama.cpp rewrites it (m copies of S, then n-m nested optional rules)."""
        if last == len(seq):
            raise self.fail("expecting an item before */+/?/{", pos)
        if max(low, high) > MAX_REPETITION or (high != -1 and high < low):
            raise self.fail(f"repetition bounds must be ordered and at most {MAX_REPETITION}", pos)
        prev = seq[last:]
        if low == 0:
            del seq[last:]
        else:
            seq.extend(prev * (low - 1))
        n_opt = 1 if high < 0 else high - low
        last_rec = 0
        for i in range(n_opt):
            rid = self.fresh(rule)
            body = list(prev)
            if i > 0 or high < 0:
                body.append(("ref", rid if high < 0 else last_rec))
            self.rules[rid] = [body, []]
            last_rec = rid
        if n_opt > 0:
            seq.append(("ref", last_rec))

    def parse(self) -> None:
        s = self.src
        pos = self.space(0, True)
        while pos < len(s):
            end = self.name(pos)
            name = s[pos:end]
            rid = self.symbol(name)
            pos = self.space(end, False)
            if s[pos:pos + 3] != "::=":
                raise self.fail("expecting ::=", pos)
            pos = self.alternates(self.space(pos + 3, True), name, rid, False)
            if s[pos:pos + 2] == "\r\n":
                pos += 2
            elif pos < len(s) and s[pos] in "\r\n":
                pos += 1
            elif pos < len(s):
                raise self.fail("expecting newline or end", pos)
            pos = self.space(pos, True)


def validate(grammar: str, root: str = "root", max_bytes: int = MAX_BYTES) -> None:
    """Raise GrammarError unless llama.cpp would accept `grammar` with start rule `root`."""
    try:  # (a character is at least one byte: a string that long need not be encoded)
        size = len(grammar) if len(grammar) > max_bytes else len(grammar.encode("utf-8"))
    except UnicodeEncodeError as exc:  # a lone surrogate from JSON's "\ud800": llama.cpp gets UTF-8
        raise GrammarError(f"invalid grammar: {grammar[exc.start]!r} at character {exc.start} is a lone surrogate, "
                           "not a character", param="grammar") from None
    if size > max_bytes:
        raise GrammarError(f"grammar too large: more than {max_bytes} bytes (max_grammar_bytes)", param="grammar")
    if "\x00" in grammar:
        raise GrammarError("invalid grammar: NUL character", param="grammar")
    p = _Parser(grammar)
    p.parse()
    names = {rid: name for name, rid in p.ids.items()}
    for rid, name in names.items():
        if rid not in p.rules:
            raise GrammarError(f"invalid grammar: rule {name!r} is used but never defined", param="grammar")
    if root not in p.ids:
        raise GrammarError(f"invalid grammar: no {root!r} rule", param="grammar")
    _check_left_recursion(p.rules, names)


def _check_left_recursion(rules: dict[int, list[list[tuple]]], names: dict[int, str]) -> None:
    nullable: set[int] = set()
    changed = True
    while changed:  # a rule may produce "" if one alternative is all nullable refs
        changed = False
        for rid, alts in rules.items():
            if rid not in nullable and any(all(e[0] == "ref" and e[1] in nullable for e in alt) for alt in alts):
                nullable.add(rid)
                changed = True
    # edges: rule -> rules it may start with
    first: dict[int, set[int]] = {}
    for rid, alts in rules.items():
        edges = first.setdefault(rid, set())
        for alt in alts:
            for e in alt:
                if e[0] != "ref":
                    break
                edges.add(e[1])
                if e[1] not in nullable:
                    break
    state: dict[int, int] = {}  # 1 = on the path, 2 = done
    for start in rules:
        if state.get(start):
            continue
        stack = [(start, iter(first[start]))]
        state[start] = 1
        while stack:
            rid, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[rid] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                raise GrammarError(f"invalid grammar: left recursion through rule {names.get(nxt, nxt)!r}",
                                   param="grammar")
            elif not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, iter(first[nxt])))


def literal(text: str) -> str:
    """A GBNF string literal matching `text` exactly."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ch in "[]" or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02X}" if ord(ch) < 0x100 else ch)
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'
