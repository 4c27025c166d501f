"""Rendering a conversation with a Jinja chat template in a sandbox.

Message text is never parsed for control tokens: before rendering, each message's text is
swapped for a random placeholder; the rendered string is then cut at the placeholders, so the
template's own text (where `<|im_start|>` must be a control token) and the users' text (where it
must stay plain text) reach the tokenizer as separate segments. An empty text is left as it is:
the template must see it empty (`{% if message.content %}`).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache, partial
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import SandboxedEnvironment

from ..errors import InvalidRequest


@dataclass(frozen=True)
class Prompt:
    """Rendered prompt: (text, is_message_text) segments. Only template text may hold control tokens."""

    segments: tuple[tuple[str, bool], ...]
    dropped: frozenset[int] = frozenset()  # messages whose text the template left out
    # the segment where the last message shown begins (its first piece of text; len(segments): none): what
    # follows is the turn being answered, which a shifted cache reuse always reads (engine/cache/matching.py)
    last_turn: int | None = None
    # per segment, the message whose text it is (None: the template's own text); empty: not known
    owners: tuple[int | None, ...] = ()
    roles: tuple[str, ...] = ()  # each message's role, as `owners` number them

    def where(self, segment: int, offset: int) -> str:
        """Where a character of the prompt is, in words: `offset` characters into segment
        `segment` ("user message 2, char 5,120"; the template's own text "after system message 1")."""
        def named(k: int) -> str:
            role = self.roles[k] if k < len(self.roles) else "?"
            return f"{role} message {sum(1 for r in self.roles[:k + 1] if r == role)}"
        owner = self.owners[segment] if segment < len(self.owners) else None
        if owner is not None:
            mine = [(t, plain) for (t, plain), o in zip(self.segments[:segment + 1], self.owners) if o == owner]
            chars = sum(len(t) for t, _ in mine[:-1]) + offset
            # past markup of localchat's own inside the message: the tools listed in it, calls and results written
            added = " (in what localchat wrote into it: the tools, or calls and results)" \
                if any(not plain for _, plain in mine) else ""
            return f"{named(owner)}, char {chars:,}{added}"
        before = next((o for o in reversed(self.owners[:segment]) if o is not None), None)
        return ("the template's text before the first message (the tools, or the template's own text: a date)"
                if before is None else f"the template's text after {named(before)}")

    @property
    def text(self) -> str:
        return "".join(text for text, _ in self.segments)


Content = str | list[tuple[str, bool]]  # a message's text, or (text, is_plain) pieces


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


def _plain(content: Content | None) -> str:
    return content if isinstance(content, str) else "".join(t for t, _ in content or [])


class _Generation(jinja2.ext.Extension):
    """Hugging Face's `{% generation %}…{% endgeneration %}` (it marks the assistant's text for
    training masks; LFM2.5's and Laguna's templates use it): renders what it encloses."""

    tags = {"generation"}

    def parse(self, parser: Any) -> Any:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    """Hugging Face's `tojson` (what templates are written for): not HTML-escaped, non-ASCII kept
    unless the template asks for `ensure_ascii=True`."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@lru_cache(maxsize=16)
def _compile(source: str) -> jinja2.Template:
    # Sandboxed (no attribute access outside the data, no Python); lists the template builds may
    # change (`ns.ids.append(…)`, as Kimi's and others' templates do): it only ever sees copies.
    env = SandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols", _Generation])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


def render_prompt(
    template: str,
    messages: list[dict[str, Any]],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    continue_final: bool | None = None,
    variables: dict[str, Any] | None = None,
    **extra: Any,
) -> Prompt:
    """Render messages (OpenAI-shaped dicts). Content is a string, always plain text, or a
    list of (text, is_plain) pieces when it mixes our own markup with plain text.
    `continue_final`: the last message, the assistant's, is a prefill: the generation prompt,
    then its text, which the answer continues (as llama-server does it); None: when the last
    message is the assistant's text. `variables`: more for the template (`extra` wins).
    A template that refuses system messages (or leaves them out) gets the system prompt at the
    start of the first user turn, as llama.cpp does for such templates."""
    if continue_final is None:
        continue_final = is_prefill(messages)
    roles = tuple(str(m.get("role", "")) for m in messages)
    prefill = None
    if continue_final and messages:
        prefill, messages = _plain(messages[-1].get("content")), messages[:-1]
        add_generation_prompt = True
    context = {**(variables or {}), "add_generation_prompt": add_generation_prompt, "bos_token": bos_token,
               "eos_token": eos_token, **extra}
    # (the tools as JSON text only for a template that reads `functions`: Claude Code's are ~50 kB)
    for key, value in llama_cpp_variables(context.get("tools") if "functions" in template else None).items():
        context.setdefault(key, value)
    folded = bool(messages) and messages[0].get("role") == "system" and not takes_system(template)
    if folded:
        messages = fold_system(messages)
    prompt = _render(template, messages, context, prefill)
    if folded:  # message k of the folded conversation is message k + 1 (the first holds both)
        dropped = {k + 1 for k in prompt.dropped} | ({0} if 0 in prompt.dropped else set())
        owners = tuple(None if k is None else k + 1 if k else 0 for k in prompt.owners)
        prompt = Prompt(prompt.segments, frozenset(dropped), prompt.last_turn, owners)
    return Prompt(prompt.segments, prompt.dropped, prompt.last_turn, prompt.owners, roles)


def llama_cpp_variables(tools: list[dict[str, Any]] | None) -> dict[str, Any]:
    """What llama.cpp's common/chat gives every template besides the messages and tools (unless
    the request sets them): today's date as `datetime` ("Jan 05 2026") and as `date_string`
    ("05 Jan 2026": Llama 3.x's templates date the prompt with it, else with 26 Jul 2024), and
    `functions`, the tools as indented JSON text (Firefunction v2's template lists them from it;
    llama.cpp sets it for that template)."""
    now = datetime.now()
    return {"datetime": now.strftime("%b %d %Y"), "date_string": now.strftime("%d %b %Y"),
            "functions": json.dumps(tools, ensure_ascii=False, indent=2) if tools else ""}


def _render(template: str, messages: list[dict[str, Any]], context: dict[str, Any], prefill: str | None) -> Prompt:
    nonce = secrets.token_hex(4)
    texts: list[tuple[str, bool]] = []
    owner: list[int] = []  # the message each piece of text comes from

    def hide(k: int, content: Content) -> str:
        """A placeholder per piece; a piece marked False is our own markup (control tokens parse)."""
        pieces = [(content, True)] if isinstance(content, str) else content
        start = len(texts)
        texts.extend(pieces)
        owner.extend([k] * len(pieces))
        return "".join(f"\ue000{nonce}:{i}\ue001" for i in range(start, len(texts)))

    masked = [_masked(m, partial(hide, k)) for k, m in enumerate(messages)]
    try:
        rendered = _compile(template).render(**{**context, "messages": masked})
    except (jinja2.TemplateError, TypeError, ValueError, LookupError, AttributeError, ArithmeticError) as exc:
        raise InvalidRequest(f"the model's chat template rejected the conversation: {exc}", param="messages") from exc

    segments: list[tuple[str, bool]] = []
    owners: list[int | None] = []
    shown: set[int] = set()
    starts: dict[int, int] = {}  # each message shown: the segment its first piece is
    for i, part in enumerate(re.split(f"\ue000{nonce}:(\\d+)\ue001", rendered)):
        if i % 2:
            if texts[int(part)][0]:
                starts.setdefault(owner[int(part)], len(segments))
                segments.append(texts[int(part)])
                owners.append(owner[int(part)])
            shown.add(owner[int(part)])
        elif part:
            segments.append((part, False))
            owners.append(None)
    last_turn = starts[max(starts)] if starts else len(segments)
    if prefill:
        segments.append((prefill, True))
        owners.append(len(messages))  # (the last message, taken out to be continued)
    dropped = frozenset(set(owner) - shown)
    return Prompt(tuple(segments), dropped, last_turn, tuple(owners))


def _masked(message: dict[str, Any], hide: Callable[[Content], str]) -> dict[str, Any]:
    """The message as the template gets it: a text behind its placeholders, the whitespace at
    its ends outside them (a template's `| trim` or `.strip()` takes it off as it would from the
    text: Llama 3.x's, Gemma's and others'); an empty text stays the empty string (`{% if
    message.content %}` must see it empty, as llama.cpp and Hugging Face give it), a blank one
    stays itself; no text beside tool calls is the empty string (templates concatenate it, and
    llama.cpp gives them that); otherwise as it came."""
    content = message.get("content")
    if isinstance(content, str):
        core = content.strip()
        lead, trail = content[:len(content) - len(content.lstrip())], content[len(content.rstrip()):]
        return {**message, "content": lead + hide(core) + trail if core else content}
    if isinstance(content, list):
        return {**message, "content": hide(content) if _plain(content) else ""}
    if content is None and message.get("tool_calls"):
        return {**message, "content": ""}
    return dict(message)


_SYSTEM_PROBE = "zz_system_probe"


@lru_cache(maxsize=16)
def takes_system(template: str) -> bool:
    """Whether the template shows a system message that starts the conversation (Gemma 2's
    raises on one)."""
    try:
        prompt = _render(template, [{"role": "system", "content": _SYSTEM_PROBE}, {"role": "user", "content": "u"}],
                         {"add_generation_prompt": True, "bos_token": "", "eos_token": "", **llama_cpp_variables(None)},
                         None)
    except InvalidRequest:
        return False
    return _SYSTEM_PROBE in prompt.text


def fold_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first message, the system prompt, put at the start of the next user turn (a blank
    line between), or made a user turn of its own when none follows it."""
    system, rest = messages[0], messages[1:]
    if not rest or rest[0].get("role") != "user":
        return [{**system, "role": "user"}, *rest]

    def pieces(content: Any) -> list[tuple[str, bool]]:
        return [(content, True)] if isinstance(content, str) else list(content or [])

    user = rest[0]
    merged = pieces(system.get("content")) + [("\n\n", False)] + pieces(user.get("content"))
    return [{**user, "content": merged}, *rest[1:]]


def is_prefill(messages: list[dict[str, Any]]) -> bool:
    """The last message is the assistant's text (no tool calls): by default, a prefill."""
    return bool(messages) and messages[-1].get("role") == "assistant" and not messages[-1].get("tool_calls")


def system_first(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every system message merged, in order, into one system message at the start (for a
    template that takes a single system prompt)."""
    systems = [m for m in messages if m.get("role") == "system"]
    if not systems:
        return messages
    parts: list[tuple[str, bool]] = []
    for m in systems:
        content = m.get("content") or ""
        parts += ([("\n\n", False)] if parts else []) + ([(content, True)] if isinstance(content, str) else content)
    return [{"role": "system", "content": parts}, *(m for m in messages if m.get("role") != "system")]


@dataclass(frozen=True)
class TemplateCaps:
    """What a chat template does with tools, found by rendering it."""

    tools: bool  # lists the request's tools itself
    calls: bool  # writes an assistant's tool calls (and the tools' results) itself
    results: bool = True  # shows a tool's result (a message of role `tool`) after an assistant's text


_PROBE_TOOL = {"type": "function", "function": {"name": "zz_probe_tool", "description": "probe",
                                                  "parameters": {"type": "object", "properties": {
                                                      "zz_arg": {"type": "string"}}}}}


@lru_cache(maxsize=16)
def template_caps(template: str) -> TemplateCaps:
    def renders(messages: list[dict[str, Any]], needle: str, **extra: Any) -> bool:
        try:
            return needle in render_prompt(template, messages, **extra).text
        except (InvalidRequest, TypeError, ValueError, LookupError, AttributeError, jinja2.TemplateError):
            return False

    ask = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    call = {"id": "call00001", "type": "function",
            "function": {"name": "zz_probe_call", "arguments": {"zz_arg": "v"}}}
    history = [*ask, {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": "call00001", "name": "zz_probe_call", "content": "r"}]
    said = [*ask, {"role": "assistant", "content": "a"}, {"role": "tool", "content": "zz_probe_result"}]
    return TemplateCaps(tools=renders(ask, "zz_probe_tool", tools=[_PROBE_TOOL]),
                        calls=renders(history, "zz_probe_call", tools=[_PROBE_TOOL]),
                        results=renders(said, "zz_probe_result"))
