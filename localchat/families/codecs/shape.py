"""Most tool-call syntaxes are one shape: an optional opening, then calls (each a name and its
arguments between fixed texts), separated, then an optional closing. A `Shape` says which texts;
`ShapeCodec` writes calls in it, makes its grammar and reads it back (reader.py).

    Hermes     <tool_call>\\n{"name": N, "arguments": A}\\n</tool_call>     (name in the JSON)
    Mistral    [TOOL_CALLS]N[ARGS]A                                      (name between texts)
    Qwen3-Coder <tool_call>\\n<function=N>\\n<parameter=K>\\nV\\n</parameter>\\n</function>\\n</tool_call>

Fixed texts may hold `{index}` (the call's number) and `{id}` (a 9-character call id)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...grammars.gbnf import literal
from ...grammars.tools import arguments_schema
from ...grammars.schema import assemble, convert
from ...grammars.text import fixed
from .base import BlockParser, PastCall, Codec, GrammarOptions, Segments, ToolSpec, ToolSet, tidy
from .pattern import fill
from .reader import ShapeParser
from .xmlargs import XmlArgs, args_rule, is_text, properties

LEAD = "[ \\n]{0,4} "  # the blank lines a model writes after its reasoning


@dataclass(frozen=True)
class Shape:
    open: str = ""  # before the first call
    close: str = ""  # after the last
    call_open: str = ""  # before each call
    separator: str = ""  # between calls
    call_close: str = ""  # after each call
    name_key: str = ""  # the name inside a JSON object: {"<name_key>": N, "<args_key>": A}
    args_key: str = "arguments"
    id_key: str = ""  # that object starts with a call number: {"<id_key>": "0", …}
    name_end: str = ""  # else the name is followed by this text, then the arguments
    name_ends: tuple[str, ...] = ()  # other texts a model writes there (read, never written)
    args_open: str = ""  # around JSON arguments (a code fence)
    args_close: str = ""
    xml: XmlArgs | None = None  # arguments as elements instead of JSON
    marker: str = ""  # the text that opens a block (default: the fixed text before the first name)

    @property
    def json_form(self) -> bool:
        return bool(self.name_key)

    @property
    def pre(self) -> str:
        """The fixed text before a call's name."""
        if self.json_form:
            head = f'"{self.id_key}": "{{index}}", ' if self.id_key else ""
            return self.call_open + "{" + head + f'"{self.name_key}": '
        return self.call_open

    @property
    def mids(self) -> tuple[str, ...]:
        """The fixed text between the name and the arguments (the canonical one first)."""
        if self.json_form:
            return (f', "{self.args_key}": ',)
        return tuple(m + self.args_open for m in (self.name_end, *self.name_ends))

    @property
    def post(self) -> str:
        return ("}" + self.call_close) if self.json_form else self.args_close + self.call_close

    @property
    def opener(self) -> str:
        """The text a block starts with: its first fixed piece (for a bare JSON object, `{"name"`)."""
        if self.marker:
            return self.marker
        start = (self.open or self.call_open).lstrip()
        cut = min([len(start)] + [m.start() for m in re.finditer(r"\s|\{index\}|\{id\}", start)])
        return start[:cut] or ('{ "' + self.name_key + '"' if self.json_form else "")  # (any spacing: pattern.py)


def _placeholders(text: str) -> str:
    """A regular expression for a syntax's fixed text, its `{index}` and `{id}` as text.fixed writes them."""
    return "".join("[0-9]{1,3}" if p in ("{index}", "{number}") else "[a-zA-Z0-9]{9}" if p == "{id}" else re.escape(p)
                   for p in re.split(r"(\{index\}|\{number\}|\{id\})", text) if p)


def _json_type(value: Any) -> str:
    return ("boolean" if isinstance(value, bool) else "null" if value is None else "number"
            if isinstance(value, int | float) else "object" if isinstance(value, dict) else "array")


def short_id(call_id: str) -> str:
    """A 9-character alphanumeric id for a call id (Mistral's templates require them)."""
    if re.fullmatch(r"[A-Za-z0-9]{9}", call_id):
        return call_id
    return hashlib.sha1(call_id.encode()).hexdigest()[:9]


