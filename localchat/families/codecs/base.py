"""What a tool-call codec is: for one wire syntax, how calls and results are written into the
history, the grammar that forces a call, and the splitter that reads calls back (split.py, through
the codec's reading half: pieces.py, imported here too, so that a codec needs only this module
and the neutral vocabulary).

The pieces a parser produces are the same whatever the syntax (localchat/neutral.py): text,
reasoning, the start of a call (its name) and its arguments, always as fragments of a JSON
object's text."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...grammars.gbnf import MAX_BYTES
from ...neutral import PastCall
from .pieces import BlockParser, CallSyntax, Stepped, ToolSpec, ToolSet
from .split import Splitter

Segments = list[tuple[str, bool]]  # (text, is_plain): only plain=False text may hold control tokens


def tidy(segments: Segments) -> Segments:
    return [s for s in segments if s[0]]


# -- what a codec takes -------------------------------------------------------------------------

@dataclass(frozen=True)
class GrammarOptions:
    parallel: bool = True  # several calls, or exactly one
    lazy: bool = False  # the grammar starts after the codec's trigger (free text until then)
    lead: bool = False  # blank lines allowed first (the model has just closed its reasoning)
    answer: Any = None  # a JSON schema: the output is the calls, or a JSON value for it
    closed: bool = False  # the answer is strict: its objects take only the keys they list (grammars/objects.py)
    loosened: list[str] | None = None  # gets "name#/path:keyword" for what a schema could not enforce
    max_bytes: int = MAX_BYTES


class Codec(CallSyntax):
    """One tool-call syntax: how calls and results are written into the history, the grammar
    that forces calls, and what reads them back (CallSyntax, pieces.py; the splitter)."""

    name: str
    visible_tokens: tuple[str, ...]  # control tokens that must show in the output text

    @abstractmethod
    def format_calls(self, calls: Sequence[PastCall]) -> Segments:
        """An assistant's calls, written as the model writes them: our markup as template text
        (control tokens parse), the calls' names and arguments as plain text."""

    @abstractmethod
    def format_result(self, content: str, call: PastCall | None = None) -> Segments:
        """A tool's result, for a template with no tool support of its own."""

    @abstractmethod
    def describe(self, tools: Sequence[ToolSpec]) -> Segments:
        """The tools and how to call them, for the system prompt of such a template."""

    @abstractmethod
    def grammar(self, tools: Sequence[ToolSpec], options: GrammarOptions) -> str:
        """GBNF that forces calls of these tools (validated by the caller)."""

    def splitter(self, reasoning: tuple[str, str] | None, thinking: bool, tools: Sequence[ToolSpec] | None,
                 strict: bool) -> Any:
        """What splits output into reasoning, content and calls (tools None: no calls are read)."""
        return Splitter(self if tools is not None else None, reasoning, thinking, tools or (), strict)

    def arguments_anchor(self, tool: ToolSpec, tools: Sequence[ToolSpec]) -> str | None:
        """A regular expression for the text right before a call's arguments, when they are one
        JSON value the checker of written values can follow (engine/sampling/checking.py); None if not."""
        return None

    def loose_triggers(self, tools: Sequence[ToolSpec], options: GrammarOptions) -> list[tuple[str, str]]:
        """Texts that begin a call in a form models write unasked (not this syntax's own), each
        with the GBNF that forces the rest of that call once it is written (for a lazy grammar)."""
        return []


__all__ = ["BlockParser", "CallSyntax", "Codec", "GrammarOptions", "PastCall", "Segments", "Stepped", "ToolSet", "ToolSpec", "tidy"]
