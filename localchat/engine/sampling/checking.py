"""The values a grammar holds only in part, checked as they are written, and where to cut the
answer back when one breaks its schema (grammars/check.py does the checking).

A constraint names its checks: a JSON schema, and the text that comes just before a value it
holds for (a regular expression: a tool's name and `"arguments": `; none: the value starts where
the grammar does). `OutputCheck` reads the text written under the grammar: it finds each
value's start, feeds a `ValueChecker` until the value is complete, and keeps which token wrote
which text. On a broken value it says which token to go back to (`Cut`); the sequence removes
what follows, bans the token that finished the broken value after the same tokens, and samples
again (slot.py). Text that a cut could take back is held: from the start of the outermost open
value whose completion can still break the schema (a keyword the grammar does not hold, at that
value or under a condition of it)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ...grammars.check import ValueChecker, Violation
from ..params import Check

# Keywords whose sub-schemas hold for the values under a value whatever its other parts are (the
# checker follows them to a completed value); the others apply on a condition, checked with the value.
_FOLLOWED = {"properties", "patternProperties", "additionalProperties", "items", "prefixItems", "additionalItems",
             "$defs", "definitions", "allOf"}
MAX_CUTS = 64  # values written again in one answer (or a token banned further back) before the checking gives up


@dataclass(frozen=True)
class Cut:
    token: int  # the token the broken value begins in (its index among the tokens written under the grammar)
    end: int  # where the value ends in the text written under the grammar
    message: str
    members: tuple[Cut, ...] = ()  # an array's items or an object's values, as cuts of their own


def _states(text: str, inside: bool = False):
    """Each character of JSON text, with whether it stands inside a string and whether the text
    is inside one after it (`inside`: the text starts inside a string)."""
    escaped = False
    for ch in text:
        was = inside
        if inside:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                inside = False
        elif ch == '"':
            inside = True
        yield ch, was, inside


def squeeze(text: str, inside: bool = False) -> str:
    """JSON text without its insignificant whitespace (`inside`: it starts inside a string)."""
    return "".join(ch for ch, was, _ in _states(text, inside) if was or ch not in " \t\n\r")


def fail_points(entries: list[str]) -> tuple[str, ...]:
    """The sub-schemas (JSON pointers) at which a completed value can break the schema: where a
    keyword the grammar does not hold stands, and every schema with such a keyword under one of
    its conditions (`anyOf`, `not`, `if`…) on the way."""
    points = set()
    for entry in entries:
        where = entry.partition("#")[2].rpartition(":")[0]
        parts = where.split("/")[1:] if where else []
        points.add("#" + "".join("/" + p for p in parts))
        i = 0
        while i < len(parts):
            if parts[i] not in _FOLLOWED:
                points.add("#" + "".join("/" + p for p in parts[:i]))
            i += 2 if parts[i] in ("properties", "patternProperties", "$defs", "definitions", "prefixItems",
                                   "allOf", "anyOf", "oneOf", "dependentSchemas", "dependencies") else 1
    return tuple(sorted(points))


class OutputCheck:
    """The checks of one sequence's output under its grammar."""

    def __init__(self, checks: tuple[Check, ...]) -> None:
        self.checks = [(re.compile(c.anchor) if c.anchor else None, json.loads(c.schema), frozenset(c.fails), c)
                       for c in checks]
        self.text = ""  # written under the grammar
        self.starts: list[int] = []  # where each token's text starts in it
        self.value: ValueChecker | None = None  # the value being written, if any
        self.check: Any = None
        self.base = 0  # where it starts in self.text
        self.searched = 0  # self.text is searched for an anchor from here
        self.cuts = 0
        self.given_up: list[str] = []  # entries no longer held (the cuts ran out)
        self._done_values: list[tuple[int, int, Any]] = []  # (base, end, check) of the values complete so far

    # -- reading -----------------------------------------------------------------------------

    def push(self, text: str) -> Cut | None:  # noqa: C901
        """The text of the next token; a Cut if a value it completes breaks the schema."""
        self.starts.append(len(self.text))
        self.text += text
        if self.given_up:
            return None
        while True:
            if self.value is None and not self._find():
                return None
            assert self.value is not None
            fed = len(self.value.text) + self.base
            violation = self.value.feed(self.text[fed:])
            if violation is not None:
                return self._cut(violation)
            if not self.value.complete:
                return None
            end = self.base + self._end_of(self.value)
            self._done_values.append((self.base, end, self.check))
            self.value, self.searched = None, end

    def finish(self) -> Cut | None:
        """The output is over: a number at its very end is complete now."""
        if self.value is None or self.given_up:
            return None
        violation = self.value.finish()
        return self._cut(violation) if violation is not None else None

    def _find(self) -> bool:
        """Start the next value: after an anchor, or (no anchor) at the grammar's start."""
        for anchor, schema, fails, check in self.checks:
            if anchor is None:
                if self.searched == 0 and not self._done_values:
                    self._begin(0, schema, check)
                    return True
                continue
            found = anchor.search(self.text, self.searched)
            if found is not None:
                self._begin(found.end(), schema, check)
                return True
        return False

    def _begin(self, at: int, schema: Any, check: Any) -> None:
        self.value, self.base, self.check = ValueChecker(schema), at, check

    @staticmethod
    def _end_of(value: ValueChecker) -> int:
        return len(value.text)  # (the value's text ends where its last character was read)

    def _cut(self, violation: Violation) -> Cut:
        members = tuple(Cut(self._token_at(self.base + a), self.base + b, violation.message)
                        for a, b in violation.members)
        return Cut(self._token_at(self.base + violation.start), self.base + violation.end, violation.message, members)

    def allow_cut(self) -> bool:
        """Whether one more value may be written again (MAX_CUTS in one answer)."""
        self.cuts += 1
        return self.cuts <= MAX_CUTS

    def _token_at(self, offset: int) -> int:
        """The token whose text holds the character at `offset`."""
        lo, hi = 0, len(self.starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def inside_string(self, at: int) -> bool:
        """Whether the text written under the grammar is inside a JSON string at `at` (read from the
        start of the value being checked, which is outside one)."""
        inside = False
        for _, _, inside in _states(self.text[min(self.base, at):at]):
            pass
        return inside

    def give_up(self) -> None:
        """Stop checking: what this value's check held, the grammar alone holds from here."""
        self.given_up = list(self.check.entries) if self.check is not None else \
            [e for *_, c in self.checks for e in c.entries]
        self.value = None

    # -- going back --------------------------------------------------------------------------

    def rewind(self, token: int) -> None:
        """Forget token `token` and every one after it."""
        offset = self.starts[token] if token < len(self.starts) else len(self.text)
        del self.starts[token:]
        self.text = self.text[:offset]
        while self._done_values and self._done_values[-1][1] > offset:
            self._done_values.pop()
        if self.value is not None and self.base < offset:
            self.value.rewind(offset - self.base)
        else:
            self.value = None
            self.searched = self._done_values[-1][1] if self._done_values else 0
            self.searched = min(self.searched, offset)

    def safe(self) -> int:
        """How much of the text can no longer be taken back: up to the token where the outermost
        open value that can still break its schema begins (all of it when there is none)."""
        if self.value is None or self.given_up:
            return len(self.text)
        fails = next(f for a, s, f, c in self.checks if c is self.check)
        for offset, path in self.value.open_values():
            if self._may_fail(path, fails):
                return self.starts[self._token_at(self.base + offset)]
        return len(self.text)

    def _may_fail(self, path: tuple, fails: frozenset[str]) -> bool:
        if not fails:
            return False
        pointers = self.value.pointers_at(path) if self.value is not None else None
        return pointers is None or any(p in fails for p in pointers)
