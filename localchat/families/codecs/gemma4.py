"""Gemma 4's calls: `<|tool_call>call:NAME{KEY:VALUE,…}<tool_call|>`, one after another, in the
template's own value syntax: strings between `<|"|>` tokens, numbers and booleans bare, objects
`{key:value}` with bare keys, lists `[a,b]`. A call is read once its braces close (the model's
values are not JSON; they are converted whole); JSON strings and quoted keys are read too, and
the grammar writes values other than strings as JSON (which reads the same)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...grammars.gbnf import literal
from ...grammars.members import member_rules
from ...grammars.text import excluding
from ...neutral import Piece, ToolCallArguments, ToolCallStart, new_call_id
from .base import BlockParser, PastCall, Segments, ToolSpec, ToolSet, tidy
from .pattern import FAIL, PARTIAL, match
from .reader import CallReader
from .shape import Shape, ShapeCodec
from .xmlargs import _PLAIN_KEYWORDS, _text_value, is_text, properties

Q = '<|"|>'  # Gemma 4's string quote (one token)
_BARE = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


class _Cut(Exception):
    """The text ended inside a value."""


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def read_value(text: str, i: int, cut: bool = False) -> tuple[Any, int]:
    """A value in Gemma's syntax from text[i:]: (the value, where it ends). `cut`: the text ends
    early; what is open is closed (a string runs to the end)."""
    i = _skip(text, i)
    if i >= len(text):
        raise _Cut
    if text.startswith(Q, i):
        end = text.find(Q, i + len(Q))
        if end < 0:
            if not cut:
                raise _Cut
            return text[i + len(Q):], len(text)
        return text[i + len(Q):end], end + len(Q)
    c = text[i]
    if c == '"':
        try:
            return json.JSONDecoder().raw_decode(text, i)
        except ValueError:
            raise _Cut from None
    if c in "{[":
        close, out, i = ("}" if c == "{" else "]"), ({} if c == "{" else []), i + 1
        while True:
            i = _skip(text, i)
            if i >= len(text):
                if cut:
                    return out, i
                raise _Cut
            if text[i] == close:
                return out, i + 1
            if text[i] == "," and (out or isinstance(out, dict)):
                i += 1
                continue
            try:
                if isinstance(out, dict):
                    key, i = _key(text, i)
                    out[key], i = read_value(text, i, cut)
                else:
                    value, i = read_value(text, i, cut)
                    out.append(value)
            except _Cut:
                if cut:
                    return out, len(text)
                raise
    end = i
    while end < len(text) and text[end] not in ",}]" and not text.startswith(Q, end):
        end += 1
    if end == len(text) and not cut:
        raise _Cut
    word = text[i:end].strip()
    if word in _BARE:
        return _BARE[word], end
    try:
        return json.loads(word), end
    except ValueError:
        if not word:
            raise ValueError("a value is missing") from None
        return word, end


def _key(text: str, i: int) -> tuple[str, int]:
    if text.startswith(Q, i) or text.startswith('"', i):
        key, i = read_value(text, i)
    else:
        end = text.find(":", i)
        if end < 0:
            raise _Cut
        key, i = text[i:end].strip(), end
    i = _skip(text, i)
    if i >= len(text):
        raise _Cut
    if text[i] != ":" or not isinstance(key, str) or not key:
        raise ValueError("not a key")
    return key, i + 1


def members(items: dict[str, str], parameters: dict[str, Any], i: int, rules: dict[str, str], comma: str) -> str:
    """The rule for an argument list: required members first, then each optional one maybe, with
    `comma` (a GBNF term) between those written."""
    required = [k for k in items if k in set(parameters.get("required") or [])]
    optional = [k for k in items if k not in required]
    chain = ""
    for n in reversed(range(len(optional))):
        rules[f"t{i}-opt{n}"] = f"( {comma} {items[optional[n]]} )? {chain}".strip()
        chain = f"t{i}-opt{n}"
    if required:
        body = f" {comma} ".join(items[k] for k in required) + (f" {chain}" if chain else "")
    else:
        firsts = [f"{items[k]} t{i}-opt{n + 1}" if n + 1 < len(optional) else items[k] for n, k in enumerate(optional)]
        body = f"( {' | '.join(firsts)} )?"
    rules[f"t{i}-args"] = body
    return f"t{i}-args"


def _value_segments(value: Any) -> Segments:
    """A value as Gemma 4's template writes it (format_argument, keys bare)."""
    if isinstance(value, str):
        return [(Q, False), (value, True), (Q, False)]
    if isinstance(value, dict):
        out: Segments = [("{", True)]
        for n, (k, v) in enumerate(value.items()):
            out += [("," if n else "", True), (f"{k}:", True), *_value_segments(v)]
        return out + [("}", True)]
    if isinstance(value, list):
        out = [("[", True)]
        for n, v in enumerate(value):
            out += [("," if n else "", True), *_value_segments(v)]
        return out + [("]", True)]
    return [(json.dumps(value), True)]


