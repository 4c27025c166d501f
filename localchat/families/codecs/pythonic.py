"""Pythonic calls (Liquid's LFM2 / LFM2.5): a Python list of calls with keyword arguments,
`<|tool_call_start|>[get_weather(city='Paris', days=2), add(a=1, b=2)]<|tool_call_end|>`. Values
are Python literals (JSON's true / false / null read too; the template writes strings between
single quotes, unescaped, so a raw newline inside one is read as itself); the grammar writes
them as JSON values, which read the same."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...grammars.gbnf import literal
from ...grammars.members import member_rules
from .base import BlockParser, PastCall, Segments, ToolSpec, ToolSet, tidy
from .gemma4 import _BARE, WholeCallParser, _Cut, _skip, members
from .shape import Shape, ShapeCodec
from .xmlargs import _PLAIN_KEYWORDS, properties

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "b": "\b", "f": "\f", "\\": "\\", "'": "'", '"': '"', "/": "/"}


def _string(text: str, i: int, cut: bool) -> tuple[str, int]:
    quote, out, i = text[i], [], i + 1
    while i < len(text):
        c = text[i]
        if c == quote:
            return "".join(out), i + 1
        if c == "\\" and i + 1 < len(text):
            e = text[i + 1]
            if e == "u":  # (a surrogate pair is two escapes)
                n = 12 if text.startswith("\\u", i + 6) else 6
                try:
                    out.append(json.loads(f'"{text[i:i + n]}"'))
                    i += n
                    continue
                except ValueError:
                    pass
            out.append(_ESCAPES.get(e, "\\" + e))
            i += 2
            continue
        if c == "\\" and not cut:
            break
        out.append(c)
        i += 1
    if cut:
        return "".join(out), len(text)
    raise _Cut


def read_py(text: str, i: int, cut: bool = False) -> tuple[Any, int]:
    """A Python literal from text[i:] (a call's `(k=v, …)` is read as a dict)."""
    i = _skip(text, i)
    if i >= len(text):
        raise _Cut
    c = text[i]
    if c in "'\"":
        return _string(text, i, cut)
    if c in "([{":
        close = {"(": ")", "[": "]", "{": "}"}[c]
        out: Any = [] if c == "[" else {}
        i += 1
        while True:
            i = _skip(text, i)
            if i >= len(text):
                if cut:
                    return out, i
                raise _Cut
            if text[i] == close:
                return out, i + 1
            if text[i] == ",":
                i += 1
                continue
            try:
                if c == "[":
                    value, i = read_py(text, i, cut)
                    out.append(value)
                    continue
                if c == "(":  # keyword=value
                    end = text.find("=", i)
                    if end < 0:
                        raise _Cut
                    key, i = text[i:end].strip(), end + 1
                    if not key.isidentifier():
                        raise ValueError("not a keyword argument")
                else:
                    key, i = read_py(text, i, cut)
                    i = _skip(text, i)
                    if i >= len(text):
                        raise _Cut
                    if text[i] != ":" or not isinstance(key, str):
                        raise ValueError("not a key")
                    i += 1
                out[key], i = read_py(text, i, cut)
            except _Cut:
                if cut:
                    return out, len(text)
                raise
    end = i
    while end < len(text) and text[end] not in ",)]}":
        end += 1
    if end == len(text) and not cut:
        raise _Cut
    word = text[i:end].strip()
    if word in _BARE:
        return _BARE[word], end
    try:
        return json.loads(word), end
    except ValueError:
        raise ValueError(f"not a literal: {word[:40]!r}") from None


def _py(value: Any) -> str:
    """A value as LFM2.5's template writes it (strings quoted, not escaped; objects as JSON)."""
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_py(v) for v in value) + "]"
    return repr(value) if isinstance(value, (bool, type(None))) else json.dumps(value)


@dataclass(frozen=True)
class PythonicCodec(ShapeCodec):
    def format_calls(self, calls: Sequence[PastCall]) -> Segments:
        s = self.shape
        out: Segments = [(s.open, False)]
        for n, call in enumerate(calls):
            args = call.arguments if isinstance(call.arguments, dict) else {}
            written = ", ".join(f"{k}={_py(v)}" for k, v in args.items())
            out += [(s.separator if n else "", True), (f"{call.name}({written})", True)]
        return tidy(out + [(s.close, False)])

    def _args_rule(self, tool: ToolSpec, i: int, rules: dict[str, str], loosened: list[str], max_bytes: int) -> str:
        parameters = tool.parameters if tool.parameters is not None else {"type": "object"}
        props = properties(parameters)
        if not props:
            if isinstance(parameters, dict) and parameters.get("additionalProperties") is False:
                return '""'
            rules["py-key"] = "[a-zA-Z_] [a-zA-Z0-9_]{0,63}"
            rules["py-value"] = '"\\"" [^"\\\\\\n]{0,1024} "\\"" | "-"? [0-9]{1,15} | "true" | "false"'
            rules[f"t{i}-args"] = '( py-key "=" py-value ( ", " py-key "=" py-value )* )?'
            return f"t{i}-args"
        found = [f"#:{k}" for k in parameters if k not in _PLAIN_KEYWORDS]
        values, loose = member_rules(parameters, list(props), prefix=f"t{i}-", rules=rules,
                                     param=f"tools.{i}.parameters", max_bytes=max_bytes)
        loosened += [tool.name + entry for entry in found + loose]
        items = {key: f"{literal(key + '=')} {values[key]}" for key in props}
        return members(items, parameters, i, rules, '", "')

    def parser(self, tools: Sequence[ToolSpec], marker: str, first: int, strict: bool) -> BlockParser:
        return WholeCallParser(self.shape, ToolSet(tools), first, strict, marker, read_py)


# LFM2 / LFM2.5 (Liquid AI)
LFM2 = PythonicCodec(
    "pythonic", Shape(open="<|tool_call_start|>[", close="]<|tool_call_end|>", separator=", ", name_end="(",
                      args_close=")", marker="<|tool_call_start|>"),
    trigger="<|tool_call_start|>", visible_tokens=("<|tool_call_start|>", "<|tool_call_end|>"),
    instructions="List of tools: [{tools}]\nTo call tools, write: {example}", tools_separator=", ",
    describe_as="function")
