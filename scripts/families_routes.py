"""The checks that read calls back (scripts/families.py): the template's own history, the
forced call on each route, the reasoning split."""

from __future__ import annotations

import json
from typing import Any

from families_checks import ARGS, ASK, CALL, TOOLS, Prepared, Row, Server, _openai, _render, _valid
from localchat.neutral import ToolSpec
from localchat.neutral import Delta, ReasoningDelta, ToolCallArguments, ToolCallStart


def _split(p: Prepared, text: str, thinking: bool = False) -> tuple[str, str, list[tuple[str, Any]]]:
    tools = [ToolSpec(t["function"]["name"], parameters=t["function"]["parameters"]) for t in TOOLS]
    splitter = p.family.splitter(tools, thinking, strict=False)
    content, reasoning, calls = "", "", {}
    for piece in splitter.push(text) + splitter.finish():
        if isinstance(piece, Delta):
            content += piece.content
        elif isinstance(piece, ReasoningDelta):
            reasoning += piece.text
        elif isinstance(piece, ToolCallStart):
            calls[piece.index] = [piece.name, ""]
        elif isinstance(piece, ToolCallArguments):
            calls[piece.index][1] += piece.fragment
    return content, reasoning, [(n, json.loads(a)) for n, a in calls.values()]


def round_trip(p: Prepared, row: Row) -> None:
    """The assistant's call as the template writes it into the history reads back through the codec."""
    before = _render(p, ASK)
    after = _render(p, [*ASK, {"role": "assistant", "content": "", "tool_calls": [CALL]}], generation=False)
    common = 0
    while common < min(len(before), len(after)) and before[common] == after[common]:
        common += 1
    # The prompt may end inside the call's first token (`<think>` and `<｜tool▁calls▁begin｜>` share
    # their `<`): read from a little before where the two part.
    starts = range(common, max(common - 24, 0) - 1, -1)
    if any(("get_weather", ARGS) in _split(p, after[start:])[2] for start in starts):
        row.history = "ok"
    else:
        row.history = "no"
        row.problems.append(f"the template writes the call as {after[common:][:120]!r}, which the codec does not read")


def forced_call(p: Prepared, row: Row, server: Server, bias: dict[str, float]) -> None:
    body = {"model": p.model, "messages": ASK, "tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False,
            "max_tokens": 600, "seed": 1, "logit_bias": bias}
    r = server.post("/v1/chat/completions", body)
    if r.status_code != 200:
        row.call = str(r.status_code)
        row.problems.append(f"forced call: {r.status_code} {r.text[:160]}")
        return
    choice = r.json()["choices"][0]
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
             for c in choice["message"].get("tool_calls") or []]
    problem = _valid(calls) or ("" if choice["finish_reason"] == "tool_calls" else choice["finish_reason"])
    row.call = "ok" if not problem else "no"
    if problem:
        row.problems.append(f"forced call: {problem} ({(choice['message'].get('content') or '')[:80]!r})")


def reasoning(p: Prepared, row: Row, server: Server, thinking: bool) -> None:
    """When the template leaves the model in a think block, the answer's reasoning is split off."""
    if not thinking:
        return
    close = p.family.reasoning[1]  # type: ignore[index]
    bias = {str(p.vocab.index(close)): -100} if close in p.vocab else {}
    r = server.post("/v1/chat/completions", {"model": p.model, "messages": ASK, "max_tokens": 12, "seed": 2,
                                             "logit_bias": bias})
    message = r.json()["choices"][0]["message"] if r.status_code == 200 else {}
    ok = bool(message.get("reasoning_content")) and not (message.get("content") or "").strip()
    row.reasoning = "ok" if ok else "no"
    if not ok:
        row.problems.append(f"reasoning not split: {message}")


def other_routes(p: Prepared, row: Row, server: Server, bias: dict[str, float]) -> None:
    """The forced call on Anthropic Messages and OpenAI Responses; Ollama: a call or JSON."""
    results = []
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in TOOLS]
    r = server.post("/v1/messages", {"model": p.model, "max_tokens": 600, "messages": ASK[1:], "system": ASK[0]["content"],
                                     "tools": tools, "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
                                     "seed": 1, "logit_bias": bias})
    uses = [(b["name"], b["input"]) for b in r.json().get("content", []) if b.get("type") == "tool_use"] \
        if r.status_code == 200 else []
    results.append(("messages", _valid(uses) if r.status_code == 200 else str(r.status_code)))
    rtools = [{"type": "function", **t["function"]} for t in TOOLS]
    r = server.post("/v1/responses", {"model": p.model, "input": _openai(ASK), "tools": rtools,
                                      "tool_choice": "required", "parallel_tool_calls": False,
                                      "max_output_tokens": 600, "seed": 1, "logit_bias": bias})
    items = [(i["name"], json.loads(i["arguments"])) for i in r.json().get("output", []) if i.get("type") == "function_call"] \
        if r.status_code == 200 else []
    results.append(("responses", _valid(items) if r.status_code == 200 else str(r.status_code)))
    results.append(("ollama", _ollama(p, server)))
    bad = [f"{name}: {problem}" for name, problem in results if problem]
    row.protocols = "ok" if not bad else "no"
    if bad:
        row.problems.append("routes: " + "; ".join(bad))


def _ollama(p: Prepared, server: Server) -> str:
    """Ollama has no tool_choice: with `format`, the answer is a call or JSON; the first seed
    whose answer is a call shows the call parses on this route."""
    for seed in range(1, 9):
        r = server.post("/api/chat", {"model": p.model, "messages": ASK, "tools": TOOLS, "stream": False,
                                      "format": {"type": "integer", "minimum": 5, "maximum": 5},
                                      "options": {"seed": seed, "num_predict": 600}})
        if r.status_code != 200:
            return str(r.status_code)
        calls = [(c["function"]["name"], c["function"]["arguments"]) for c in r.json()["message"].get("tool_calls") or []]
        if calls:
            return _valid(calls)
    return "no call in 8 seeds"
