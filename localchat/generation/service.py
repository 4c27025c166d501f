"""The generation service, `Chat`: what the protocols (api/) call, and the only thing they hold.

Generation: a neutral request in, neutral events out (both localchat/neutral.py) — content,
reasoning, tool calls, log-probabilities, and each choice's finish with its usage. Everything
that can reject a request (unknown model, bad template input, a prompt longer than the context, a
full queue) happens in `start`, before the caller sends its first byte. Stop reasons and call ids
in a protocol's words are each protocol's business.

Beside it, the other use-cases of a model, each in its module: `embed` (embed.py), `rerank`
(rerank.py), `tokenize` and `detokenize` (tokens.py); the server's `settings`; and `models`
(models.py): what is registered and loaded, loading, pulling, LoRA scales."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from ..engine import Done, PromptLogprobs, Stream, Text
from ..engine.params import CallDelta, Thought
from ..logs import RequestRecord, current_request
from ..models import Settings
from ..models.host import Lease, ModelHost
from ..neutral import Finish, GenerationRequest, Logprobs, Piece, Usage
from . import constraints, limits
from .embed import EmbedRequest, Embedding, embed
from .models import Models
from .rerank import Ranking, RerankRequest, rerank
from .runners import Reader, runner
from .tokens import Tokenized, detokenize, pieces_of, tokenize
from .upstream_chat import CallChecker

log = logging.getLogger("localchat.generation")



@dataclass
class Turn:
    """One answer (n answers) being generated. Holds its model until the last event; `close`
    cancels it and lets the model go (idempotent), and counts what the choices that had not
    finished generated into the request's log record."""

    model: str
    n: int
    prompt_tokens: int  # known before the first event
    _lease: Lease
    _stream: Stream
    _readers: Sequence[Reader]  # one per choice (runners.py)
    loosened: tuple[str, ...] = ()  # schema keywords neither the grammar nor a check holds: "[tool]#/path:keyword"
    checked: tuple[str, ...] = ()  # those the grammar holds in part, checked as written (a broken value written again)
    unchecked: tuple[str, ...] = ()  # of the checked, those the checking gave up on (known once the answer ends)
    _record: RequestRecord | None = None
    _running: set[int] = field(default_factory=set)  # the choices whose Finish has not been given yet
    _explain: Callable[[int, tuple[int, ...]], str] | None = None  # where a prompt token is, in words (prepare.py)
    _closed: bool = False

    async def events(self) -> AsyncIterator[tuple[int, Piece | Logprobs | PromptLogprobs | Finish]]:
        """(choice index, event) pairs; each choice ends with its Finish. A request that asked for
        prompt_logprobs gets them first (choice 0)."""
        record = self._record = current_request()
        self._running = set(range(self.n))
        try:
            async for event in self._stream:
                if isinstance(event, PromptLogprobs):
                    yield 0, event
                    continue
                split = self._readers[event.index]
                if isinstance(event, Text):
                    if record is not None and event.text:
                        record.text()
                    if event.logprobs:
                        yield event.index, Logprobs(event.index, event.logprobs)
                    for piece in split.push(event.text):
                        yield event.index, piece
                elif isinstance(event, (Thought, CallDelta)):  # an engine that parses itself (chat mode)
                    assert isinstance(split, CallChecker)  # (runners.ChatRunner's reader)
                    for piece in split.take(event):
                        yield event.index, piece
                elif isinstance(event, Done):
                    for piece in split.finish():
                        yield event.index, piece
                    reason = "length" if event.finish_reason == "length" else "stop" if event.matched_stop is not None else "end"
                    usage = Usage(event.prompt_tokens, event.completion_tokens, event.cached_tokens, event.resampled,
                                  event.prediction)
                    if event.unchecked:
                        self.unchecked = tuple(dict.fromkeys((*self.unchecked, *event.unchecked)))
                        log.warning("schema keywords no longer checked after %d tokens written again (the answer "
                                    "may break them): %s", event.resampled, ", ".join(event.unchecked))
                    self._running.discard(event.index)
                    if record is not None and record.miss is None and self._stream.miss is not None:
                        record.miss = await self._missed(*self._stream.miss)
                    if record is not None:
                        record.done(event.prompt_tokens, event.cached_tokens, event.completion_tokens, reason,
                                    event.why, event.drafted, event.kept)
                    yield event.index, Finish(reason, usage, event.index, event.matched_stop, split.calls)
        except Exception as exc:
            if record is not None:
                record.error = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self.close()

    async def _missed(self, kind: str, n: int, held: int, theirs: tuple[int, ...]) -> str:
        """Why the cache served less than it held, for the access log (prefix_cache.py's `_missed`)."""
        if kind == "busy":
            return f"a slot busy with another request holds {n:,} tokens of this prompt"
        if kind == "unused":
            return f"a cached prompt of {held:,} tokens holds {n:,} of this one and was not used"
        if kind == "evicted":
            return (f"evicted: the slot that held {n:,} tokens of this prompt was given to another prompt "
                    "(the least recently used slot goes)")
        if kind == "dropped":
            return (f"evicted: a saved prompt that held {n:,} tokens of this one was removed from the prompt store "
                    "(the least recently used go first, within prompt_cache_bytes)")
        if kind == "stale":
            return (f"a prompt saved for another version of this model file holds {n:,} tokens of this one "
                    "(the file changed since: its saved prompts are not used)")
        where = await asyncio.to_thread(self._explain, n, theirs) if self._explain else f"token {n:,}"
        return f"differs from a cached prompt of {held:,} tokens at token {n:,}: {where}"

    def close(self) -> None:
        self._stream.close()
        self._lease.release()
        if not self._closed and self._record is not None and self._running:  # cancelled: what it had read and generated
            self._record.generated += sum(self._stream.generated.get(i, 0) for i in self._running)
            self._record.cached_tokens = self._record.cached_tokens or self._stream.cached
        self._closed = True


