"""The engine's async face: submit a `Generate`, iterate its events, cancel by closing.

Plain data in and out, so the same interface sits in front of a worker process (worker.py)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

from ..errors import EngineError, InvalidRequest
from .embed import Embedder
from .rerank import Ranker
from .model import Model
from .params import N_BATCH, Event, Generate, Prepared, Started
from .scheduler import Emit, Scheduler
from .vision import Projector


def check_adapters(request: Generate, n_adapters: int) -> None:
    """The request's LoRA adapters are the model's (the layer above resolves names to indices)."""
    bad = next((i for i, _ in request.adapters if not 0 <= i < n_adapters), None)
    if bad is not None:
        raise InvalidRequest(f"lora: no adapter {bad}; this model has {n_adapters}", param="lora")


class Stream:
    """The events of one submitted request. Closing it (or abandoning it) cancels the request:
    a queued one never starts, a running one stops within one step."""

    def __init__(self, submit: Callable[[Generate, Emit], Any], cancel: Callable[[Any], None],
                 request: Generate) -> None:
        loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Event | Prepared | Started | BaseException | None] = asyncio.Queue()
        self._cancel = cancel
        self._ended = False

        def emit(item: Event | Prepared | Started | BaseException | None) -> None:
            if not loop.is_closed():
                loop.call_soon_threadsafe(self._queue.put_nowait, item)

        self._handle = submit(request, emit)

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events()

    async def prepared(self) -> int:
        """For a request with media: wait until the engine has tokenized them (or refused them:
        that error is raised here, before any output); the prompt's length with its media."""
        try:
            item = await self._queue.get()
        except BaseException:  # the caller gave up (its client left): the request ends
            self.close()
            raise
        if isinstance(item, Prepared):
            return item.prompt_tokens
        self.close()
        raise item if isinstance(item, BaseException) else EngineError("the request ended before it started")

    async def _events(self) -> AsyncIterator[Event]:
        try:
            while (item := await self._queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                if not isinstance(item, (Started, Prepared)):
                    yield item
            self._ended = True
        finally:
            self.close()

    def close(self) -> None:
        if not self._ended:
            self._ended = True
            self._cancel(self._handle)


class Engine:
    """A model and the scheduler that decodes with it, in this process: `parallel` slots of
    `n_ctx` tokens each. `WorkerEngine` (worker.py) is the same behind a process boundary."""

    def __init__(self, path: Path, *, n_ctx: int, parallel: int = 4, max_queue: int = 64,
                 n_threads: int | None = None, n_gpu_layers: int = 0, n_batch: int = N_BATCH,
                 visible: Iterable[str] = (), pooling: int | None = None, rope: tuple[str, float] | None = None,
                 loras: Iterable[str] = (), mmproj: str | None = None) -> None:
        self.model = Model(path, n_gpu_layers=n_gpu_layers)
        self.projector: Projector | None = None
        try:
            self.model.load_adapters(loras)
            if mmproj:
                self.projector = Projector(self.model, Path(mmproj), n_threads=n_threads, use_gpu=n_gpu_layers != 0)
            self.scheduler = Scheduler(self.model, n_ctx=n_ctx, parallel=parallel, max_queue=max_queue,
                                       n_threads=n_threads, n_batch=n_batch, rope=rope, projector=self.projector)
        except BaseException:
            if self.projector is not None:
                self.projector.close()
            self.model.close()
            raise
        self.model.show_tokens(visible)
        self.n_ctx, self.parallel, self.n_vocab = n_ctx, parallel, self.model.n_vocab
        self.n_adapters = len(self.model.adapters)
        self._pooling, self._threads, self._embedder_ready = pooling, n_threads, threading.Lock()
        self._embedder: Embedder | None = None
        self._rankers: dict[tuple[int, int] | None, Ranker] = {}
        self.tokenize, self.token_id = self.model.tokenize, self.model.token_id

    def check_fits(self, tokens: list[int]) -> None:
        self.model.check_fits(tokens, self.n_ctx)

    def submit(self, request: Generate) -> Stream:
        """Queue a request (raises QueueFull past the queue's limit); must run on the event loop."""
        self.check_fits(request.tokens)
        check_adapters(request, self.n_adapters)
        return Stream(self.scheduler.submit, self.scheduler.cancel, request)

    async def generate(self, request: Generate) -> AsyncIterator[Event]:
        async for event in self.submit(request):
            yield event

    async def embed(self, inputs: list[list[int]]) -> list[list[float]]:
        """One L2-normalized vector per input (a second context, made on first use)."""
        return await asyncio.to_thread(self.embed_blocking, inputs)

    def embed_blocking(self, inputs: list[list[int]]) -> list[list[float]]:
        with self._embedder_ready:
            if self._embedder is None:
                self._embedder = Embedder(self.model, pooling=self._pooling, n_threads=self._threads)
        return self._embedder.embed(inputs)

    async def rerank(self, inputs: list[list[int]], judge: tuple[int, int] | None = None) -> list[float]:
        """One relevance score per prompt: the GGUF's rank pooling, or with `judge` (the yes and no
        token ids) P(yes) for the next token (a context of its own, made on first use)."""
        return await asyncio.to_thread(self.rerank_blocking, inputs, judge)

    def rerank_blocking(self, inputs: list[list[int]], judge: tuple[int, int] | None = None) -> list[float]:
        with self._embedder_ready:
            if judge not in self._rankers:
                self._rankers[judge] = Ranker(self.model, judge=judge, n_threads=self._threads)
            ranker = self._rankers[judge]
        return ranker.rank(inputs)

    def stats(self) -> dict[str, Any]:
        return {**self.scheduler.stats(), "n_ctx": self.n_ctx, "bytes": self.model.size_bytes, "worker": None}

    def close(self) -> None:
        self.scheduler.close()
        if self._embedder is not None:
            self._embedder.close()
        for ranker in self._rankers.values():
            ranker.close()
        if self.projector is not None:
            self.projector.close()
        self.model.close()
