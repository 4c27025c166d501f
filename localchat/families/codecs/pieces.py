"""What splitting a model's output reads with, whatever the tool-call syntax: the tools calls
are read against, a parser for one block of calls, and the reading half of a codec
(`CallSyntax`). What it produces, the pieces (text, reasoning, the start of a call and its
arguments, always as fragments of a JSON object's text), is the neutral vocabulary's
(localchat/neutral.py). base.py's `Codec` is a CallSyntax that also writes calls
and makes their grammar; split.py's splitter reads through a CallSyntax, so it needs nothing of
base.py (which makes splitters)."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence

from ...neutral import Piece, ToolSpec


# -- what calls are read against ---------------------------------------------------------------

def name_key(name: str) -> str:
    """A tool name as models misspell it: case, `-` and `_` ignored (`bash` for `Bash`,
    `read-file` and `ReadFile` for `read_file`)."""
    return name.casefold().replace("-", "").replace("_", "")


class ToolSet(dict[str, ToolSpec]):
    """The declared tools by name; `resolve` also reads a name written in another case or with
    `-`/`_` changed, when exactly one declared tool is spelled that way."""

    def __init__(self, tools: Sequence[ToolSpec] = ()) -> None:
        super().__init__((t.name, t) for t in tools)
        keys: dict[str, list[str]] = {}
        for name in self:
            keys.setdefault(name_key(name), []).append(name)
        self._by_key = {k: names[0] for k, names in keys.items() if len(names) == 1}

    def resolve(self, name: str) -> str | None:
        """The declared tool's name a call names, or None."""
        return name if name in self else self._by_key.get(name_key(name))

    def spellings(self, name: str) -> str:
        """A regular expression for the ways of writing this tool's name that `resolve` reads
        back to it (only its own spelling where another declared tool shares its key)."""
        if self._by_key.get(name_key(name)) != name:
            return re.escape(name)
        out = []
        for c in name.replace("-", "").replace("_", ""):
            out.append(f"[{re.escape(c.lower())}{re.escape(c.upper())}]" if c.lower() != c.upper() else re.escape(c))
        return "[-_]*".join(out)


class BlockParser(ABC):
    """Reads one block of calls, from the text that opened it (a marker) on. `done` once the
    block has ended: `leftover` is what followed it (text again)."""

    done: bool = False
    leftover: str = ""
    calls: int = 0  # calls started so far (the next one's index is first + calls)

    @abstractmethod
    def push(self, text: str, final: bool = False) -> list[Piece]:
        """More text (final: nothing more will come). Returns the pieces it completes."""


class CallSyntax(ABC):
    """How calls show in a model's output, for reading them back: the texts that open a block of
    calls (`markers`), the texts that may close one, and a parser per block."""

    trigger: str  # the text that starts calls in free output; the lazy grammar starts after it

    @property
    def markers(self) -> tuple[str, ...]:
        """Texts that open a block of calls in the output (the trigger first)."""
        return (self.trigger,) if self.trigger else ()

    @property
    def closers(self) -> tuple[str, ...]:
        """Closing texts a `loose_triggers` grammar lets a call end with, whatever opened it: not
        shown when they follow calls."""
        return ()

    @abstractmethod
    def parser(self, tools: Sequence[ToolSpec], marker: str, first: int, strict: bool) -> BlockParser:
        """A parser for a block opened by `marker` (one of `markers`); calls are numbered from
        `first`. Strict: the text follows this codec's grammar; lenient: anything a model wrote
        (what parses becomes calls, what does not stays text)."""


class Stepped:
    """A splitter's driving loop: text is added to `buf`, then `_step` runs until it changes
    nothing `_mark` sees (a state machine that may consume several pieces per push)."""

    buf: str

    def push(self, text: str) -> list[Piece]:
        self.buf += text
        return self._run(final=False)

    def finish(self) -> list[Piece]:
        return self._run(final=True)

    def _run(self, final: bool) -> list[Piece]:
        out: list[Piece] = []
        while True:
            before = self._mark()
            out += self._step(final)
            if self._mark() == before:
                return out

    def _mark(self) -> tuple:
        raise NotImplementedError

    def _step(self, final: bool) -> list[Piece]:
        raise NotImplementedError
