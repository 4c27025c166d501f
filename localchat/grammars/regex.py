"""JSON Schema `pattern` (an ECMAScript regular expression) as GBNF over the characters of a
JSON string.

The regex is parsed into a small tree, then written out. A string the grammar allows matches
the whole pattern, which is stricter than the pattern's "somewhere in the string" and so still
valid. Features outside the subset (lookaround, backreferences, word boundaries, flags) raise
`Unsupported`, and the caller enforces less (and says so); a pattern that is not a regular
expression at all raises `PatternError`."""

from __future__ import annotations

import re

from . import charsets as cs
from .gbnf import literal

MAX_REPEAT = 2000  # llama.cpp's own limit on x{m,n}
# Tree nodes: ("lit", text) ("set", ranges) ("seq", nodes) ("alt", nodes) ("rep", node, lo, hi|None)
# ("bol",) ("eol",)
Node = tuple
_EMPTY: Node = ("lit", "")
ANY: cs.Ranges = cs.complement(cs.LINE_BREAKS)
_CLASS_ESCAPES = {"d": cs.DIGIT, "w": cs.WORD, "s": cs.SPACE}
_CONTROL = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B, "0": 0x00}
_PROPERTIES = {"L": "a-zA-Z", "Letter": "a-zA-Z", "Lu": "A-Z", "Ll": "a-z", "N": "0-9", "Nd": "0-9"}


class PatternError(ValueError):
    """Not a regular expression (in ECMAScript or Python)."""


class Unsupported(Exception):
    """A regular expression using a feature this converter does not enforce."""


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
        tree = _anchored(_Parser(pattern).parse(), True, True)
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


