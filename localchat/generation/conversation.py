"""A chat request rendered with the model's template: the messages as templates read them,
tools and documents placed (given to a template that takes them, else written into the system
prompt), the client's template variables, and the end of the prompt (a prefill continued, a
new assistant turn opened, or neither)."""

from __future__ import annotations

import re
from typing import Any

from ..errors import InvalidRequest
from ..families import Codec, Family, Prompt, TemplateCaps, render_prompt, system_first, template_caps
from ..models.host import LoadedModel
from ..neutral import GenerationRequest, ChatMessage, ToolSpec

# Template variables a request sets through fields of its own: `template_kwargs` may not set them.
OWN_VARIABLES = {"messages": "messages", "tools": "tools", "documents": "documents",
                 "add_generation_prompt": "the prompt's end (add_generation_prompt, continue_final_message)",
                 "bos_token": "the model", "eos_token": "the model", "enable_thinking": "the reasoning switch"}
DOCUMENTS_HEADER = "Use the following documents to answer."


def render_conversation(request: GenerationRequest, conversation: tuple[ChatMessage, ...], loaded: LoadedModel,
                        tools: list[ToolSpec]) -> Prompt:
    """The prompt for a chat request (its media already replaced by markers in `conversation`;
    `tools`: the request's as the codec gets them, constraints.codec_tools)."""
    for key in request.template_kwargs:
        if key in OWN_VARIABLES:
            raise InvalidRequest(f"the template's {key!r} is set by the request itself ({OWN_VARIABLES[key]})",
                                 field=f"template_kwargs.{key}")
    continue_final = _continue_final(request, conversation)
    caps = template_caps(loaded.template) if loaded.template != loaded.family.template else None
    codec = None if caps and caps.calls else loaded.family.codec  # who writes past calls and results: template or codec
    messages = _template_messages(conversation, loaded.spec.system_prompt_strip, codec)
    messages, extra = _with_documents(messages, request.documents, loaded)
    messages, listed = _with_tools(messages, tools, loaded.family, caps)
    extra.update(listed)
    extra.update(loaded.family.template_vars(request.reasoning))  # the family's switch (enable_thinking, …)
    options = {"add_generation_prompt": request.generation_prompt, "continue_final": continue_final,
               "variables": request.template_kwargs, **extra}
    return _render(loaded, messages, options)


def _continue_final(request: GenerationRequest, conversation: tuple[ChatMessage, ...]) -> bool:
    """Whether the last message is continued: as asked, else when it is the assistant's text."""
    last = conversation[-1] if conversation else None
    can = last is not None and last.role == "assistant" and not last.tool_calls
    if request.continue_final and not can:
        raise InvalidRequest("the last message must be the assistant's text (no tool calls) to be continued",
                             field="continue_final")
    return can if request.continue_final is None else request.continue_final


def documents_text(documents: tuple[dict[str, str], ...]) -> str:
    """Documents as the system prompt gets them when the template takes none: a header, then
    each document numbered, its fields one a line (`title: …`, `text: …`), in the order sent."""
    blocks = [f"[Document {i}]\n" + "\n".join(f"{k}: {v}" for k, v in doc.items())
              for i, doc in enumerate(documents, 1)]
    return "\n\n".join([DOCUMENTS_HEADER, *blocks])


def _takes(loaded: LoadedModel, variable: str) -> bool:
    """The model's own (GGUF) template reads this variable; the families' templates read none."""
    return variable in loaded.template and loaded.template != loaded.family.template


def _with_documents(messages: list[dict[str, Any]], documents: tuple[dict[str, str], ...],
                    loaded: LoadedModel) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    if not documents:
        return messages, {}
    if _takes(loaded, "documents"):
        return messages, {"documents": [dict(d) for d in documents]}
    return _add_to_system(messages, [(documents_text(documents), True)]), {}


def _add_to_system(messages: list[dict[str, Any]], pieces: list[tuple[str, bool]]) -> list[dict[str, Any]]:
    """`pieces` after the first system message's text, or as a system message of their own."""
    if messages and messages[0]["role"] == "system":
        content = messages[0]["content"]
        said = [(content, True)] if isinstance(content, str) else list(content)
        return [{**messages[0], "content": said + [("\n\n", False)] + pieces}, *messages[1:]]
    return [{"role": "system", "content": pieces}, *messages]


