"""How a neutral request reaches a model's engine, one runner per way of running it, chosen once
per model by `LoadedModel.mode` (the host decides it when it loads the model: models/host.py):

- `TokenRunner` (every model of this server, and an upstream in token mode): render the template,
  build the grammar, tokenize (prepare.py); the family's Splitter reads the engine's text.
- `ChatRunner` (an upstream in chat mode: vLLM, SGLang, a hosted API): the request as OpenAI chat's
  fields (upstream_chat.converse); a CallChecker reads the engine's parsed events. It has no
  template or vocabulary here, so a rendered prompt or a token count is a 400 that says why.

Each answers `start` (the engine has the request: its stream, the prompt's length, a reader per
choice), `render` and `count`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..engine import Generate, Stream
from ..engine.remote.upstream_chat import ChatEngine, token_mode_only
from ..models import Settings
from ..models.host import LoadedModel
from ..neutral import GenerationRequest, Piece
from . import constraints, upstream_chat
from .prepare import prepare, rendered

log = logging.getLogger("localchat.generation")


class Reader(Protocol):
    """Turns one choice's engine events into neutral pieces: a family's Splitter (text) or a CallChecker."""

    calls: int

    def push(self, text: str) -> Iterable[Piece]: ...

    def finish(self) -> Iterable[Piece]: ...


@dataclass
class Running:
    """A request the engine took (a runner's `start`): its stream, the prompt's length, a reader per choice."""

    stream: Stream
    prompt_tokens: int
    readers: Sequence[Reader]
    loosened: tuple[str, ...] = ()  # schema keywords neither the grammar nor a check holds
    checked: tuple[str, ...] = ()  # schema keywords the grammar holds in part and a check of written values holds
    explain: Callable[[int, tuple[int, ...]], str] | None = None  # where a prompt token is, in words (prepare.py)


class TokenRunner:
    """Token mode: the prompt, the grammar and the tokens are made here (off the event loop)."""

    async def start(self, request: GenerationRequest, loaded: LoadedModel, settings: Settings) -> Running:
        made = await asyncio.to_thread(prepare, request, loaded, settings)
        generate = made.generate
        loosened = generate.constraint.loosened if generate.constraint else ()
        checked = tuple(e for c in generate.constraint.checks for e in c.entries) if generate.constraint else ()
        if loosened:
            log.warning("schema keywords not enforced (x-localchat-loosened): %s", ", ".join(loosened))
            constraints.refuse_loosened(request.output, loosened, settings.schema_loosened == "refuse")
        stream, n_prompt = await submitted(loaded, generate)
        return Running(stream, n_prompt, made.splitters, loosened, checked, made.explain)

    def render(self, request: GenerationRequest, loaded: LoadedModel) -> str:
        return rendered(request, loaded)

    def tokens(self, request: GenerationRequest, loaded: LoadedModel, settings: Settings) -> list[int]:
        return list(prepare(request, loaded, settings).generate.tokens)


async def submitted(loaded: LoadedModel, generate: Generate) -> tuple[Stream, int]:
    """The engine took the request, or refused it (raised here): its stream and the prompt's
    length. With media, once they are read; an engine elsewhere (`confirms`) says so first. For
    this server's own requests and a peer's alike (peer.py)."""
    stream = loaded.engine.submit(generate)
    confirmed = generate.media or loaded.engine.confirms
    return stream, await stream.prepared() if confirmed else len(generate.tokens)


class ChatRunner:
    """Chat mode: the upstream renders, constrains and parses; its calls are checked here."""

    async def start(self, request: GenerationRequest, loaded: LoadedModel, settings: Settings) -> Running:
        # (off the event loop: images given by URL are read here)
        converse = await asyncio.to_thread(upstream_chat.converse, request, loaded, settings)
        engine = loaded.engine
        assert isinstance(engine, ChatEngine), "chat mode is an upstream's (models/host.py)"
        stream = engine.submit_chat(converse)
        n_prompt = await stream.prepared()  # the upstream's refusal (its 4xx, a 5xx → 502) before the first byte
        where = f"the upstream {loaded.spec.upstream} (model {loaded.spec.upstream_model or loaded.spec.name})"
        return Running(stream, n_prompt, [upstream_chat.CallChecker(request.output, where) for _ in range(request.n)])

    def render(self, request: GenerationRequest, loaded: LoadedModel) -> str:
        raise token_mode_only(loaded.spec.name)

    def tokens(self, request: GenerationRequest, loaded: LoadedModel, settings: Settings) -> list[int]:
        raise token_mode_only(loaded.spec.name)


RUNNERS: dict[str, TokenRunner | ChatRunner] = {"tokens": TokenRunner(), "chat": ChatRunner()}


def runner(loaded: LoadedModel) -> TokenRunner | ChatRunner:
    return RUNNERS[loaded.mode]
