"""The chat use-case: a request in, a stream of content deltas and a finish out.

Everything that can reject a request (unknown model, bad template input, a prompt longer than
the context) happens in `start`, before the caller sends its first byte."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

from ..engine import Done, SamplingParams, Text
from ..errors import InvalidRequest
from ..families import render_prompt
from .models import LoadedModel, ModelHost


@dataclass(frozen=True)
class ChatRequest:
    messages: list[dict[str, Any]]  # OpenAI-shaped, content already flattened to a string
    model: str | None = None
    sampling: dict[str, Any] = field(default_factory=dict)  # only the fields the client set
    logit_bias: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Delta:
    content: str


@dataclass(frozen=True)
class Finish:
    reason: str  # stop | length
    usage: Usage


@dataclass
class Turn:
    """One answer about to be generated."""

    model: str
    _loaded: LoadedModel
    _tokens: list[int]
    _params: SamplingParams

    async def events(self) -> AsyncIterator[Delta | Finish]:
        engine = self._loaded.engine
        async for event in engine.generate(self._tokens, self._params, self._loaded.stop_ids):
            if isinstance(event, Text):
                yield Delta(event.text)
            elif isinstance(event, Done):
                reason = "length" if event.finish_reason == "length" else "stop"
                yield Finish(reason, Usage(event.prompt_tokens, event.completion_tokens, event.cached_tokens))


class Chat:
    def __init__(self, host: ModelHost) -> None:
        self.host = host

    async def start(self, request: ChatRequest) -> Turn:
        loaded = await self.host.get(request.model)
        prompt = render_prompt(loaded.template, request.messages,
                               bos_token=loaded.bos_token, eos_token=loaded.eos_token)
        tokens = loaded.engine.tokenize(prompt.segments)
        params = replace(_defaults(loaded), **request.sampling,
                         logit_bias=_logit_bias(request.logit_bias, loaded.engine.n_vocab))
        loaded.engine.check_fits(tokens)
        return Turn(loaded.spec.name, loaded, tokens, params)


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
