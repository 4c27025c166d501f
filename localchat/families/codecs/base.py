"""What a tool-call codec is: for one wire syntax, how calls and results are written into the
history, the grammar that forces a call, and the streaming parser that reads calls back.

The pieces a parser produces are the same whatever the syntax: text, reasoning, the start of a
call (its name) and its arguments, always as fragments of a JSON object's text."""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...grammars.gbnf import MAX_BYTES

Segments = list[tuple[str, bool]]  # (text, is_plain): only plain=False text may hold control tokens


def tidy(segments: Segments) -> Segments:
    return [s for s in segments if s[0]]


# -- what a parser produces ---------------------------------------------------------------------

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


def new_call_id() -> str:
    """A neutral call id (each protocol writes it with its own prefix: call_, toolu_)."""
    return secrets.token_hex(12)


# -- what a codec takes -------------------------------------------------------------------------

@dataclass(frozen=True)
class Tool:
    """A tool the model may call: its name and the JSON schema of its arguments."""

    name: str
    parameters: Any = None  # a JSON schema (dict or bool); None: any object
    description: str | None = None

    def openai(self) -> dict[str, Any]:
        """The tool as chat templates expect it ({"type": "function", "function": {…}})."""
        function = {k: v for k, v in (("name", self.name), ("description", self.description),
                                      ("parameters", self.parameters)) if v is not None}
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class Call:
    """A call from the history: its name, its arguments (a JSON value, normally an object)."""

    name: str
    arguments: Any = field(default_factory=dict)
    id: str = ""


@dataclass(frozen=True)
class GrammarOptions:
    parallel: bool = True  # several calls, or exactly one
    lazy: bool = False  # the grammar starts after the codec's trigger (free text until then)
    lead: bool = False  # blank lines allowed first (the model has just closed its reasoning)
    answer: Any = None  # a JSON schema: the output is the calls, or a JSON value for it
    loosened: list[str] | None = None  # gets "name#/path:keyword" for what a schema could not enforce
    max_bytes: int = MAX_BYTES


class BlockParser(ABC):
    """Reads one block of calls, from the text that opened it (a marker) on. `done` once the
    block has ended: `leftover` is what followed it (text again)."""

    done: bool = False
    leftover: str = ""
    calls: int = 0  # calls started so far (the next one's index is first + calls)

    @abstractmethod
    def push(self, text: str, final: bool = False) -> list[Piece]:
        """More text (final: nothing more will come). Returns the pieces it completes."""


class Codec(ABC):
    """One tool-call syntax."""

    name: str
    trigger: str  # the text that starts calls in free output; the lazy grammar starts after it
    visible_tokens: tuple[str, ...]  # control tokens that must show in the output text

    @property
    def markers(self) -> tuple[str, ...]:
        """Texts that open a block of calls in the output (the trigger first)."""
        return (self.trigger,) if self.trigger else ()

    @abstractmethod
    def format_calls(self, calls: Sequence[Call]) -> Segments:
        """An assistant's calls, written as the model writes them: our markup as template text
        (control tokens parse), the calls' names and arguments as plain text."""

    @abstractmethod
    def format_result(self, content: str, call: Call | None = None) -> Segments:
        """A tool's result, for a template with no tool support of its own."""

    @abstractmethod
    def describe(self, tools: Sequence[Tool]) -> Segments:
        """The tools and how to call them, for the system prompt of such a template."""

    @abstractmethod
    def grammar(self, tools: Sequence[Tool], options: GrammarOptions) -> str:
        """GBNF that forces calls of these tools (validated by the caller)."""

    def splitter(self, reasoning: tuple[str, str] | None, thinking: bool, tools: Sequence[Tool] | None,
                 strict: bool) -> Any:
        """What splits output into reasoning, content and calls (tools None: no calls are read)."""
        from .split import Splitter

        return Splitter(self if tools is not None else None, reasoning, thinking, tools or (), strict)

    @property
    def closers(self) -> tuple[str, ...]:
        """Closing texts a `loose_triggers` grammar lets a call end with, whatever opened it: not
        shown when they follow calls."""
        return ()

    def loose_triggers(self, tools: Sequence[Tool], options: GrammarOptions) -> list[tuple[str, str]]:
        """Texts that begin a call in a form models write unasked (not this syntax's own), each
        with the GBNF that forces the rest of that call once it is written (for a lazy grammar)."""
        return []

    @abstractmethod
    def parser(self, tools: Sequence[Tool], marker: str, first: int, strict: bool) -> BlockParser:
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
