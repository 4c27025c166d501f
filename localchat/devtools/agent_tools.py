"""An agent-sized tool set, as coding agents send them: 100 tools, ~200 KB of schemas (no keys
beyond those listed, but in a free-form `options`), with
long maxLength strings, empty `properties`, `$ref`s into `$defs`, and `anyOf` branches that
carry `properties`. Used by the tests and by scripts/bench --tools."""

from __future__ import annotations

import json
from typing import Any


def agent_tools(n: int = 100) -> list[dict[str, Any]]:
    return [_tool(i) for i in range(n)]


def _tool(i: int) -> dict[str, Any]:
    doc = f"Tool {i}: " + "reads, edits or searches files in the workspace and reports what it found. " * 6
    params: dict[str, Any] = {
        "type": "object",
        "$defs": {"range": {"type": "object", "properties": {"start": {"type": "integer", "minimum": 0},
                                                               "end": {"type": "integer", "minimum": 0}},
                            "required": ["start", "end"], "additionalProperties": False}},
        "properties": {
            "path": {"type": "string", "maxLength": 4096, "description": "Absolute path of the file. " * 4},
            "content": {"type": "string", "maxLength": 100000, "description": "The new content. " * 4},
            "range": {"$ref": "#/$defs/range"},
            "options": {"type": "object", "properties": {}, "description": "Extra options (free-form). " * 3},
            "mode": {"anyOf": [
                {"type": "object", "properties": {"kind": {"const": "regex"}, "pattern": {"type": "string",
                                                                                          "maxLength": 2000}},
                 "required": ["kind"]},
                {"type": "object", "properties": {"kind": {"const": "literal"}, "text": {"type": "string"}},
                 "required": ["kind"]}]},
            "flags": {"type": "array", "items": {"type": "string", "enum": ["recursive", "hidden", "follow"]},
                      "maxItems": 3},
            "note": {"type": ["string", "null"], "description": "Why. " * 10},
        },
        "required": ["path"],
        "additionalProperties": False,  # as Claude Code's and Codex's tools say (zod's JSON schemas)
    }
    for k in range(i % 4):
        params["properties"][f"extra_{k}"] = {"type": "string", "maxLength": 8000, "description": "x" * 120}
    return {"type": "function", "function": {"name": f"tool_{i:03d}", "description": doc, "parameters": params}}


def size(tools: list[dict[str, Any]]) -> int:
    return len(json.dumps(tools))
