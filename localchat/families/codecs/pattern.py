"""The fixed texts of a syntax (tags, separators), matched against streamed output.

A pattern is literal text where a run of whitespace matches any run (or none: models vary the
blank lines between tags), `{index}` matches a call number (`{number}`: counted from 1), `{id}` a
call id and `{type}` a value's JSON type (Kimi K3's `type="number"`). Matching says
where the pattern ends, that the text so far could still become a match, or that it cannot."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

PARTIAL = -1  # the text ended inside what could still be a match
FAIL = -2
_PLACEHOLDER = re.compile(r"\{index\}|\{number\}|\{id\}|\{type\}|\s+")


@dataclass(frozen=True)
class Pattern:
    elements: tuple[str, ...]  # literal text, or "\0ws", "\0digits", "\0id"

    def match(self, text: str, pos: int, final: bool) -> int:
        for element in self.elements:
            if element == "\0ws":
                while pos < len(text) and text[pos].isspace():
                    pos += 1
                if pos == len(text) and not final:
                    return PARTIAL
                continue
            if element in ("\0digits", "\0id"):
                ok = str.isdigit if element == "\0digits" else str.isalnum
                start = pos
                while pos < len(text) and ok(text[pos]) and text[pos].isascii():
                    pos += 1
                if pos == len(text) and not final:
                    return PARTIAL
                if pos == start:
                    return FAIL
                continue
            piece = text[pos:pos + len(element)]
            if piece != element:
                return PARTIAL if not final and len(piece) < len(element) and element.startswith(piece) else FAIL
            pos += len(element)
        return pos

    @property
    def empty(self) -> bool:
        return not self.elements


@lru_cache(maxsize=512)
def compile_pattern(text: str) -> Pattern:
    elements: list[str] = []
    last = 0
    for m in _PLACEHOLDER.finditer(text):
        if m.start() > last:
            elements.append(text[last:m.start()])
        token = m.group()
        elements.append("\0digits" if token in ("{index}", "{number}") else "\0id" if token in ("{id}", "{type}")
                        else "\0ws")
        last = m.end()
    if last < len(text):
        elements.append(text[last:])
    return Pattern(tuple(elements))


def match(pattern: str, text: str, pos: int = 0, final: bool = False) -> int:
    """Where `pattern` ends in `text` from `pos`, or PARTIAL, or FAIL."""
    return compile_pattern(pattern).match(text, pos, final)


def fill(pattern: str, index: int, call_id: str) -> str:
    """The pattern as written for one call."""
    return pattern.replace("{index}", str(index)).replace("{number}", str(index + 1)).replace("{id}", call_id)


def find_first(text: str, needles: tuple[str, ...], start: int = 0) -> tuple[int, str]:
    """The earliest of `needles` in `text` (position, needle), or (-1, ""). A needle with
    whitespace in it is a pattern: `{ "name"` is found in `{"name"` and `{\n  "name"` too."""
    best, which = -1, ""
    for needle in needles:
        if not needle:
            continue
        at = _find(text, needle, start)
        if at >= 0 and (best < 0 or at < best or (at == best and len(needle) > len(which))):
            best, which = at, needle
    return best, which


def held_back(text: str, needles: tuple[str, ...]) -> int:
    """How many characters at the end of `text` could be the start of one of `needles`."""
    keep = 0
    for needle in needles:
        if _spaced(needle):
            head = needle[0]
            at = text.find(head, max(0, len(text) - SPACED_WINDOW))
            while at >= 0 and len(text) - at > keep:
                if match(needle, text, at) == PARTIAL:
                    keep = len(text) - at
                    break
                at = text.find(head, at + 1)
            continue
        for n in range(min(len(needle) - 1, len(text)), keep, -1):
            if text.endswith(needle[:n]):
                keep = n
                break
    return keep


SPACED_WINDOW = 64  # a spaced needle is looked for in this many characters at the end of a text


def _spaced(needle: str) -> bool:
    return any(c.isspace() for c in needle)


def _find(text: str, needle: str, start: int) -> int:
    if not _spaced(needle):
        return text.find(needle, start)
    head = needle[0]
    at = text.find(head, start)
    while at >= 0 and match(needle, text, at, final=True) < 0:
        at = text.find(head, at + 1)
    return at
