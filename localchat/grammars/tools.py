"""Grammars after a reasoning block, and the schema of a call's arguments. (The grammars that
force tool calls belong to each syntax's codec: localchat/families/codecs/.)"""

from __future__ import annotations

from typing import Any

LEAD = "[ \\n]{0,4} "  # the blank lines a model writes after </think>


def after_reasoning(grammar: str) -> str:
    """The same grammar, allowing the blank lines a model writes after its reasoning."""
    return grammar.replace("root ::= ", f"root ::= {LEAD}", 1)


def arguments_schema(parameters: Any) -> Any:
    """A tool's parameters as the schema its arguments are held to: a JSON object (every wire
    syntax writes one), also where the schema says no type (and so would take any value)."""
    if parameters is None:
        return {"type": "object"}
    if isinstance(parameters, dict) and "type" not in parameters:
        return {**parameters, "type": "object"}
    return parameters