class _Parser:
    def __init__(self, pattern: str) -> None:
        self.p = pattern
        self.i = 0

    def fail(self, what: str) -> PatternError:
        return PatternError(f"{what} at position {self.i}")

    def peek(self, n: int = 1) -> str:
        return self.p[self.i:self.i + n]

    def parse(self) -> Node:
        node = self.alternation(0)
        if self.i < len(self.p):
            raise self.fail("unbalanced parenthesis")
        return node

    def alternation(self, depth: int) -> Node:
        if depth > 30:
            raise Unsupported("groups nested too deeply")
        options = [self.sequence(depth)]
        while self.peek() == "|":
            self.i += 1
            options.append(self.sequence(depth))
        return options[0] if len(options) == 1 else ("alt", tuple(options))

    def sequence(self, depth: int) -> Node:
        items: list[Node] = []
        while self.i < len(self.p) and self.peek() not in "|)":
            atom = self.atom(depth)
            quantified = self.quantifier(atom)
            items.append(quantified)
        return items[0] if len(items) == 1 else ("seq", tuple(items))

    def atom(self, depth: int) -> Node:
        c = self.peek()
        if c in "*+?" or (c == "{" and self._bounds() is not None):
            raise self.fail("nothing to repeat")
        self.i += 1
        if c == "(":
            return self.group(depth)
        if c == "[":
            return ("set", self.char_class())
        if c == ".":
            return ("set", ANY)
        if c == "^":
            return ("bol",)
        if c == "$":
            return ("eol",)
        if c == "\\":
            return self.escape()
        return ("lit", c)

    def group(self, depth: int) -> Node:
        if self.peek(2) == "?:":
            self.i += 2
        elif self.peek(2) in ("?<", "?P") and not self.peek(3).endswith(("=", "!")):
            end = self.p.find(">", self.i)
            if end < 0 or not re.fullmatch(r"\??P?<[A-Za-z_][A-Za-z0-9_]*", self.p[self.i:end]):
                raise self.fail("bad group name")
            self.i = end + 1
        elif self.peek() == "?":
            raise Unsupported("lookaround or inline flags")
        inner = self.alternation(depth + 1)
        if self.peek() != ")":
            raise self.fail("missing )")
        self.i += 1
        return inner

    def quantifier(self, atom: Node) -> Node:
        c = self.peek()
        if c and c in "*+?":
            self.i += 1
            lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        elif c == "{" and (bounds := self._bounds()) is not None:
            lo, hi, self.i = bounds
            if hi is not None and hi < lo:
                raise self.fail("min repeat greater than max repeat")
        else:
            return atom
        if atom[0] in ("bol", "eol"):
            raise self.fail("nothing to repeat")
        if self.peek() == "?":
            self.i += 1  # lazy: the same strings
        if self.peek() and (self.peek() in "*+?" or (self.peek() == "{" and self._bounds() is not None)):
            raise Unsupported("a repeated repetition")  # possessive in Python, an error in ECMAScript
        if lo > MAX_REPEAT:
            raise Unsupported(f"a repetition of more than {MAX_REPEAT}")
        hi = None if hi is None else min(hi, MAX_REPEAT)  # fewer repeats: stricter
        return ("rep", atom, lo, hi)

    def _bounds(self) -> tuple[int, int | None, int] | None:
        m = re.compile(r"\{(\d+)(,(\d*))?\}").match(self.p, self.i)
        if not m:
            return None  # a literal `{`
        lo = int(m.group(1))
        hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
        return lo, hi, m.end()

    def escape(self) -> Node:
        if self.i >= len(self.p):
            raise self.fail("bad escape (end of pattern)")
        e = self.p[self.i]
        if e in "dws":
            self.i += 1
            return ("set", _CLASS_ESCAPES[e])
        if e in "DWS":
            self.i += 1
            return ("set", cs.ascii_only(cs.complement(_CLASS_ESCAPES[e.lower()])))
        if e in "bBAzZk" or e.isdigit() and e != "0":
            raise Unsupported("a word boundary, an anchor escape or a backreference")
        return ("lit", chr(self.char_escape()))

    def char_escape(self) -> int:
        """The code point of the escape at self.i (after the backslash)."""
        e = self.p[self.i]
        self.i += 1
        if e in _CONTROL:
            return _CONTROL[e]
        if e == "x":
            return self._hex(2)
        if e == "u":
            if self.peek() == "{":
                end = self.p.find("}", self.i)
                digits = self.p[self.i + 1:end] if end > 0 else ""
                if not re.fullmatch(r"[0-9a-fA-F]{1,6}", digits) or int(digits, 16) > cs.MAX:
                    raise self.fail("bad \\u{...} escape")
                self.i = end + 1
                return int(digits, 16)
            return self._hex(4)
        if e == "c" and self.peek().isalpha():
            self.i += 1
            return ord(self.p[self.i - 1]) % 32
        if e in "pP":
            raise Unsupported("a Unicode property escape")
        if e.isalnum():
            raise Unsupported(f"the escape \\{e}")
        return ord(e)

    def _hex(self, n: int) -> int:
        digits = self.p[self.i:self.i + n]
        if not re.fullmatch(f"[0-9a-fA-F]{{{n}}}", digits):
            raise self.fail(f"expecting {n} hex digits")
        self.i += n
        return int(digits, 16)

    def char_class(self) -> cs.Ranges:
        negate = self.peek() == "^"
        self.i += negate
        if self.peek() == "]":
            raise Unsupported("an empty class ([] or [^])")  # ECMAScript and Python read these differently
        ranges: list[tuple[int, int]] = []
        narrow = False  # a negated \d, \w or \s: kept to ASCII
        while True:
            if self.i >= len(self.p):
                raise self.fail("unterminated character set")
            if self.peek() == "]":
                self.i += 1
                break
            item = self.class_item()
            if isinstance(item, tuple):
                ranges += item
                narrow = narrow or negate
                continue
            if self.peek() == "-" and self.p[self.i + 1:self.i + 2] not in ("]", ""):
                self.i += 1
                high = self.class_item()
                if isinstance(high, tuple):
                    raise Unsupported("a class escape in a range")
                if high < item:
                    raise self.fail("bad character range")
                ranges.append((item, high))
            else:
                ranges.append((item, item))
        out = cs.normalize(ranges)
        if negate:
            out = cs.complement(out)
            out = cs.ascii_only(out) if narrow else out
        return out

    def class_item(self) -> int | cs.Ranges:
        c = self.p[self.i]
        self.i += 1
        if c != "\\":
            return ord(c)
        if self.i >= len(self.p):
            raise self.fail("bad escape (end of pattern)")
        e = self.p[self.i]
        if e in "dws":
            self.i += 1
            return _CLASS_ESCAPES[e]
        if e in "DWS":
            self.i += 1
            return cs.ascii_only(cs.complement(_CLASS_ESCAPES[e.lower()]))
        if e == "b":
            self.i += 1
            return 0x08
        if e in "pP" and self.p[self.i + 1:self.i + 2] == "{":
            end = self.p.find("}", self.i)
            name = self.p[self.i + 2:end] if end > 0 else ""
            if e == "p" and name in _PROPERTIES:  # a few letters or digits: stricter
                self.i = end + 1
                return _parse_ranges(_PROPERTIES[name])
            raise Unsupported("a Unicode property escape")
        return self.char_escape()


def _parse_ranges(spec: str) -> cs.Ranges:
    return cs.normalize([(ord(spec[i]), ord(spec[i + 2])) for i in range(0, len(spec), 3)])


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