def _template_messages(messages: tuple[ChatMessage, ...], strip: str | None,
                       codec: Codec | None) -> list[dict[str, Any]]:
    """The conversation as chat templates read it (the Hugging Face convention): `content` a
    string, `tool_calls` with `function.arguments` objects, `reasoning_content`. System
    messages lose what `system_prompt_strip` (models.toml) matches. With a `codec` (the template
    does not write tool calls itself), an assistant's calls and the tools' results are in the
    codec's syntax, in the text. Each past call is converted once, into the form its writer reads."""
    out = []
    for m in messages:
        text = re.sub(strip, "", m.text) if strip and m.role == "system" else m.text
        content: Any = text
        if any(isinstance(p, tuple) for p in m.content):  # media markers: (text, is_plain) pieces
            content = [p if isinstance(p, tuple) else (p.text, True) for p in m.content]
        if codec is not None and m.role == "assistant" and m.tool_calls:
            said = [(content, True), ("\n", False)] if content else []
            out.append({"role": "assistant", "content": said + codec.format_calls(
                m.tool_calls)})
            continue
        if codec is not None and m.role == "tool":
            content = codec.format_result(content)
        item: dict[str, Any] = {"role": m.role, "content": content}
        if m.tool_calls:  # (an id the client left out stays out, as llama.cpp leaves it: `is defined` tells)
            item["tool_calls"] = [{**({"id": c.id} if c.id is not None else {}), "type": "function",
                                   "function": {"name": c.name, "arguments": c.arguments}} for c in m.tool_calls]
        if m.tool_call_id is not None:
            item["tool_call_id"] = m.tool_call_id
        if m.name is not None:
            item["name"] = m.name
        if m.reasoning:
            item["reasoning_content"] = m.reasoning
        out.append(item)
    return out


def _render(loaded: LoadedModel, messages: list[dict[str, Any]], options: dict[str, Any]) -> Prompt:
    """The prompt. A system message after the first turn is rendered where it stands when the
    template places it there; when the template refuses it or leaves it out, every system
    message is merged, in order, into one system prompt at the start."""
    def render(conversation: list[dict[str, Any]]) -> Prompt:
        return render_prompt(loaded.template, conversation, bos_token=loaded.bos_token, eos_token=loaded.eos_token,
                             **options)

    late = [k for k, m in enumerate(messages) if m["role"] == "system" and k > 0]
    if not late:
        return render(messages)
    try:
        prompt = render(messages)
        if not any(messages[k]["role"] == "system" for k in prompt.dropped):
            return prompt
    except InvalidRequest:
        pass
    return render(system_first(messages))


def _with_tools(messages: list[dict[str, Any]], tools: list[ToolSpec], family: Family,
                caps: TemplateCaps | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Tools and tool history the way the template understands them: what a GGUF template does
    itself (list the tools, write calls and results: its `caps`, found by rendering it) it gets
    as it is; the rest the family's codec writes (the calls and results: _template_messages)."""
    extra = {"tools": [t.openai() for t in tools]} if tools and caps and caps.tools else {}
    if caps and caps.calls:
        return (family.history(messages) if family.history else messages), extra
    if caps and not caps.results:
        messages = _results_as_user_turns(messages)
    if tools and not extra:
        messages = _add_to_system(messages, family.codec.describe(tools))
    return messages, extra


def _results_as_user_turns(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For a template that refuses the `tool` role (Gemma's require user and model turns to
    alternate): each result (the codec has written it) a user turn, merged with the user turns
    next to it."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "tool":
            m = {"role": "user", "content": m["content"]}
        if out and m["role"] == "user" and out[-1]["role"] == "user":
            pieces = [_pieces(out[-1]["content"]), [("\n\n", False)], _pieces(m["content"])]
            m = {**out.pop(), "content": [p for part in pieces for p in part]}
        out.append(m)
    return out


def _pieces(content: Any) -> list[tuple[str, bool]]:
    return [(content, True)] if isinstance(content, str) else list(content or [])