@dataclass(frozen=True)
class ShapeCodec(Codec):
    name: str
    shape: Shape
    alternatives: tuple[Shape, ...] = ()  # other shapes models write unasked (read leniently)
    trigger: str = ""  # default: the shape's opener
    instructions: str = ("You can call these tools. To call tools, answer with nothing but the calls, "
                         "written as: {example}\nThe tools, as JSON schemas:\n{tools}")
    result_open: str = ""
    result_close: str = ""
    visible_tokens: tuple[str, ...] = ()
    tools_separator: str = "\n"
    describe_as: str = "openai"  # how each tool is listed: "openai" ({"type": "function", …}) or "function"
    # A call object begun anywhere (a code fence, a wrong tag, bare) as `{"<name_key>": "TOOL"` starts a
    # grammar that forces the rest of it (in a lazy grammar): the JSON-form alternatives' trigger.
    object_triggers: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.trigger:
            object.__setattr__(self, "trigger", self.shape.opener)

    @property
    def markers(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(m for m in (self.trigger, self.shape.opener,
                                                *(s.opener for s in self.alternatives)) if m))

    # -- writing ---------------------------------------------------------------------------

    def format_calls(self, calls: Sequence[PastCall]) -> Segments:
        s = self.shape
        out: Segments = [(s.open, False)]
        for i, call in enumerate(calls):
            cid = short_id(call.id or f"call{i}")
            out.append((fill(s.separator, i, cid) if i else "", False))
            if s.json_form:
                obj = ({s.id_key: str(i)} if s.id_key else {}) | {s.name_key: call.name, s.args_key: call.arguments}
                out += [(fill(s.call_open, i, cid), False), (json.dumps(obj, ensure_ascii=False), True),
                        (fill(s.call_close, i, cid), False)]
                continue
            out += [(fill(s.call_open, i, cid), False), (call.name, True), (fill(s.mids[0], i, cid), False)]
            out += self._xml_args(call.arguments) if s.xml else [(json.dumps(call.arguments, ensure_ascii=False), True)]
            out.append((fill(s.post, i, cid), False))
        return tidy(out + [(s.close, False)])

    def _xml_args(self, arguments: Any) -> Segments:
        xml, out = self.shape.xml, []
        assert xml is not None
        nl = "\n" if xml.newline else ""
        for key, value in (arguments.items() if isinstance(arguments, dict) else ()):
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            if xml.cdata and isinstance(value, str) and any(c in value for c in "<&\n"):
                text = f"<![CDATA[{text}]]>"
            close = xml.key_close_for(isinstance(value, str)).replace("{type}", _json_type(value))
            out += [(xml.key_open, False), (key, True), (close + nl, False), (text, True),
                    (nl + xml.close_for(key) + xml.between, False)]
        return out

    def format_result(self, content: str, call: PastCall | None = None) -> Segments:
        return tidy([(self.result_open, False), (content, True), (self.result_close, False)])

    def describe(self, tools: Sequence[ToolSpec]) -> Segments:
        example = "".join(t for t, _ in self.format_calls([PastCall("tool_name", {"argument": "value"})]))
        listed = [t.openai() if self.describe_as == "openai" else t.openai()["function"] for t in tools]
        listing = self.tools_separator.join(json.dumps(t, ensure_ascii=False) for t in listed)
        before, _, after = self.instructions.format(example=example, tools="\x00").partition("\x00")
        return tidy([(before, False), (listing, True), (after, False)])

    # -- the grammar -----------------------------------------------------------------------

    def grammar(self, tools: Sequence[ToolSpec], options: GrammarOptions) -> str:
        s, rules = self.shape, {}
        loosened = options.loosened if options.loosened is not None else []
        choices = []
        for i, tool in enumerate(tools):
            args = self._args_rule(tool, i, rules, loosened, options.max_bytes)
            name = json.dumps(tool.name, ensure_ascii=False) if s.json_form else tool.name
            choices.append(f"{literal(name)} {fixed(s.mids[0])} {args}" if s.mids[0] else f"{literal(name)} {args}")
        rules["call"] = f"( {' | '.join(choices)} )" + (f" {fixed(s.post)}" if s.post else "")
        start = s.open + s.pre
        trigger = self.trigger if options.lazy else ""
        if not start.startswith(trigger):
            raise ValueError(f"trigger {trigger!r} does not start the tool calls {start!r}")
        parts = [fixed(start[len(trigger):]) if start[len(trigger):] else "", "call"]
        if options.parallel:
            parts.append(f"( {fixed(s.separator + s.pre)} call )*")
        parts.append(fixed(s.close) if s.close else "")
        body = " ".join(p for p in parts if p)
        if options.answer is not None:
            converter = convert(options.answer, prefix="answer-", rules=rules,
                                param="json_schema", max_bytes=options.max_bytes, closed=options.closed)
            loosened += converter.loosened
            body = f"( {body} ) | {converter.root_rule}"
        return assemble(f"{LEAD} ( {body} )" if options.lead else body, rules)

    def _args_rule(self, tool: ToolSpec, i: int, rules: dict[str, str], loosened: list[str], max_bytes: int) -> str:
        parameters = arguments_schema(tool.parameters)
        found: list[str] = []
        if self.shape.xml is not None:
            rule = args_rule(self.shape.xml, parameters, i, rules, found, max_bytes)
        else:
            converter = convert(parameters, prefix=f"t{i}-", rules=rules, param=f"tools.{i}.parameters",
                                max_bytes=max_bytes)
            rule, found = converter.root_rule, list(converter.loosened)
        loosened += [tool.name + entry for entry in found]
        return rule

    def arguments_anchor(self, tool: ToolSpec, tools: Sequence[ToolSpec]) -> str | None:
        """`"NAME", "arguments": ` (any spacing, `parameters` too, as the loose triggers write it), or
        NAME and the text after it; none for arguments written as XML elements."""
        s = self.shape
        if s.xml is not None:
            return None
        if s.json_form:
            quoted = json.dumps(tool.name, ensure_ascii=False)
            name = f'"{ToolSet(tools).spellings(tool.name)}"' if quoted == f'"{tool.name}"' else re.escape(quoted)
            keys = "|".join(re.escape(json.dumps(k)) for k in dict.fromkeys((s.args_key, "arguments", "parameters")))
            return name + r"\s*,\s*(?:" + keys + r")\s*:\s*"
        mids = "|".join(_placeholders(m) for m in s.mids)
        return re.escape(tool.name) + f"(?:{mids})"

    @property
    def closers(self) -> tuple[str, ...]:
        if not self.object_triggers:
            return ()
        return tuple(sorted({c.strip() for s in (self.shape, *self.alternatives)
                             for c in (s.close, s.call_close) if c.strip()}, key=lambda c: (-len(c), c)))

    def loose_triggers(self, tools: Sequence[ToolSpec], options: GrammarOptions) -> list[tuple[str, str]]:
        """`{"name": "TOOL"` (any spacing), for each tool: the rest of the call object (its
        arguments under `arguments` or `parameters`), then at most the closing text of one of the
        alternatives; then the output ends. And the element alternatives' triggers (below)."""
        if not self.object_triggers or not self.shape.json_form:
            return []
        ws = "[ \\t\\n]{0,20}"
        tail = f" ( {ws} ( {' | '.join(literal(c) for c in self.closers)} ) )?" if self.closers else ""
        keys = " | ".join(literal(json.dumps(k)) for k in dict.fromkeys((self.shape.args_key, "arguments", "parameters")))
        out, names = [], ToolSet(tools)
        for i, tool in enumerate(tools):
            rules: dict[str, str] = {}
            args = self._args_rule(tool, i, rules, [], options.max_bytes)
            grammar = assemble(f'{ws} "," {ws} ( {keys} ) {ws} ":" {ws} {args} {ws} "}}"{tail}', rules)
            quoted = json.dumps(tool.name, ensure_ascii=False)  # (`bash` for `Bash` too: the parser resolves it)
            name = f'"{names.spellings(tool.name)}"' if quoted == f'"{tool.name}"' else re.escape(quoted)
            out.append((r"\{\s*" + re.escape(json.dumps(self.shape.name_key)) + r"\s*:\s*" + name, grammar))
        return out + self._element_triggers(tools, options)

    def _element_triggers(self, tools: Sequence[ToolSpec], options: GrammarOptions) -> list[tuple[str, str]]:
        """For an alternative whose arguments are XML elements or attributes, the text that opens a call to
        TOOL (`<tools>` then `<TOOL` and a space; `<function=TOOL>`): the rest of that call (attributes in
        single quotes; elements), its closing text, at most its block's; then the output ends."""
        out, names = [], ToolSet(tools)
        for s in self.alternatives:
            if s.xml is None:
                continue
            stop = s.mids[0].split("\n")[0]  # (the fixed text right after the name: `>`; none: a space)
            rest = s.mids[0][len(stop):]  # (then, before the arguments: Qwen3-Coder's newline)
            head = (re.escape(s.open.strip()) + r"\s*" if s.open.strip() else "") + re.escape(s.call_open)
            ahead = re.escape(stop) if stop else r"(?=[\s/])"
            lead = f"{fixed(rest)} " if rest else ""
            tail = f" ( {fixed(s.close)} )?" if s.close else ""
            for i, tool in enumerate(tools):
                rules: dict[str, str] = {}
                args = args_rule(s.xml, arguments_schema(tool.parameters), i, rules, [], options.max_bytes)
                out.append((head + f"(?:{names.spellings(tool.name)})" + ahead,
                            assemble(f"{lead}{args} {fixed(s.post)}{tail}", rules)))
        return out

    # -- reading ---------------------------------------------------------------------------

    def parser(self, tools: Sequence[ToolSpec], marker: str, first: int, strict: bool) -> BlockParser:
        shape = next((s for s in (self.shape, *self.alternatives) if s.opener == marker), self.shape)
        return ShapeParser(shape, ToolSet(tools), first, strict and shape is self.shape, marker)


__all__ = ["Shape", "ShapeCodec", "XmlArgs", "is_text", "properties", "short_id"]
