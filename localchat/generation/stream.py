"""Splitting generated text into what the client sees: content, reasoning, tool calls.

A small state machine: reasoning until the family's closing think tag; content, holding back
anything that could still become the tool-call trigger; after the trigger, tool calls, each
announced once its name is complete and then streamed as argument fragments."""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass

from ..families.base import ToolSyntax

_HEADER = re.compile(r'\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=\S)')


@dataclass(frozen=True)
class Delta:
    content: str


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class ToolCallStart:
    index: int
    id: str
    name: str


@dataclass(frozen=True)
class ToolCallArguments:
    index: int
    fragment: str


Piece = Delta | ReasoningDelta | ToolCallStart | ToolCallArguments


class OutputSplitter:
    def __init__(self, tools: ToolSyntax | None = None, reasoning: tuple[str, str] | None = None,
                 thinking: bool = False) -> None:
        self.trigger = tools.trigger if tools else ""
        self.think_open, self.think_close = reasoning or ("", "")
        self.state = "reasoning" if thinking and reasoning else "content"
        self.buf = ""
        self.calls = 0
        self._args_start: int | None = None  # position of the current call's arguments in buf
        self._args_sent = 0
        self._started_content = False
        self._after_think = False

    def push(self, text: str) -> list[Piece]:
        self.buf += text
        out: list[Piece] = []
        while True:
            before = (self.state, len(self.buf))
            out += getattr(self, f"_{self.state}")(final=False)
            if (self.state, len(self.buf)) == before:
                return out

    def finish(self) -> list[Piece]:
        out = getattr(self, f"_{self.state}")(final=True)
        if self.state == "tools" and self.calls == 0 and self._args_start is None:  # a trigger, no call: text
            out.append(Delta(self.buf))
        elif self.state != "tools" and self.buf:
            out.append(ReasoningDelta(self.buf) if self.state == "reasoning" else Delta(self.buf))
        self.buf = ""
        return out

    # -- states ----------------------------------------------------------------------------

    def _reasoning(self, final: bool) -> list[Piece]:
        at = self.buf.find(self.think_close)
        if at >= 0:
            text, self.buf, self.state = self.buf[:at], self.buf[at + len(self.think_close):], "content"
            self._after_think = True  # the blank lines a model writes after its reasoning are not content
            return [ReasoningDelta(text)] if text else []
        return self._release(ReasoningDelta, self.think_close, final)

    def _content(self, final: bool) -> list[Piece]:
        if self._after_think:
            self.buf = self.buf.lstrip("\n")
            if not self.buf:
                return []
            self._after_think = False
        if not self._started_content and self.think_open:
            stripped = self.buf.lstrip()
            if stripped.startswith(self.think_open):
                self.buf, self.state = stripped[len(self.think_open):], "reasoning"
                return []
            if self.think_open.startswith(stripped) and not final:
                return []  # could still be the opening think tag
        if self.trigger:
            at = self.buf.find(self.trigger)
            if at >= 0:
                # the trigger stays in the buffer: in some syntaxes it is the start of the call itself
                text, self.buf, self.state = self.buf[:at], self.buf[at:], "tools"
                return [Delta(text)] if text.strip() else []
        out = self._release(Delta, self.trigger, final)
        if out:
            self._started_content = True
        return out

    def _release(self, kind: type, marker: str, final: bool) -> list[Piece]:
        """Emit all but a tail that could be the start of `marker`."""
        keep = 0
        if marker and not final:
            for n in range(min(len(marker) - 1, len(self.buf)), 0, -1):
                if self.buf.endswith(marker[:n]):
                    keep = n
                    break
        text, self.buf = self.buf[: len(self.buf) - keep], self.buf[len(self.buf) - keep:]
        return [kind(text)] if text else []

    def _tools(self, final: bool) -> list[Piece]:
        out: list[Piece] = []
        if self._args_start is None:
            m = _HEADER.search(self.buf)
            if not m:
                return out
            name = json.loads(f'"{m.group(1)}"')
            out.append(ToolCallStart(self.calls, secrets.token_hex(12), name))
            self._args_start, self._args_sent = m.end(), m.end()
        end = _json_end(self.buf, self._args_start)
        stop = end if end is not None else len(self.buf)
        if stop > self._args_sent:
            out.append(ToolCallArguments(self.calls, self.buf[self._args_sent:stop]))
            self._args_sent = stop
        if end is not None:
            self.buf = self.buf[end:]
            self._args_start = None
            self.calls += 1
        return out


def _json_end(text: str, start: int) -> int | None:
    """Where the JSON value starting at `start` ends, or None while it is incomplete."""
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
                if depth == 0:
                    return i + 1
        elif c == '"':
            in_string = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
        elif depth == 0 and c in ",}\n" and i > start:
            return i  # a bare scalar ended
    return None
