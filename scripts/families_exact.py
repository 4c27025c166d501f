"""The `exact` column of the template conformance table (scripts/families.py): localchat's
rendering of a few conversations, byte for byte against the template's own rendering with
plain jinja2 (localchat/devtools/plain_jinja.py: HF's set-up, the messages as the client sent them, the
model's BOS / EOS tokens, the variables llama.cpp gives every template).

A conversation is compared only where localchat means to render exactly what the template
renders: not a tool call's conversation where the template writes no tool calls itself and the
family's codec writes them (`codec`); and without the system prompt where the template refuses
one (`no system`: localchat folds it into the first user turn). What differs for a reason this
project accepts is named in EXPLAINED (the row passes, the table lists it under Notes)."""

from __future__ import annotations

import json
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from jinja2.exceptions import SecurityError

from localchat.api.openai.messages import Message as OpenAIMessage, said
from localchat.errors import LocalchatError
from localchat.families.render import takes_system, template_caps
from localchat.generation.constraints import OutputRules, ToolSpec, codec_tools
from localchat.generation.conversation import render_conversation
from localchat.neutral import GenerationRequest
from localchat.devtools.plain_jinja import reference_render
from localchat.devtools.tool_schemas import ADD, WEATHER

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add", "description": "Add two numbers", "parameters": ADD}}]
SYSTEM = {"role": "system", "content": "You are terse."}
USER = {"role": "user", "content": "Weather in Zürich?"}
CALL = {"id": "call00001", "type": "function", "function": {"name": "get_weather",
                                                            "arguments": {"city": "Zürich", "days": 2}}}
RESULT = {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "21 °C"}
# name: (messages, with tools)
CONVERSATIONS: dict[str, tuple[list[dict[str, Any]], bool]] = {
    "chat": ([SYSTEM, USER], False),
    # (texts ending in a newline, as pasted ones do: Llama 3.x's and others' templates trim them)
    "turns": ([SYSTEM, {"role": "user", "content": "Hi\n"}, {"role": "assistant", "content": "Hello.\n"}, USER],
              False),
    "call": ([SYSTEM, USER, {"role": "assistant", "content": "", "tool_calls": [CALL]}, RESULT], True),
    "call+text": ([SYSTEM, USER, {"role": "assistant", "content": "Let me look.", "tool_calls": [CALL]}, RESULT,
                   {"role": "assistant", "content": "21 °C."}, {"role": "user", "content": "And tomorrow?"}], True),
}
# Templates whose rendering differs for a reason, by conversation (the table's legend says why).
EXPLAINED: dict[str, dict[str, str]] = {}


def _ours(template: str, family: Any, bos: str, eos: str, messages: list[dict[str, Any]], tools: bool) -> str:
    """What localchat renders: the OpenAI route's translation, then generation's rendering."""
    conversation = tuple(said(i, OpenAIMessage.model_validate(m)) for i, m in enumerate(messages))
    rules = OutputRules(tools=tuple(ToolSpec(t["function"]["name"], t["function"]["description"],
                                             t["function"]["parameters"]) for t in TOOLS) if tools else ())
    request = GenerationRequest(messages=conversation, output=rules)
    loaded = SimpleNamespace(template=template, family=family, bos_token=bos, eos_token=eos,
                             spec=SimpleNamespace(system_prompt_strip=None))
    return render_conversation(request, conversation, loaded, codec_tools(rules)).text  # type: ignore[arg-type]


def _theirs(template: str, bos: str, eos: str, messages: list[dict[str, Any]], tools: bool) -> str:
    now = datetime.now()
    extra: dict[str, Any] = {"datetime": now.strftime("%b %d %Y"), "date_string": now.strftime("%d %b %Y")}
    if tools:
        extra["tools"] = TOOLS
    if "functions" in template:  # (llama.cpp's Firefunction v2 handler gives it the tools as text)
        extra["functions"] = json.dumps(TOOLS, ensure_ascii=False, indent=2) if tools else ""
    try:
        return reference_render(template, messages, bos_token=bos, eos_token=eos, **extra)
    except SecurityError:  # a template that changes a list it built: as llama.cpp's engine lets it
        return reference_render(template, messages, bos_token=bos, eos_token=eos, immutable=False, **extra)


def _where(ours: str, theirs: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    return f"at {at}: ours {ours[max(at - 30, 0):at + 30]!r}, the template's {theirs[max(at - 30, 0):at + 30]!r}"


def _outcome(label: str, template: str, family: Any, bos: str, eos: str, messages: list[dict[str, Any]],
             tools: bool) -> str:
    """"" when localchat renders what the template renders (or both refuse it), else how they differ."""
    try:
        ours: str | None = _ours(template, family, bos, eos, messages, tools)
    except LocalchatError as exc:
        ours, refused = None, str(exc)
    try:
        theirs: str | None = _theirs(template, bos, eos, messages, tools)
    except Exception as exc:  # noqa: BLE001 — whatever the template raises
        theirs, raised = None, f"{type(exc).__name__}: {exc}"
    if ours == theirs:
        return ""
    if ours is None:
        return f"{label}: localchat refuses it ({refused}), the template renders it"[:240]
    if theirs is None:
        return f"{label}: the template refuses it ({raised}), localchat renders it"[:240]
    return f"{label} differs {_where(ours, theirs)}"


def compare(name: str, template: str, family: Any, bos: str, eos: str) -> tuple[str, list[str], list[str]]:
    """(the cell, problems, notes): how many conversations render identically, of those compared."""
    caps = template_caps(template) if template != family.template else None
    skipped: list[str] = []
    same = compared = explained = 0
    problems: list[str] = []
    notes: list[str] = []
    for label, (messages, tools) in CONVERSATIONS.items():
        if not takes_system(template):  # (localchat puts it into the first user turn: by design)
            skipped.append("no system")
            messages = [m for m in messages if m["role"] != "system"]
        if tools and not (caps and caps.calls):
            skipped.append("codec")
            continue
        compared += 1
        difference = _outcome(label, template, family, bos, eos, messages, tools)
        if not difference:
            same += 1
        elif label in EXPLAINED.get(name, {}):
            explained += 1
            notes.append(f"{label}: {EXPLAINED[name][label]} ({difference})"[:300])
        else:
            problems.append(difference)
    marks = [*dict.fromkeys(skipped), *([f"{explained} explained"] if explained else [])]
    return f"{same}/{compared}" + (f" ({', '.join(marks)})" if marks else ""), problems, notes
