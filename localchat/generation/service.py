"""The chat use-case: a request in, a stream of content deltas and a finish out.

Everything that can reject a request (unknown model, bad template input, a prompt longer than
the context) happens in `start`, before the caller sends its first byte."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

from ..engine import Done, Generate, SamplingParams, Stream, Text, TokenLogprob
from ..errors import InvalidRequest
from ..logs import current_request
from ..families import Call, Family, Prompt, render_prompt, system_first, template_caps
from . import constraints
from .constraints import OutputRules
from .fim import fim_tokens
from ..models.host import Lease, LoadedModel, ModelHost
from .stream import OutputSplitter, Piece

log = logging.getLogger("localchat.generation")


@dataclass(frozen=True)
class ChatRequest:
    """One generation, whatever the protocol: chat messages rendered with the model's template,
    or a raw prompt (no template; with `suffix`, a fill-in-the-middle prompt)."""

    messages: list[dict[str, Any]] = field(default_factory=list)  # OpenAI-shaped, content flattened to a string
    model: str | None = None
    prompt: str | None = None  # raw text; special tokens in it are parsed
    suffix: str | None = None  # fill in the middle between prompt and suffix
    extra: tuple[tuple[str, str], ...] = ()  # (filename, text): other files, for fill-in-the-middle
    sampling: dict[str, Any] = field(default_factory=dict)  # only the fields the client set
    logit_bias: dict[str, float] = field(default_factory=dict)
    output: OutputRules = OutputRules()
    n: int = 1
    logprobs: int | None = None  # None: none; k: the chosen token's and the k most likely
    keep_alive: float | None = None  # seconds the model stays loaded after this request


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Finish:
    """One choice has ended; `usage` counts that choice's completion tokens."""

    reason: str  # stop | length | tool_calls
    usage: Usage
    index: int = 0
    stop: str | None = None  # the stop string that ended the text, if one did


@dataclass(frozen=True)
class Logprobs:
    index: int
    tokens: tuple[TokenLogprob, ...]


@dataclass
class Turn:
    """One answer (n answers) being generated. Holds its model until the last event; `close`
    cancels it and lets the model go (idempotent)."""

    model: str
    n: int
    prompt_tokens: int  # known before the first event
    _lease: Lease
    _stream: Stream
    _splitters: list[OutputSplitter]
    loosened: tuple[str, ...] = ()  # schema keywords the grammar does not enforce: "[tool]#/path:keyword"

    async def events(self) -> AsyncIterator[tuple[int, Piece | Logprobs | Finish]]:
        """(choice index, event) pairs; each choice ends with its Finish."""
        record = current_request()
        try:
            async for event in self._stream:
                split = self._splitters[event.index]
                if isinstance(event, Text):
                    if record is not None and event.text:
                        record.text()
                    if event.logprobs:
                        yield event.index, Logprobs(event.index, event.logprobs)
                    for piece in split.push(event.text):
                        yield event.index, piece
                elif isinstance(event, Done):
                    for piece in split.finish():
                        yield event.index, piece
                    reason = "length" if event.finish_reason == "length" else "tool_calls" if split.calls else "stop"
                    usage = Usage(event.prompt_tokens, event.completion_tokens, event.cached_tokens)
                    if record is not None:
                        record.done(event.prompt_tokens, event.cached_tokens, event.completion_tokens, reason)
                    yield event.index, Finish(reason, usage, event.index, event.stop)
        except Exception as exc:
            if record is not None:
                record.error = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self.close()

    def close(self) -> None:
        self._stream.close()
        self._lease.release()


def total_usage(finishes: list[Finish]) -> Usage:
    first = finishes[0].usage
    return Usage(first.prompt_tokens, sum(f.usage.completion_tokens for f in finishes), first.cached_tokens)


@dataclass(frozen=True)
class _Prepared:
    generate: Generate
    splitters: list[OutputSplitter]


