"""Splitting generated text into what the client sees: reasoning, content, tool calls.

Reasoning until the family's closing think tag; content, holding back anything that could still
become a marker that opens calls; from a marker on, the codec's parser reads the calls, and
what follows them is content again."""

from __future__ import annotations

from collections.abc import Sequence

from ...neutral import Delta, Piece, ReasoningDelta
from .pieces import BlockParser, CallSyntax, Stepped, ToolSpec
from .pattern import PARTIAL, find_first, held_back, match


class Splitter(Stepped):
    def __init__(self, codec: CallSyntax | None = None, reasoning: tuple[str, str] | None = None, thinking: bool = False,
                 tools: Sequence[ToolSpec] = (), strict: bool = True) -> None:
        self.codec, self.tools, self.strict = codec, tuple(tools), strict
        self.markers = codec.markers if codec is not None else ()
        self.think_open, self.think_close = reasoning or ("", "")
        self.state = "reasoning" if thinking and reasoning else "content"
        self.buf = ""
        self.calls = 0
        self.block: BlockParser | None = None
        self._pending = ""  # the text from a marker on, for the parser it opened
        self._space = ""  # the whitespace before that marker
        self._started = False  # content has begun (a think tag no longer opens reasoning)
        self._strip = ""  # characters not to show at the start of the content that follows (reasoning, calls)
        self._after_calls = False  # ... and then a closing text the calls' grammar allows (`closers`)

    def _mark(self) -> tuple:
        return self.state, len(self.buf), self.block

    def _step(self, final: bool) -> list[Piece]:
        return getattr(self, f"_{self.state}")(final)

    # -- states ----------------------------------------------------------------------------

    def _reasoning(self, final: bool) -> list[Piece]:
        at = self.buf.find(self.think_close)
        if at >= 0:
            text, self.buf, self.state = self.buf[:at], self.buf[at + len(self.think_close):], "content"
            self._strip = "\n"
            return [ReasoningDelta(text)] if text else []
        return self._release(ReasoningDelta, (self.think_close,), final)

    def _content(self, final: bool) -> list[Piece]:
        if self._strip:
            self.buf = self.buf.lstrip(self._strip)
            if not self.buf:
                return []
            if self._after_calls and self.codec is not None:  # a stray closing text of another form
                closer = next((c for c in self.codec.closers if self.buf.startswith(c)), None)
                longer = [m for m in self.markers if len(m) > len(closer or "") and m.startswith(closer or "\0")]
                if any(m.startswith(self.buf) for m in longer) and not final:
                    return []  # ``` or ```json (the next block's opening)?
                if any(self.buf.startswith(m) for m in longer):
                    closer = None
                if closer is None and not final and any(c.startswith(self.buf) for c in self.codec.closers):
                    return []
                if closer is not None:
                    self.buf = self.buf[len(closer):]
                    return []
            self._strip, self._after_calls = "", False
        if not self._started and self.think_open:
            stripped = self.buf.lstrip()
            if stripped.startswith(self.think_open):
                self.buf, self.state = stripped[len(self.think_open):], "reasoning"
                return []
            if self.think_open.startswith(stripped) and not final:
                return []  # could still be the opening think tag
            if stripped.startswith(self.think_close):  # no reasoning: its close alone (MiniMax M3)
                self.buf, self._strip, self._started = stripped[len(self.think_close):], "\n", True
                return []
            if self.think_close.startswith(stripped) and not final:
                return []
        at, marker = find_first(self.buf, self.markers)
        if at >= 0 and not final and any(len(m) > len(marker) and match(m, self.buf, at) == PARTIAL
                                         for m in self.markers):
            return []  # a longer marker may still be written here (``` then ```json; <tools> then <tools> <function)
        if at >= 0:
            text, self._pending = self.buf[:at].rstrip(), self.buf[at:]  # (space before calls: not shown)
            self._space = self.buf[len(text):at]
            self.buf, self.state = "", "calls"
            self.block = self.codec.parser(self.tools, marker, self.calls, self.strict)  # type: ignore[union-attr]
            return [Delta(text)] if text else []
        out = self._release(Delta, self.markers, final, spaces=True)
        if out:
            self._started = True
        return out

    def _calls(self, final: bool) -> list[Piece]:
        assert self.block is not None
        text, self._pending, self.buf = self._pending + self.buf, "", ""
        out = self.block.push(text, final)
        if final and self.strict and self.block.done and self.calls + self.block.calls:
            # strict: the output ended inside the calls the grammar forces (max_tokens, a stop
            # string): what could not be read is the start of a cut-off call, not text
            out = [p for p in out if not isinstance(p, Delta)]
            self.block.leftover = ""
        if self._space and out and isinstance(out[0], Delta) and not self.block.calls:  # no calls after all
            out[0] = Delta(self._space + out[0].content)
        if out or self.block.done:
            self._space = ""
        if self.block.done:
            calls = self.block.calls
            self.calls += calls
            self.buf, self.block, self.state = self.block.leftover, None, "content"
            self._strip = " \t\r\n" if calls else ""
            self._after_calls = bool(calls)
            self._started = True
        return out

    def _release(self, kind: type, markers: tuple[str, ...], final: bool, spaces: bool = False) -> list[Piece]:
        """Emit all but a tail that could be the start of a marker (and, for content, trailing
        whitespace: it is not shown before calls, whichever chunk it came in)."""
        keep = 0 if final else held_back(self.buf, markers)
        if spaces and not final:
            body = self.buf[:len(self.buf) - keep]
            keep += len(body) - len(body.rstrip())
        text, self.buf = self.buf[: len(self.buf) - keep], self.buf[len(self.buf) - keep:]
        return [kind(text)] if text else []
