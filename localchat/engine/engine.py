"""The engine's async face: submit a `Generate`, iterate its events, cancel by closing.

Plain data in and out, so the same interface can sit in front of a worker process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from ..errors import EngineError
from .model import Model
from .params import Event, Generate
from .scheduler import Job, Scheduler


class Stream:
    """The events of one submitted request. Closing it (or abandoning it) cancels the request:
    a queued one never starts, a running one stops within one step."""

    def __init__(self, scheduler: Scheduler, request: Generate) -> None:
        loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Event | BaseException | None] = asyncio.Queue()
        self._scheduler = scheduler
        self._ended = False

        def emit(item: Event | BaseException | None) -> None:
            if not loop.is_closed():
                loop.call_soon_threadsafe(self._queue.put_nowait, item)

        self._job: Job = scheduler.submit(request, emit)

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events()

    async def _events(self) -> AsyncIterator[Event]:
        try:
            while (item := await self._queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
            self._ended = True
        finally:
            self.close()

    def close(self) -> None:
        if not self._ended:
            self._ended = True
            self._scheduler.cancel(self._job)


class Engine:
    """A model and the scheduler that decodes with it: `parallel` slots of `n_ctx` tokens each."""

    def __init__(self, path: Path, *, n_ctx: int, parallel: int = 4, max_queue: int = 64,
                 n_threads: int | None = None, n_gpu_layers: int = 0, n_batch: int = 512) -> None:
        self.model = Model(path, n_gpu_layers=n_gpu_layers)
        try:
            self.scheduler = Scheduler(self.model, n_ctx=n_ctx, parallel=parallel, max_queue=max_queue,
                                       n_threads=n_threads, n_batch=n_batch)
        except BaseException:
            self.model.close()
            raise
        self.n_ctx, self.parallel = n_ctx, parallel
        self.n_vocab = self.model.n_vocab
        self.tokenize, self.token_id, self.show_tokens = self.model.tokenize, self.model.token_id, self.model.show_tokens

    def check_fits(self, tokens: list[int]) -> None:
        self.model.check_fits(tokens, self.n_ctx)

    def submit(self, request: Generate) -> Stream:
        """Queue a request (raises QueueFull past the queue's limit); must run on the event loop."""
        self.check_fits(request.tokens)
        return Stream(self.scheduler, request)

    async def generate(self, request: Generate) -> AsyncIterator[Event]:
        stream = self.submit(request)
        async for event in stream:
            yield event

    def stats(self) -> dict[str, int]:
        return {**self.scheduler.stats(), "n_ctx": self.n_ctx, "bytes": self.model.size_bytes}

    def close(self) -> None:
        self.scheduler.close()
        self.model.close()


__all__ = ["Engine", "EngineError", "Stream"]
