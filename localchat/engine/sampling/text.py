"""Turning a token stream into text: UTF-8 that never splits a character, and stop strings
held back until they can no longer match."""

from __future__ import annotations

import codecs


class Utf8Stream:
    """Bytes in, complete characters out; an incomplete multi-byte tail waits for the next piece."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, piece: bytes) -> str:
        return self._decoder.decode(piece)

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)


class StopMatcher:
    """Emits text as soon as it cannot be the start of a stop string.

    `push` returns (text safe to emit, stopped). Once stopped, the stop string and anything
    after it are dropped, as OpenAI does.
    """

    def __init__(self, stops: list[str]) -> None:
        self._stops = [s for s in stops if s]
        self._held = ""
        self.matched: str | None = None  # the stop string that ended the text

    def push(self, text: str) -> tuple[str, bool]:
        if not self._stops:
            return text, False
        buf = self._held + text
        found = [(i, s) for s in self._stops if (i := buf.find(s)) >= 0]
        if found:
            cut, self.matched = min(found, key=lambda f: (f[0], -len(f[1])))
            self._held = ""
            return buf[:cut], True
        keep = self._longest_partial(buf)
        self._held = buf[len(buf) - keep:] if keep else ""
        return buf[: len(buf) - keep], False

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held

    def _longest_partial(self, buf: str) -> int:
        """Length of the longest suffix of buf that is a proper prefix of some stop string."""
        best = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(buf)), best, -1):
                if buf.endswith(stop[:n]):
                    best = n
                    break
        return best


class LineLimits:
    """llama-server's editor limits (llama.vscode sends them to /infill), applied as it does:
    after the answer's first line break, a line indented by fewer than `n_indent` spaces or tabs
    ends the answer before that line (its indentation is held back until the line shows it); a
    token holding a line break, written `t_max_ms` or more after the first token, ends the answer
    after that token. `push(text, now)` returns (text to emit, ended)."""

    def __init__(self, n_indent: int, t_max_ms: int) -> None:
        self.n_indent, self.t_max = max(n_indent, 0), max(t_max_ms, 0) / 1000
        self.started: float | None = None
        self._line_start = False  # at the start of a line after a line break: its indentation not known yet
        self._held = ""

    def push(self, text: str, now: float) -> tuple[str, bool]:
        if self.started is None:
            self.started = now
        out = []
        for ch in text:
            if self._line_start:
                if ch in " \t":
                    self._held += ch
                    continue
                if len(self._held) < self.n_indent:  # llama-server ends on a blank line too
                    self._held = ""
                    return "".join(out), True
                out.append(self._held)
                self._held, self._line_start = "", False
            out.append(ch)
            if ch == "\n" and self.n_indent:
                self._line_start = True
        late = self.t_max > 0 and "\n" in text and now - self.started >= self.t_max
        return "".join(out), late

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held
