"""Finding where a streamed JSON value ends, without parsing it twice, and closing a value
that was cut off."""

from __future__ import annotations

import json
from typing import Any


class JsonScanner:
    """Feed it the text of one JSON value as it comes; `end` is set once the value is complete
    (the offset just past it, in the text fed so far). Leading whitespace is skipped."""

    def __init__(self) -> None:
        self.stack: list[str] = []  # open brackets
        self.in_string = self.escaped = False
        self.started = False
        self.scalar = False  # a bare number / true / false / null at the top level
        self.seen = 0  # characters fed
        self.end: int | None = None

    def feed(self, text: str) -> int | None:
        """More of the value's text (everything after what was fed before)."""
        for i, c in enumerate(text):
            if self.end is not None:
                break
            self._char(c, self.seen + i)
        self.seen += len(text)
        return self.end

    def _char(self, c: str, at: int) -> None:
        if self.in_string:
            if self.escaped:
                self.escaped = False
            elif c == "\\":
                self.escaped = True
            elif c == '"':
                self.in_string = False
                if not self.stack:
                    self.end = at + 1
            return
        if not self.started:
            if c.isspace():
                return
            self.started = True
            if c not in '{["':
                self.scalar = True
        if self.scalar:
            if c in ",}]\n\r\t <" or c.isspace():
                self.end = at
            return
        if c == '"':
            self.in_string = True
        elif c in "{[":
            self.stack.append(c)
        elif c in "}]":
            if self.stack:
                self.stack.pop()
            if not self.stack:
                self.end = at + 1

    def closers(self) -> str:
        """What would close the value as it stands (a string, then each open bracket)."""
        tail = '"' if self.in_string else ""
        return tail + "".join("}" if b == "{" else "]" for b in reversed(self.stack))


def repair(text: str) -> Any:
    """The JSON value a cut-off text most likely meant, or raises ValueError."""
    scanner = JsonScanner()
    scanner.feed(text)
    if scanner.end is not None:
        return json.loads(text[:scanner.end])
    if scanner.scalar:
        return json.loads(text)
    attempts = [text.rstrip() + scanner.closers()]
    body = text.rstrip().rstrip(",:")
    cut = max(body.rfind(","), 0)
    if cut:  # drop a half-written member
        head = JsonScanner()
        head.feed(body[:cut])
        attempts.append(body[:cut] + head.closers())
    for attempt in attempts:
        try:
            return json.loads(attempt)
        except ValueError:
            continue
    raise ValueError("not repairable JSON")


def loads_object(text: str) -> dict[str, Any] | None:
    """A JSON object from text (or from a JSON string holding one, as some models write), else None."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None
