"""Preparing one generation (blocking, off the event loop): the prompt rendered with the
model's family, the output's constraint, the tokens, the sampling parameters with the model's
defaults and the server's limits applied once, and a splitter per choice for the output."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from ..engine import Generate, SamplingParams
from ..engine.params import Media
from ..errors import InvalidRequest
from ..families import Call, Family, Prompt, render_prompt, system_first, template_caps
from ..models import Settings
from ..models.host import LoadedModel
from . import constraints
from .adapters import resolve_adapters
from .constraints import OutputRules
from .fim import fim_tokens
from .media import check_count, check_media, check_reads, decode_audio, decode_image, marker, place_media
from .request import Audio, GenerationRequest, Image, Message
from .stream import OutputSplitter


@dataclass(frozen=True)
class Prepared:
    generate: Generate
    splitters: list[OutputSplitter]


def prepare(request: GenerationRequest, loaded: LoadedModel, settings: Settings | None = None,
            check: bool = True) -> Prepared:
    """Render the prompt (images and audio decoded and placed), build and check the grammar,
    tokenize; apply the model's sampling defaults and the server's limits (`settings`)."""
    settings = settings or Settings()
    rules, family, tokenizer = request.output, loaded.family, loaded.engine.tokenizer
    media: tuple[Media, ...] = ()
    if request.prompt is not None:
        tokens, thinking = _raw_tokens(request, loaded), False
    else:
        conversation, media = _media(request.messages, settings, loaded)
        messages, extra = _with_tools(_template_messages(conversation, loaded.spec.system_prompt_strip), rules,
                                      family, loaded)
        extra.update(family.template_vars(request.reasoning))  # the family's switch (enable_thinking, …)
        prompt = _render(loaded, messages, extra)
        thinking = family.opens_reasoning(prompt.text)
        if media:
            check_media(media, loaded.projector, loaded.spec.name)
            tokens, media = place_media(tokenizer, prompt.segments, media)
        else:
            tokens = tokenizer.tokenize(list(prompt.segments))
    constraint = constraints.build(rules, family, thinking)
    params = request.sampling.over(SamplingParams(**loaded.spec.sampling.model_dump()))
    params = replace(params, logit_bias=_logit_bias(request.sampling.logit_bias, tokenizer.n_vocab),
                     stop=tuple(params.stop or ()), ignore_eos=bool(params.ignore_eos))
    if check and (params.max_tokens is None or params.max_tokens > settings.max_tokens_cap):
        params = replace(params, max_tokens=settings.max_tokens_cap)
    if check:
        loaded.engine.check_fits(tokens)
    raw = request.prompt is not None  # a raw completion is text: no reasoning or tool calls split out
    strict = constraint is not None and rules.calls_tools  # the calls follow the codec's grammar
    splitters = [OutputSplitter() if raw else family.splitter(constraints.codec_tools(rules), thinking, strict,
                                                                 calls=rules.calls_tools) for _ in range(request.n)]
    generate = Generate(tokens, params, loaded.stop_ids, constraint, n=request.n, logprobs=request.logprobs,
                        adapters=resolve_adapters(loaded, request.lora), media=media)
    return Prepared(generate, splitters)


def _media(messages: tuple[Message, ...], settings: Settings,
           loaded: LoadedModel) -> tuple[tuple[Message, ...], tuple[Media, ...]]:
    """Images and audio decoded (Pillow), each replaced in its message by a marker where it sits;
    a model that does not read their kind refuses them before anything is decoded."""
    found = [(i, j, part) for i, m in enumerate(messages) for j, part in enumerate(m.content)
             if isinstance(part, (Image, Audio))]
    if not found:
        return messages, ()
    check_count(len(found), settings)
    for i, j, part in found:  # images are decoded here: not for a model that cannot read them
        if isinstance(part, Image):
            check_reads(loaded.projector, loaded.spec.name, "image", part.where or f"messages.{i}.content.{j}")
    media: list[Media] = []
    out = list(messages)
    for i, m in enumerate(messages):
        if not any(isinstance(p, (Image, Audio)) for p in m.content):
            continue
        parts: list[Any] = []
        for j, part in enumerate(m.content):
            where = getattr(part, "where", "") or f"messages.{i}.content.{j}"
            if isinstance(part, Image):
                media.append(decode_image(part.data, where, settings))
            elif isinstance(part, Audio):
                media.append(decode_audio(part.data, part.format, where, settings))
            parts.append(marker(len(media) - 1) if isinstance(part, (Image, Audio)) else part)
        out[i] = replace(m, content=tuple(parts))
    return tuple(out), tuple(media)


def _template_messages(messages: tuple[Message, ...], strip: str | None) -> list[dict[str, Any]]:
    """The conversation as chat templates read it (the Hugging Face convention): `content` a
    string, `tool_calls` with `function.arguments` objects, `reasoning_content`. System
    messages lose what `system_prompt_strip` (models.toml) matches."""
    out = []
    for i, m in enumerate(messages):
        text = re.sub(strip, "", m.text) if strip and m.role == "system" else m.text
        content: Any = text
        if any(isinstance(p, tuple) for p in m.content):  # media markers: (text, is_plain) pieces
            content = [p if isinstance(p, tuple) else (p.text, True) for p in m.content]
        item: dict[str, Any] = {"role": m.role, "content": content}
        if m.tool_calls:
            item["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                                  for c in m.tool_calls]
        if m.tool_call_id is not None:
            item["tool_call_id"] = m.tool_call_id
        if m.name is not None:
            item["name"] = m.name
        if m.reasoning:
            item["reasoning_content"] = m.reasoning
        out.append(item)
    return out


def _render(loaded: LoadedModel, messages: list[dict[str, Any]], extra: dict[str, Any]) -> Prompt:
    """The prompt. A system message after the first turn is rendered where it stands when the
    template places it there; when the template refuses it or leaves it out, every system
    message is merged, in order, into one system prompt at the start."""
    def render(conversation: list[dict[str, Any]]) -> Prompt:
        return render_prompt(loaded.template, conversation, bos_token=loaded.bos_token, eos_token=loaded.eos_token,
                             **extra)

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


def _raw_tokens(request: GenerationRequest, loaded: LoadedModel) -> list[int]:
    """A raw prompt, no template: as written (special tokens parsed), or fill-in-the-middle."""
    assert request.prompt is not None
    engine, vocab = loaded.engine, loaded.engine.tokenizer
    if request.suffix is None:
        return vocab.tokenize([(request.prompt, False)])
    room = engine.n_ctx - min(request.sampling.max_tokens or 256, engine.n_ctx // 2)

    def plain(text: str) -> list[int]:
        return vocab.tokenize_bytes(text.encode("utf-8", "replace"), parse_special=False)

    return fim_tokens(vocab.fim, plain, request.prompt, request.suffix, bos=vocab.bos, extra=request.extra, budget=room)


def _with_tools(messages: list[dict[str, Any]], rules: OutputRules, family: Family,
                loaded: LoadedModel) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Tools and tool history the way the template understands them: what a GGUF template does
    itself (list the tools, write calls and results: found by rendering it) it gets as it is; the
    rest the family's codec writes."""
    tools = constraints.codec_tools(rules)
    caps = template_caps(loaded.template) if loaded.template != family.template else None
    extra = {"tools": [t.openai() for t in tools]} if tools and caps and caps.tools else {}
    if caps and caps.calls:
        return (family.history(messages) if family.history else messages), extra
    codec, out = family.codec, []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            said = [(m["content"], True), ("\n", False)] if m["content"] else []
            calls = [Call(c["function"]["name"], c["function"]["arguments"], c.get("id") or "") for c in m["tool_calls"]]
            m = {"role": "assistant", "content": said + codec.format_calls(calls)}
        elif m["role"] == "tool":
            m = {**m, "content": codec.format_result(m["content"])}
        out.append(m)
    if tools and not extra:
        described = codec.describe(tools)
        if out and out[0]["role"] == "system":
            out[0] = {**out[0], "content": [(out[0]["content"], True), ("\n\n", False), *described]}
        else:
            out.insert(0, {"role": "system", "content": described})
    return out, extra


def _logit_bias(bias: dict[Any, float], n_vocab: int) -> dict[int, float]:
    out: dict[int, float] = {}
    for key, value in bias.items():
        try:
            token = int(key)
        except ValueError:
            raise InvalidRequest(f"keys are token ids; {key!r} is not an integer", field="logit_bias") from None
        if not 0 <= token < n_vocab:
            raise InvalidRequest(f"token {token} is outside the vocabulary (0..{n_vocab - 1})", field="logit_bias")
        if not -100 <= value <= 100:
            raise InvalidRequest(f"{value} for token {token} is outside -100..100", field="logit_bias")
        out[token] = float(value)
    return out
