"""Kimi K3's XTML: every tag is `<|open|>TAG ATTRS<|sep|>` … `<|close|>TAG<|sep|>`. The assistant
writes `think`, then `response` (the answer), then maybe `tools`:

    <|open|>tools<|sep|><|open|>call tool="NAME" index="1"<|sep|>
    <|open|>argument key="KEY" type="string"<|sep|>VALUE<|close|>argument<|sep|> …
    <|close|>call<|sep|><|close|>tools<|sep|>

(no newlines; a value of another type is JSON, its `type` number, boolean, null, object or array),
then `<|close|>message<|sep|>`. The calls are a Shape; the splitter reads the output through a filter
that drops the closing `response` and `message` tags."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...grammars.gbnf import literal
from ...neutral import Piece
from .base import GrammarOptions, ToolSpec
from .pattern import find_first, held_back
from .shape import Shape, ShapeCodec
from .xmlargs import XmlArgs

OPEN, CLOSE, SEP = "<|open|>", "<|close|>", "<|sep|>"
THINK = (f"{OPEN}think{SEP}", f"{CLOSE}think{SEP}{OPEN}response{SEP}")  # the family's reasoning tags
END_RESPONSE = f"{CLOSE}response{SEP}"
_DROPPED = (END_RESPONSE, f"{CLOSE}message{SEP}")


class _Dropping:
    """A splitter that reads the output without the texts `_DROPPED`."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.buf = inner, ""

    @property
    def calls(self) -> int:
        return self.inner.calls

    def _feed(self, text: str, final: bool) -> str:
        self.buf += text
        out = []
        while (found := find_first(self.buf, _DROPPED))[0] >= 0:
            at, what = found
            out.append(self.buf[:at])
            self.buf = self.buf[at + len(what):]
        keep = 0 if final else held_back(self.buf, _DROPPED)
        out.append(self.buf[:len(self.buf) - keep])
        self.buf = self.buf[len(self.buf) - keep:]
        return "".join(out)

    def push(self, text: str) -> list[Piece]:
        return self.inner.push(self._feed(text, False))

    def finish(self) -> list[Piece]:
        text = self._feed("", True)
        return (self.inner.push(text) if text else []) + self.inner.finish()


@dataclass(frozen=True)
class XtmlCodec(ShapeCodec):
    def grammar(self, tools: Sequence[ToolSpec], options: GrammarOptions) -> str:
        """Unless lazy (free text until `<|open|>tools<|sep|>`), the answer's close first."""
        grammar = super().grammar(tools, options)
        if options.lazy:
            return grammar
        first, _, rest = grammar.partition("\n")
        return f"root ::= {literal(END_RESPONSE)} ( {first.removeprefix('root ::= ')} )\n{rest}"

    def splitter(self, reasoning: tuple[str, str] | None, thinking: bool, tools: Sequence[ToolSpec] | None,
                 strict: bool) -> Any:
        return _Dropping(super().splitter(reasoning, thinking, tools, strict))


KIMI_K3 = XtmlCodec(
    "kimi-k3-xtml",
    Shape(open=f"{OPEN}tools{SEP}", close=f"{CLOSE}tools{SEP}", call_open=f'{OPEN}call tool="',
          name_end=f'" index="{{number}}"{SEP}', call_close=f"{CLOSE}call{SEP}",
          xml=XmlArgs(f'{OPEN}argument key="', f'" type="string"{SEP}', f"{CLOSE}argument{SEP}", "",
                      typed_key_close=f'" type="{{type}}"{SEP}')),
    trigger=f"{OPEN}tools{SEP}", visible_tokens=(OPEN, CLOSE, SEP))