def total_usage(finishes: list[Finish]) -> Usage:
    first = finishes[0].usage
    return Usage(first.prompt_tokens, sum(f.usage.completion_tokens for f in finishes), first.cached_tokens,
                 sum(f.usage.resampled_tokens for f in finishes), first.prediction if len(finishes) == 1 else None)


class Chat:
    """`host` is the server's (server.py builds and closes it); the API goes through `models`."""

    def __init__(self, host: ModelHost) -> None:
        self.host = host
        self.models = Models(host)

    @property
    def settings(self) -> Settings:
        """The server's settings and limits: models.toml's top-level keys, `localchat serve`'s flags over them."""
        return self.host.settings

    async def _checked_lease(self, request: GenerationRequest) -> Lease:
        """The server's limits (off the event loop: 100 new schemas take ~0.5 s to check) and the
        output's rules checked, then the model leased."""
        await asyncio.to_thread(limits.check, request, self.settings)
        constraints.check(request.output)
        return await self.host.lease(request.model, request.keep_alive)

    async def start(self, request: GenerationRequest) -> Turn:
        """Everything that can reject the request happens here, before a byte is sent: the
        server's limits (limits.py), the model, the template, the grammar, the prompt's length
        (checked by the engine as it takes the request), a full queue. The model's runner
        (runners.py) takes it to the engine."""
        lease = await self._checked_lease(request)
        try:
            loaded = lease.model
            limits.check_n(request.n, loaded.engine.parallel)
            started = await runner(loaded).start(request, loaded, self.settings)
        except BaseException:
            lease.release()
            raise
        if (record := current_request()) is not None:
            record.model, record.prompt_tokens = loaded.spec.name, started.prompt_tokens
        return Turn(loaded.spec.name, request.n, started.prompt_tokens, lease, started.stream, started.readers,
                    started.loosened, started.checked, _explain=started.explain)

    async def render(self, request: GenerationRequest) -> str:
        """The chat prompt as text, as `start` would render it (nothing is generated)."""
        async with self.models.hold(request.model, request.keep_alive) as loaded:
            return await asyncio.to_thread(runner(loaded).render, request, loaded)

    async def count_tokens(self, request: GenerationRequest) -> int:
        """The prompt's length in tokens, as `start` would build it (the context is not checked)."""
        return len(await self.prompt_tokens(request))

    async def prompt_tokens(self, request: GenerationRequest) -> list[int]:
        """The prompt's tokens, as `start` would build them (the context is not checked)."""
        lease = await self._checked_lease(request)
        try:
            return await asyncio.to_thread(runner(lease.model).tokens, request, lease.model, self.settings)
        finally:
            lease.release()

    async def embed(self, request: EmbedRequest) -> Embedding:
        """One L2-normalized vector per input (embed.py)."""
        return await embed(self.models, request)

    async def rerank(self, request: RerankRequest) -> Ranking:
        """The documents' relevance to the query, best first (rerank.py)."""
        return await rerank(self.models, request)

    async def tokenize(self, model: str | None, text: str, *, add_special: bool = False, parse_special: bool = True,
                       pieces: bool = False) -> Tokenized:
        """The text's tokens, and their pieces when asked for (tokens.py)."""
        return await tokenize(self.models, model, text, add_special=add_special, parse_special=parse_special,
                              pieces=pieces)

    async def pieces(self, model: str | None, tokens: list[int]) -> list[str]:
        """Each token's text (tokens.py)."""
        return await pieces_of(self.models, model, tokens)

    async def detokenize(self, model: str | None, tokens: list[int]) -> str:
        """The tokens' text (tokens.py)."""
        return await detokenize(self.models, model, tokens)