@dataclass(frozen=True)
class Gemma4Codec(ShapeCodec):
    def format_calls(self, calls: Sequence[PastCall]) -> Segments:
        out: Segments = []
        for call in calls:
            out += [(self.shape.call_open, False), (call.name, True), ("{", True)]
            args = call.arguments if isinstance(call.arguments, dict) else {}
            for n, (key, value) in enumerate(args.items()):
                out += [("," if n else "", True), (f"{key}:", True), *_value_segments(value)]
            out += [("}", True), (self.shape.call_close, False)]
        return tidy(out)

    def _args_rule(self, tool: ToolSpec, i: int, rules: dict[str, str], loosened: list[str], max_bytes: int) -> str:
        parameters = tool.parameters if tool.parameters is not None else {"type": "object"}
        text = excluding(Q, "g4-text", rules)
        quoted = f"{literal(Q)} {{}} {literal(Q)}"
        props, found = properties(parameters), []
        if not props:
            if isinstance(parameters, dict) and parameters.get("additionalProperties") is False:
                return '""'
            rules["g4-key"] = "[a-zA-Z0-9_.-]+"
            item = f'g4-key ":" {quoted.format(text)}'
            rules[f"t{i}-args"] = f'( {item} ( "," {item} )* )?'
            return f"t{i}-args"
        found += [f"#:{k}" for k in parameters if k not in _PLAIN_KEYWORDS]
        typed_keys = [k for k, s in props.items() if not is_text(s)]
        values, loose = member_rules(parameters, typed_keys, prefix=f"t{i}-", rules=rules,
                                     param=f"tools.{i}.parameters", max_bytes=max_bytes)
        found += loose
        items = {}
        for key, schema in props.items():
            value = values.get(key) or quoted.format(_text_value(schema, text, key, found))
            items[key] = f'{literal(key + ":")} {value}'
        loosened += [tool.name + entry for entry in found]
        return members(items, parameters, i, rules, '","')

    def parser(self, tools: Sequence[ToolSpec], marker: str, first: int, strict: bool) -> BlockParser:
        return WholeCallParser(self.shape, ToolSet(tools), first, strict, marker)


class WholeCallParser(CallReader):
    """Reads calls whose arguments are converted whole (`read`: from the text that opens them, the
    brace or parenthesis after the name, to (a dict, where they end); raises _Cut if the text ends
    first, ValueError if they cannot be read). Strict: a call is announced once its name is read."""

    def __init__(self, shape: Shape, tools: ToolSet, first: int, strict: bool, marker: str,
                 read: Callable[[str, int, bool], tuple[Any, int]] = read_value) -> None:
        super().__init__(shape, tools, first, strict, marker)
        self.read = read
        self.scanned = 0  # the arguments are read again only once a closing bracket has come

    def push(self, text: str, final: bool = False) -> list[Piece]:
        self.buf += text
        while not self.done and getattr(self, f"_{self.state}")(final):
            pass
        out, self.out = self.out, []
        return out

    def _pre(self, final: bool) -> bool:
        s = self.shape
        at = match((" " + s.separator + " " if self.calls else "") + s.call_open, self.buf, self.pos, final)
        closing = match(" " + s.close, self.buf, self.pos, final) if s.close and self.calls else FAIL
        if closing >= 0:
            self.pos = closing
            return self._end()
        if PARTIAL in (at, closing):
            return False
        if at == FAIL:
            return self._end() if self.calls else self._give_up()
        self.call_at, self.pos, self.state = self.pos, at, "name"
        return True

    def _name(self, final: bool) -> bool:
        start = self.shape.name_end
        brace = self.buf.find(start, self.pos)
        name = self.buf[self.pos:brace if brace >= 0 else len(self.buf)]
        if brace < 0 and not final and len(name) < 256 and not any(c.isspace() for c in name):
            return False
        name = name.strip()
        if brace < 0 or not name or any(c.isspace() for c in name):
            return self._fail_call()
        if not self.strict:  # (strict: the grammar wrote a declared name)
            name = self.tools.resolve(name)
            if name is None:
                return self._fail_call()
        self.name, self.args_at, self.pos, self.state = name, brace, brace, "args"
        self._emit(ToolCallStart(self.index, new_call_id(), name))
        return True

    def _args(self, final: bool) -> bool:
        closer = {"{": "}", "(": ")", "[": "]"}.get(self.shape.name_end, "")
        if not final and closer and closer not in self.buf[self.scanned:]:  # (cannot have ended yet)
            self.scanned = len(self.buf)
            return False
        self.scanned = len(self.buf)
        try:
            args, end = self.read(self.buf, self.args_at, False)
        except _Cut:
            if not final:
                return False
            return self._truncated()
        except ValueError:
            return self._fail_call()
        if not isinstance(args, dict):
            return self._fail_call()
        self._emit(ToolCallArguments(self.index, json.dumps(args, ensure_ascii=False)))
        self.pos, self.state = end, "post"
        return True

    def _post(self, final: bool) -> bool:
        at = match(" " + self.shape.call_close, self.buf, self.pos, final) if self.shape.call_close else self.pos
        if at == PARTIAL:
            return False
        self._commit()
        if at == FAIL:  # no closing token: the call stands, the block ends here
            return self._end()
        self.pos, self.state = at, "pre"
        return True

    def _truncated(self) -> bool:
        try:
            args, _ = self.read(self.buf, self.args_at, True)
        except (_Cut, ValueError):
            args = None
        if isinstance(args, dict):
            self._emit(ToolCallArguments(self.index, json.dumps(args, ensure_ascii=False)))
        elif not self.strict:
            return self._fail_call()
        self._commit()
        self.pos = len(self.buf)
        return self._end()


GEMMA4 = Gemma4Codec(
    "gemma4",
    Shape(call_open="<|tool_call>call:", name_end="{", args_close="}", call_close="<tool_call|>",
          marker="<|tool_call>"),
    trigger="<|tool_call>", result_open="<|tool_response>", result_close="<tool_response|>",
    visible_tokens=("<|tool_call>", "<tool_call|>", Q, "<|channel>", "<channel|>"))
