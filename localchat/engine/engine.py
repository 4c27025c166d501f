"""The in-process engine: a model and its scheduler in this process (base.py says what every
engine offers; worker.py is the same behind a process boundary)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

from .base import Stream
from .embed import Embedder
from .model import Model
from .params import N_BATCH, Event, Generate
from .scheduler import Scheduler


class LocalEngine:
    """A model and the scheduler that decodes with it, in this process: `parallel` slots of
    `n_ctx` tokens each. `WorkerEngine` (worker.py) is the same behind a process boundary."""

    def __init__(self, path: Path, *, n_ctx: int, parallel: int = 4, max_queue: int = 64,
                 n_threads: int | None = None, n_gpu_layers: int = 0, n_batch: int = N_BATCH,
                 visible: Iterable[str] = (), pooling: int | None = None, rope: tuple[str, float] | None = None) -> None:
        self.model = Model(path, n_gpu_layers=n_gpu_layers)
        try:
            self.scheduler = Scheduler(self.model, n_ctx=n_ctx, parallel=parallel, max_queue=max_queue,
                                       n_threads=n_threads, n_batch=n_batch, rope=rope)
        except BaseException:
            self.model.close()
            raise
        self.model.show_tokens(visible)
        self.n_ctx, self.parallel, self.tokenizer = n_ctx, parallel, self.model
        self._pooling, self._threads, self._embedder_ready = pooling, n_threads, threading.Lock()
        self._embedder: Embedder | None = None

    def check_fits(self, tokens: list[int]) -> None:
        self.model.check_fits(tokens, self.n_ctx)

    def submit(self, request: Generate) -> Stream:
        """Queue a request (raises QueueFull past the queue's limit); must run on the event loop."""
        self.check_fits(request.tokens)
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

    def stats(self) -> dict[str, Any]:
        return {**self.scheduler.stats(), "n_ctx": self.n_ctx, "bytes": self.model.size_bytes, "worker": None}

    def close(self) -> None:
        self.scheduler.close()
        if self._embedder is not None:
            self._embedder.close()
        self.model.close()
