"""Grammars after a reasoning block. (The grammars that force tool calls belong to each
syntax's codec: localchat/families/codecs/.)"""

from __future__ import annotations

LEAD = "[ \\n]{0,4} "  # the blank lines a model writes after </think>


def after_reasoning(grammar: str) -> str:
    """The same grammar, allowing the blank lines a model writes after its reasoning."""
    return grammar.replace("root ::= ", f"root ::= {LEAD}", 1)
