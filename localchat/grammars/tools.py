"""Grammars for tool calls and for JSON after a reasoning block.

A call is {"name": "<one of the tools>", <args key>: <that tool's own arguments>}, in the
family's wrapper. With a trigger (tool_choice "auto", or a model that thinks first), the
grammar covers only what follows the trigger text."""

from __future__ import annotations

import json
from typing import Any

from ..families.base import ToolSyntax
from .gbnf import MAX_BYTES, literal
from .schema import assemble, convert

LEAD = '[ \\n]{0,4} '  # the blank lines a model writes after </think>


def tools_grammar(tools: list[tuple[str, Any]], syntax: ToolSyntax, *, parallel: bool,
                  trigger: str = "", lead: bool = False, answer: Any = None, loosened: list[str] | None = None,
                  max_bytes: int = MAX_BYTES) -> str:
    """`tools` is [(name, parameters schema)]. With `trigger`, the grammar starts after it.
    With `answer` (a JSON schema), the output is either the calls or a JSON value for it.
    What a schema could not enforce is added to `loosened` as `name#/path:keyword` (no name
    for the answer's)."""
    rules: dict[str, str] = {}
    choices = []
    for i, (name, parameters) in enumerate(tools):
        converter = convert(parameters if parameters is not None else {"type": "object"}, prefix=f"t{i}-", rules=rules,
                            param=f"tools.{i}.parameters", max_bytes=max_bytes)
        args = converter.root_rule
        if loosened is not None:
            loosened += [name + entry for entry in converter.loosened]
        choices.append(f'{literal(f"{_dump(name)}, {_dump(syntax.args_key)}: ")} {args}')
    rules["call"] = f'( {" | ".join(choices)} ) "}}"'
    head = syntax.open + syntax.call_open + '{"name": '
    if trigger and not head.startswith(trigger):
        raise ValueError(f"trigger {trigger!r} does not start the tool calls {head!r}")
    first = head[len(trigger):]
    between = syntax.call_close + syntax.separator + syntax.call_open + '{"name": '
    more = f' ( {literal(between)} call )*' if parallel else ""
    parts = [literal(first)] if first else []
    parts.append("call" + more)
    if syntax.call_close + syntax.close:
        parts.append(literal(syntax.call_close + syntax.close))
    body = " ".join(parts)
    if answer is not None:
        converter = convert(answer, prefix="answer-", rules=rules, param="json_schema",
                            max_bytes=max_bytes)
        if loosened is not None:
            loosened += converter.loosened
        body = f"( {body} ) | {converter.root_rule}"
    return assemble(f"{LEAD} ( {body} )" if lead else body, rules)


def after_reasoning(grammar: str) -> str:
    """The same grammar, allowing the blank lines a model writes after its reasoning."""
    return grammar.replace("root ::= ", f"root ::= {LEAD}", 1)


def _dump(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)
