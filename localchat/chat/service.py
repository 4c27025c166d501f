"""The chat use-case: a request in, a stream of content deltas and a finish out.

Everything that can reject a request (unknown model, bad template input, a prompt longer than
the context) happens in `start`, before the caller sends its first byte."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

from ..engine import Constraint, Done, SamplingParams, Text
from ..errors import InvalidRequest
from ..families import Family, render_prompt
from . import constraints
from .constraints import OutputRules
from .models import LoadedModel, ModelHost
from .stream import Delta, OutputSplitter, Piece


@dataclass(frozen=True)
class ChatRequest:
    messages: list[dict[str, Any]]  # OpenAI-shaped, content already flattened to a string
    model: str | None = None
    sampling: dict[str, Any] = field(default_factory=dict)  # only the fields the client set
    logit_bias: dict[str, float] = field(default_factory=dict)
    output: OutputRules = OutputRules()


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
    reason: str  # stop | length | tool_calls
    usage: Usage


@dataclass
class Turn:
    """One answer about to be generated."""

    model: str
    _loaded: LoadedModel
    _tokens: list[int]
    _params: SamplingParams
    _constraint: Constraint | None
    _splitter: OutputSplitter

    async def events(self) -> AsyncIterator[Piece | Finish]:
        engine, split = self._loaded.engine, self._splitter
        async for event in engine.generate(self._tokens, self._params, self._loaded.stop_ids, self._constraint):
            if isinstance(event, Text):
                for piece in split.push(event.text):
                    yield piece
            elif isinstance(event, Done):
                for piece in split.finish():
                    yield piece
                reason = "length" if event.finish_reason == "length" else "tool_calls" if split.calls else "stop"
                yield Finish(reason, Usage(event.prompt_tokens, event.completion_tokens, event.cached_tokens))


class Chat:
    def __init__(self, host: ModelHost) -> None:
        self.host = host

    async def start(self, request: ChatRequest) -> Turn:
        rules = request.output
        constraints.check(rules)
        loaded = await self.host.get(request.model)
        family = loaded.family
        messages, extra = _with_tools(request.messages, rules, family, loaded)
        prompt = render_prompt(loaded.template, messages, bos_token=loaded.bos_token, eos_token=loaded.eos_token,
                               **extra)
        thinking = bool(family.reasoning) and prompt.text.rstrip().endswith(family.reasoning[0])
        constraint = constraints.build(rules, family, thinking)
        tokens = loaded.engine.tokenize(prompt.segments)
        params = replace(_defaults(loaded), **request.sampling,
                         logit_bias=_logit_bias(request.logit_bias, loaded.engine.n_vocab))
        loaded.engine.check_fits(tokens)
        splitter = OutputSplitter(family.tools if rules.calls_tools else None, family.reasoning, thinking)
        return Turn(loaded.spec.name, loaded, tokens, params, constraint, splitter)


def _with_tools(messages: list[dict[str, Any]], rules: OutputRules, family: Family,
                loaded: LoadedModel) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Tools and tool history the way the template understands them: a GGUF template that
    takes `tools` gets them as they are; a family template gets the family's wording."""
    tools = [{"type": "function", "function": {k: v for k, v in (("name", t.name), ("description", t.description),
                                                                  ("parameters", t.parameters)) if v is not None}}
             for t in rules.tools]
    if "tools" in loaded.template and loaded.template != family.template:
        return messages, ({"tools": tools} if tools else {})
    syntax, out = family.tools, []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            said = [(m["content"], True), ("\n", False)] if m["content"] else []
            m = {"role": "assistant", "content": said + syntax.format_calls(m["tool_calls"])}
        elif m["role"] == "tool":
            m = {**m, "content": syntax.format_result(m["content"])}
        out.append(m)
    if tools:
        described = syntax.describe(tools)
        if out and out[0]["role"] == "system":
            out[0] = {**out[0], "content": [(out[0]["content"], True), ("\n\n", False), *described]}
        else:
            out.insert(0, {"role": "system", "content": described})
    return out, {}


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
