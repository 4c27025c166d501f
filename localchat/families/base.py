"""What a model family is: everything localchat knows about one prompt format."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ToolSyntax:
    """How a family's model calls tools: calls are JSON objects {"name": …, args_key: {…}},
    each wrapped in call_open/call_close, joined by separator, the whole in open/close.
    `trigger` is the text that starts the calls when tool_choice is "auto"."""

    open: str = ""
    close: str = ""
    call_open: str = ""
    call_close: str = ""
    separator: str = "\n"
    args_key: str = "arguments"
    trigger: str = ""
    # Prompt wording when the chat template has no `tools` variable of its own.
    instructions: str = ("You can call these tools. To call tools, answer with nothing but the calls, "
                         "written as: {example}\nThe tools, as JSON schemas:\n{tools}")
    result_open: str = ""
    result_close: str = ""
    visible_tokens: tuple[str, ...] = ()  # control tokens that must appear in the output text
    tools_separator: str = "\n"  # between the tools' schemas in `instructions`

    def format_calls(self, calls: list[dict[str, Any]]) -> Segments:
        """Assistant tool calls from the history, written the way the model writes them: our
        markup as template text, the calls' JSON as plain text."""
        out: Segments = [(self.open, False)]
        for i, c in enumerate(calls):
            call = {"name": c["function"]["name"], self.args_key: c["function"]["arguments"]}
            out += [(self.separator if i else "", False), (self.call_open, False),
                    (json.dumps(call, ensure_ascii=False), True), (self.call_close, False)]
        return _tidy(out + [(self.close, False)])

    def describe(self, tools: list[dict[str, Any]]) -> Segments:
        """The tools in the family's wording (the tools' own text stays plain)."""
        example = "".join(t for t, _ in self.format_calls(
            [{"function": {"name": "tool_name", "arguments": {"argument": "value"}}}]))
        listing = self.tools_separator.join(json.dumps(t, ensure_ascii=False) for t in tools)
        before, _, after = self.instructions.format(example=example, tools="\x00").partition("\x00")
        return _tidy([(before, False), (listing, True), (after, False)])

    def format_result(self, content: str) -> Segments:
        return _tidy([(self.result_open, False), (content, True), (self.result_close, False)])


Segments = list[tuple[str, bool]]  # (text, is_plain): only plain=False text may hold control tokens


def _tidy(segments: Segments) -> Segments:
    return [s for s in segments if s[0]]


GENERIC_TOOLS = ToolSyntax(open='{"tool_calls": [', close="]}", separator=", ", trigger='{"tool_calls":',
                           result_open="Tool result: ")


@dataclass(frozen=True)
class Family:
    name: str
    # Jinja chat template used when the GGUF carries none (same variables as HF templates:
    # messages, add_generation_prompt, bos_token, eos_token).
    template: str
    # Text that ends an assistant turn; generation stops on these tokens.
    stop_tokens: tuple[str, ...]
    # Every control token of the family's vocabulary (also what the test fixtures put in a tiny model).
    control_tokens: tuple[str, ...]
    # Substrings that identify this family's chat template.
    template_markers: tuple[str, ...]
    # GGUF `general.architecture` values that imply this family when nothing else tells.
    architectures: tuple[str, ...] = ()
    bos_token: str = ""
    eos_token: str = ""
    tools: ToolSyntax = GENERIC_TOOLS
    reasoning: tuple[str, str] | None = None  # (open, close) think tags, for families that think
