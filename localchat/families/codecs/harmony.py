"""OpenAI's harmony format (gpt-oss): every message has a header and a channel.

    <|channel|>analysis<|message|>REASONING<|end|>
    <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}<|call|>
    <|start|>assistant<|channel|>final<|message|>ANSWER<|return|>

Reasoning is the analysis channel, calls are commentary messages to `functions.NAME`, the answer
is the final channel. `<|call|>` and `<|return|>` end generation (one call per turn). The
template's `reasoning_effort` (low / medium / high) is the reasoning switch."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from ...grammars.gbnf import literal
from ...grammars.tools import arguments_schema
from ...grammars.schema import assemble, convert
from ...grammars.text import excluding
from .base import BlockParser, PastCall, Codec, GrammarOptions, Segments, ToolSpec, tidy
from .harmony_split import CALL, CHANNEL, CONSTRAIN, END, MESSAGE, START, HarmonySplitter

CALL_HEAD = f"{CHANNEL}commentary to=functions."
JSON_HEAD = f" {CONSTRAIN}json{MESSAGE}"


@dataclass(frozen=True)
class HarmonyCodec(Codec):
    name: str = "harmony"
    trigger: str = "to=functions."
    visible_tokens: tuple[str, ...] = (START, END, MESSAGE, CHANNEL, CONSTRAIN)

    def format_calls(self, calls: Sequence[PastCall]) -> Segments:
        out: Segments = []
        for i, call in enumerate(calls):
            out += [(f"{START}assistant" if i else "", False), (CALL_HEAD, False), (call.name, True),
                    (JSON_HEAD, False), (json.dumps(call.arguments, ensure_ascii=False), True), (CALL, False)]
        return tidy(out)

    def format_result(self, content: str, call: PastCall | None = None) -> Segments:
        name = call.name if call else "tool"
        return tidy([(f"{START}functions.", False), (name, True), (f" to=assistant{CHANNEL}commentary{MESSAGE}", False),
                     (content, True), (END, False)])

    def describe(self, tools: Sequence[ToolSpec]) -> Segments:
        listing = "\n".join(json.dumps(t.openai()["function"], ensure_ascii=False) for t in tools)
        return [("# Tools\n\n## functions\n\nCalls to these tools must go to the commentary channel: 'functions'.\n",
                 False), (listing, True)]

    def grammar(self, tools: Sequence[ToolSpec], options: GrammarOptions) -> str:
        rules: dict[str, str] = {}
        loosened = options.loosened if options.loosened is not None else []
        choices = []
        for i, tool in enumerate(tools):
            parameters = arguments_schema(tool.parameters)
            converter = convert(parameters, prefix=f"t{i}-", rules=rules, param=f"tools.{i}.parameters",
                                max_bytes=options.max_bytes)
            loosened += [tool.name + entry for entry in converter.loosened]
            choices.append(f"{literal(tool.name)} header {converter.root_rule}")
        rules["header"] = (f'( {literal(JSON_HEAD)} | {literal(CHANNEL + "commentary json" + MESSAGE)} | '
                           f'{literal(CHANNEL + "commentary " + CONSTRAIN + "json" + MESSAGE)} )')
        rules["call"] = f"( {' | '.join(choices)} )"
        if options.lazy:  # free text until "to=functions.": the name, the rest of the header, the arguments
            return assemble("call", rules)
        excluding(END, "analysis-text", rules)
        rules["analysis"] = f'{literal(CHANNEL + "analysis" + MESSAGE)} analysis-text {literal(END + START + "assistant")}'
        body = f"{literal(CALL_HEAD)} call"
        if options.answer is not None:
            converter = convert(options.answer, prefix="answer-", rules=rules,
                                param="json_schema", max_bytes=options.max_bytes, closed=options.closed)
            loosened += converter.loosened
            body = f"( {body} | {literal(CHANNEL + 'final' + MESSAGE)} {converter.root_rule} )"
        return assemble(f"analysis? {body}", rules)

    def splitter(self, reasoning: tuple[str, str] | None, thinking: bool, tools: Sequence[ToolSpec] | None,
                 strict: bool) -> HarmonySplitter:
        return HarmonySplitter(tools, strict)

    def parser(self, tools: Sequence[ToolSpec], marker: str, first: int, strict: bool) -> BlockParser:
        raise NotImplementedError("harmony output is read whole by HarmonySplitter")


HARMONY = HarmonyCodec()
