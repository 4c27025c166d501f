"""Muse Glimmer's ATEM protocol: every assistant message has a recipient header, as in harmony.

    <|start|>assistant to=self<|message|>REASONING<|eom|>
    <|start|>assistant to=NAME<|message|><atem:function_calls>
    <atem:invoke name="NAME">
    <atem:parameter name="KEY">VALUE</atem:parameter>
    </atem:invoke>
    </atem:function_calls><|eot|>
    <|start|>assistant to=user<|message|>ANSWER<|eot|>

(the generation prompt ends with `<|start|>assistant`: the model writes the header). The calls are
a Shape (string values raw, others JSON); the splitter reads the output through a filter that drops
the headers and the message ends, but keeps `to=self<|message|>` … `<|eom|><|start|>assistant`
around reasoning (the family's think tags)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...grammars.gbnf import literal
from ...neutral import Piece
from .base import PastCall, GrammarOptions, Segments, ToolSpec, tidy
from .pattern import find_first, held_back
from .shape import Shape, ShapeCodec
from .xmlargs import XmlArgs

START, MESSAGE, EOM, EOT = "<|start|>", "<|message|>", "<|eom|>", "<|eot|>"
THINK = ("to=self" + MESSAGE, EOM + START + "assistant")  # the family's reasoning tags
_HEAD = re.compile(r"\s*(?:<\|start\|>assistant)?\s*to=([^\s<]*)[^<\n]*<\|message\|>")
_MAX_HEAD = 200


class _Headers:
    """Drops message headers and ends from the stream; reasoning keeps the family's tags."""

    def __init__(self, thinking: bool) -> None:
        self.buf, self.state, self.kind = "", ("body" if thinking else "header"), ("self" if thinking else "")

    def feed(self, text: str, final: bool) -> str:
        self.buf += text
        out = []
        while True:
            if self.state == "header":
                m = _HEAD.match(self.buf)
                if m:
                    self.kind = "self" if m.group(1) == "self" else "other"
                    out.append(THINK[0] if self.kind == "self" else "")
                    self.buf, self.state = self.buf[m.end():], "body"
                    continue
                head = self.buf.lstrip()
                looks = any(p.startswith(head) or head.startswith(p) for p in (START + "assistant", "to="))
                if looks and MESSAGE not in self.buf and len(self.buf) < _MAX_HEAD and "\n" not in head \
                        and not final:
                    break  # (still the header)
                if looks and final and MESSAGE not in self.buf:
                    self.buf = ""  # the output ended inside a header: markup, not text
                    break
                self.state, self.kind = "body", "other"  # plain text: no header
                continue
            at, end = find_first(self.buf, (EOM, EOT, START))
            if at < 0:
                keep = held_back(self.buf, (EOM, EOT, START))  # (at the end: a cut-off end, not text)
                out.append(self.buf[:len(self.buf) - keep])
                self.buf = "" if final else self.buf[len(self.buf) - keep:]
                break
            out.append(self.buf[:at])
            self.buf = self.buf[at + (len(end) if end != START else 0):]
            if self.kind == "self":
                out.append(THINK[1])
            self.state = "header"
        return "".join(out)


class _Splitter:
    def __init__(self, inner: Any, thinking: bool) -> None:
        self.inner, self.headers = inner, _Headers(thinking)

    @property
    def calls(self) -> int:
        return self.inner.calls

    def push(self, text: str) -> list[Piece]:
        return self.inner.push(self.headers.feed(text, False))

    def finish(self) -> list[Piece]:
        text = self.headers.feed("", True)
        return (self.inner.push(text) if text else []) + self.inner.finish()


@dataclass(frozen=True)
class AtemCodec(ShapeCodec):
    def format_calls(self, calls: Sequence[PastCall]) -> Segments:
        out: Segments = []
        for i, call in enumerate(calls):
            out += [(EOM + START + "assistant" if i else "", False), (" to=", False), (call.name, True),
                    (MESSAGE, False), *super().format_calls([call])]
        return tidy(out)

    def format_result(self, content: str, call: PastCall | None = None) -> Segments:
        name = call.name if call else "tool"
        return tidy([('<tool_output name="', False), (name, True), ('">\n', False), (content, True),
                     ("\n</tool_output>", False)])

    def grammar(self, tools: Sequence[ToolSpec], options: GrammarOptions) -> str:
        """Unless lazy (free text until the calls' trigger), the header first: to one of the tools
        (or to the user, where the answer may be JSON instead)."""
        grammar = super().grammar(tools, options)
        if options.lazy:
            return grammar
        names = [t.name for t in tools] + (["user"] if options.answer is not None else [])
        first, _, rest = grammar.partition("\n")
        body = first.removeprefix("root ::= ")
        choice = " | ".join(literal(n) for n in dict.fromkeys(names))
        return f"root ::= {literal(' to=')} ( {choice} ) {literal(MESSAGE)} ( {body} )\n{rest}"

    def splitter(self, reasoning: tuple[str, str] | None, thinking: bool, tools: Sequence[ToolSpec] | None,
                 strict: bool) -> Any:
        return _Splitter(super().splitter(reasoning, thinking, tools, strict), thinking)


MUSE_ATEM = AtemCodec(
    "muse-atem",
    Shape(call_open='<atem:function_calls>\n<atem:invoke name="', name_end='">\n',
          call_close="</atem:invoke>\n</atem:function_calls>",
          xml=XmlArgs('<atem:parameter name="', '">', "</atem:parameter>", "\n")),
    trigger="<atem:function_calls>", result_open='<tool_output name="tool">\n', result_close="\n</tool_output>",
    visible_tokens=(START, MESSAGE, EOM))
