"""Reading harmony output as it streams: each message's header says where its text goes
(analysis: reasoning; final, or commentary to no one: content; commentary to functions.NAME: a
call, its message the JSON arguments). The markup's control tokens are here; harmony.py's codec
writes them."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from ...neutral import Delta, Piece, ReasoningDelta, ToolCallArguments, ToolCallStart, new_call_id
from .base import Stepped, ToolSpec, ToolSet
from .jsonscan import loads_object
from .pattern import find_first, held_back

START, END, MESSAGE, CHANNEL, CONSTRAIN = "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>"
CALL, RETURN = "<|call|>", "<|return|>"

_ENDS = (END, CALL, RETURN, START)
_CHANNEL = re.compile(r"<\|channel\|>\s*(\w+)")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")


class HarmonySplitter(Stepped):
    def __init__(self, tools: Sequence[ToolSpec] | None, strict: bool) -> None:
        self.tools = ToolSet(tools) if tools is not None else None
        self.strict = strict
        self.buf, self.state = "", "header"
        self.kind = "content"  # where the current message's text goes: reasoning | content | call
        self.calls = 0
        self.args = ""  # the current call's arguments (lenient: held until the message ends)

    def _mark(self) -> tuple:
        return self.state, len(self.buf)

    def _step(self, final: bool) -> list[Piece]:
        return self._header(final) if self.state == "header" else self._body(final)

    def _header(self, final: bool) -> list[Piece]:
        at = self.buf.find(MESSAGE)
        looks = self.buf.lstrip().startswith(("<|", " to=", "to=", "assistant"))
        if at < 0:
            if self.buf and not looks and not START.startswith(self.buf) and not CHANNEL.startswith(self.buf):
                self.kind, self.state = "content", "body"  # plain text: no harmony header
            elif final:
                self.buf = ""  # the output ended inside a header: markup, not text
            return []
        header, self.buf = self.buf[:at], self.buf[at + len(MESSAGE):]
        channel = (m.group(1) if (m := _CHANNEL.search(header)) else "final").lower()
        recipient = m.group(1) if (m := _RECIPIENT.search(header)) else ""
        self.state = "body"
        name = recipient.removeprefix("functions.")
        if self.tools is not None and not self.strict:
            name = self.tools.resolve(name) or ""
        if recipient.startswith("functions.") and self.tools is not None and name:
            self.kind, self.args = "call", ""
            self.call = ToolCallStart(self.calls, new_call_id(), name)
            return [self.call] if self.strict else []
        self.kind = "reasoning" if channel == "analysis" else "content"
        return []

    def _body(self, final: bool) -> list[Piece]:
        at, _ = find_first(self.buf, _ENDS)
        if at < 0:
            keep = 0 if final else held_back(self.buf, _ENDS)
            text, self.buf = self.buf[:len(self.buf) - keep], self.buf[len(self.buf) - keep:]
            out = self._text(text)
            if final:
                out += self._close()
            return out
        text, self.buf = self.buf[:at], self.buf[at:]
        for end in _ENDS:
            if self.buf.startswith(end):
                self.buf = self.buf[len(end):] if end != START else self.buf
        self.state = "header"
        return self._text(text) + self._close()

    def _text(self, text: str) -> list[Piece]:
        if not text:
            return []
        if self.kind == "call":
            self.args += text
            return [ToolCallArguments(self.calls, text)] if self.strict else []
        return [ReasoningDelta(text) if self.kind == "reasoning" else Delta(text)]

    def _close(self) -> list[Piece]:
        """The message ended: a call is complete (lenient: if its arguments are a JSON object)."""
        if self.kind != "call":
            return []
        self.kind = "content"
        self.calls += 1
        if self.strict:
            return []
        arguments = loads_object(self.args)
        if arguments is None:
            self.calls -= 1
            return [Delta(self.args)]
        return [self.call, ToolCallArguments(self.calls - 1, json.dumps(arguments, ensure_ascii=False))]