class Chat:
    def __init__(self, host: ModelHost) -> None:
        self.host = host

    async def start(self, request: ChatRequest) -> Turn:
        """Everything that can reject the request happens here, before a byte is sent: the
        model, the template, the grammar, the prompt's length, a full queue."""
        constraints.check(request.output, self.host.settings)
        lease = await self.host.lease(request.model, request.keep_alive)
        try:
            loaded = lease.model
            if request.n > loaded.engine.parallel:
                raise InvalidRequest(f"n: at most {loaded.engine.parallel} completions per request for this model "
                                     "(its `parallel` setting)", param="n")
            prepared = await asyncio.to_thread(_prepare, request, loaded, True,  # templates, grammars, tokens
                                               self.host.settings.max_tokens_cap)
            loosened = prepared.generate.constraint.loosened if prepared.generate.constraint else ()
            if loosened:
                log.warning("schema keywords not enforced (x-localchat-loosened): %s", ", ".join(loosened))
                constraints.refuse_loosened(request.output, loosened, self.host.settings.schema_loosened == "refuse")
            stream = loaded.engine.submit(prepared.generate)
        except BaseException:
            lease.release()
            raise
        if (record := current_request()) is not None:
            record.model, record.prompt_tokens = loaded.spec.name, len(prepared.generate.tokens)
        return Turn(loaded.spec.name, request.n, len(prepared.generate.tokens), lease, stream, prepared.splitters,
                    loosened)

    async def count_tokens(self, request: ChatRequest) -> int:
        """The prompt's length in tokens, as `start` would build it (the context is not checked)."""
        constraints.check(request.output, self.host.settings)
        lease = await self.host.lease(request.model, request.keep_alive)
        try:
            return len((await asyncio.to_thread(_prepare, request, lease.model, False)).generate.tokens)
        finally:
            lease.release()


def _prepare(request: ChatRequest, loaded: LoadedModel, check: bool = True, cap: int | None = None) -> _Prepared:
    """Blocking: render the prompt, build and check the grammar, tokenize."""
    rules, family = request.output, loaded.family
    if request.prompt is not None:
        tokens, thinking = _raw_tokens(request, loaded), False
        constraint = constraints.build(rules, family, thinking)
    else:
        messages, extra = _with_tools(_strip_system(request.messages, loaded.spec.system_prompt_strip), rules,
                                      family, loaded)
        prompt = _render(loaded, messages, extra)
        thinking = family.opens_reasoning(prompt.text)
        constraint = constraints.build(rules, family, thinking)
        tokens = loaded.engine.tokenize(prompt.segments)
    params = replace(_defaults(loaded), **request.sampling,
                     logit_bias=_logit_bias(request.logit_bias, loaded.engine.n_vocab))
    if cap is not None and (params.max_tokens is None or params.max_tokens > cap):  # the server's max_tokens_cap
        params = replace(params, max_tokens=cap)
    if check:
        loaded.engine.check_fits(tokens)
    raw = request.prompt is not None  # a raw completion is text: no reasoning or tool calls split out
    strict = constraint is not None and rules.calls_tools  # the calls follow the codec's grammar
    splitters = [OutputSplitter() if raw else family.splitter(constraints.codec_tools(rules), thinking, strict,
                                                                 calls=rules.calls_tools) for _ in range(request.n)]
    generate = Generate(tokens, params, loaded.stop_ids, constraint, n=request.n, logprobs=request.logprobs)
    return _Prepared(generate, splitters)


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


def _strip_system(messages: list[dict[str, Any]], pattern: str | None) -> list[dict[str, Any]]:
    """System messages without what `system_prompt_strip` (models.toml) matches."""
    if not pattern:
        return messages
    return [{**m, "content": re.sub(pattern, "", m["content"])} if m["role"] == "system" and isinstance(
        m.get("content"), str) else m for m in messages]


def _raw_tokens(request: ChatRequest, loaded: LoadedModel) -> list[int]:
    """A raw prompt, no template: as written (special tokens parsed), or fill-in-the-middle."""
    assert request.prompt is not None
    engine = loaded.engine
    if request.suffix is None:
        return engine.tokenize([(request.prompt, False)])
    room = engine.n_ctx - min(request.sampling.get("max_tokens") or 256, engine.n_ctx // 2)
    model = engine.model

    def plain(text: str) -> list[int]:
        return model.tokenize_bytes(text.encode("utf-8", "replace"), parse_special=False)

    return fim_tokens(model.fim, plain, request.prompt, request.suffix, bos=model.bos, extra=request.extra, budget=room)


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


def _defaults(loaded: LoadedModel) -> SamplingParams:
    return SamplingParams(**loaded.spec.sampling.model_dump())


def _logit_bias(bias: dict[str, float], n_vocab: int) -> dict[int, float]:
    out: dict[int, float] = {}
    for key, value in bias.items():
        try:
            token = int(key)
        except ValueError:
            raise InvalidRequest(f"logit_bias keys are token ids; {key!r} is not an integer", param="logit_bias") from None
        if not 0 <= token < n_vocab:
            raise InvalidRequest(f"logit_bias: token {token} is outside the vocabulary (0..{n_vocab - 1})",
                                 param="logit_bias")
        if not -100 <= value <= 100:
            raise InvalidRequest(f"logit_bias: {value} for token {token} is outside -100..100", param="logit_bias")
        out[token] = float(value)
    return out
