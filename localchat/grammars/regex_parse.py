"""Parsing a JSON Schema `pattern` (an ECMAScript regular expression, read as leniently as
Python reads one) into the small tree regex.py writes out as GBNF."""

from __future__ import annotations

import re

from . import charsets as cs

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
            return ("set", cs.complement(_CLASS_ESCAPES[e.lower()]))
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
        while True:
            if self.i >= len(self.p):
                raise self.fail("unterminated character set")
            if self.peek() == "]":
                self.i += 1
                break
            item = self.class_item()
            if isinstance(item, tuple):
                ranges += item
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
            return cs.complement(_CLASS_ESCAPES[e.lower()])
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
