"""The in-process engine: a model and its scheduler in this process (base.py says what every
engine offers; worker.py is the same behind a process boundary)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import fields
from pathlib import Path

from .base import Stream, check_adapters
from .base import deliver as deliver_to_streams
from .cache.prompt_store import PromptStore, model_key
from .core.scheduler import Scheduler
from .llama.embed import Embedder
from .llama.model import Model
from .llama.rerank import Ranker
from .media.vision import Projector
from .outputs import StepOutput
from .params import N_BATCH, Draft, EngineConfig, EngineStats, Event, Generate, SlotDone, SlotInfo


class LocalEngine:
    """A model and the scheduler that decodes with it, in this process: `parallel` slots of
    `n_ctx` tokens each. `WorkerEngine` (worker.py) is the same behind a process boundary."""

    confirms = False  # submit refuses at once (base.py)

    def __init__(self, path: Path, *, n_ctx: int, parallel: int = 4, max_queue: int | None = 64,
                 n_threads: int | None = None, n_gpu_layers: int = 0, n_batch: int = N_BATCH,
                 visible: Iterable[str] = (), pooling: int | None = None, rope: tuple[str, float] | None = None,
                 loras: Iterable[str] = (), mmproj: str | None = None, prompt_cache: str | None = None,
                 prompt_cache_bytes: int = 0, tensor_split: Iterable[float] | None = None,
                 draft: Draft | None = None, step_costs: str | None = None,
                 cache_types: tuple[str, str] = ("f16", "f16"),
                 deliver: Callable[[StepOutput], None] | None = None) -> None:
        """deliver: where each step's outputs go (default: the streams of `submit`; a worker's child
        sends them to the server)."""
        self.model = Model(path, n_gpu_layers=n_gpu_layers, tensor_split=tensor_split)
        self.projector: Projector | None = None
        self.draft_model: Model | None = None  # speculative decoding's draft model (draft_model.py)
        try:
            self.model.load_adapters(loras)
            if draft is not None:
                from .drafting.draft_model import check_compatible

                self.draft_model = Model(Path(draft.path), n_gpu_layers=draft.gpu_layers)
                check_compatible(self.model, self.draft_model)
            if mmproj:
                self.projector = Projector(self.model, Path(mmproj), n_threads=n_threads, use_gpu=n_gpu_layers != 0)
            # prompts kept on disk under `prompt_cache` (a folder), up to prompt_cache_bytes (0: none)
            store = PromptStore(Path(prompt_cache), path, prompt_cache_bytes, cache_types) \
                if prompt_cache and prompt_cache_bytes else None
            self.scheduler = Scheduler(self.model, n_ctx=n_ctx, parallel=parallel, max_queue=max_queue,
                                       n_threads=n_threads, n_batch=n_batch, rope=rope, projector=self.projector,
                                       store=store, draft=(self.draft_model, draft) if draft is not None else None,
                                       step_costs=step_costs, cache_types=cache_types,
                                       deliver=deliver or _to_streams)
        except BaseException:
            if self.projector is not None:
                self.projector.close()
            if self.draft_model is not None:
                self.draft_model.close()
            self.model.close()
            raise
        self.model.show_tokens(visible)
        self.n_ctx, self.parallel, self.tokenizer = n_ctx, parallel, self.model
        self.n_adapters = len(self.model.adapters)
        self._pooling, self._threads, self._embedder_ready = pooling, n_threads, threading.Lock()
        self._embedder: Embedder | None = None
        self._rankers: dict[tuple[int, int] | None, Ranker] = {}
        self._key = model_key(path)  # what a slot file saved with this model file says (slot_actions.py)

    @classmethod
    def from_config(cls, config: EngineConfig, deliver: Callable[[StepOutput], None] | None = None) -> "LocalEngine":
        """The engine models/host.py chose (its RPC endpoints, if any, registered by the caller)."""
        options = {f.name: getattr(config, f.name) for f in fields(config) if f.name not in ("path", "rpc")}
        return cls(Path(config.path), deliver=deliver, **options)

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

    async def slots(self) -> list[SlotInfo]:
        return self.slots_blocking()

    def slots_blocking(self) -> list[SlotInfo]:
        return self.scheduler.slots_info()

    async def slot_action(self, action: str, slot_id: int, path: str | None = None) -> SlotDone:
        """llama-server's slot actions (slot_actions.py): save a slot's cache to `path`, restore it from
        `path`, erase it; off the event loop."""
        return await asyncio.to_thread(self.slot_action_blocking, action, slot_id, path)

    def slot_action_blocking(self, action: str, slot_id: int, path: str | None = None) -> SlotDone:
        from .core.slot_actions import slot_action

        return slot_action(self.scheduler, self._key, action, slot_id, path)

    def probe(self) -> None:
        pass  # (nothing elsewhere to ask)

    def stats(self) -> EngineStats:
        return EngineStats(**self.scheduler.stats(), n_ctx=self.n_ctx, bytes=self.model.size_bytes)

    def close(self) -> None:
        self.scheduler.close()
        if self._embedder is not None:
            self._embedder.close()
        for ranker in self._rankers.values():
            ranker.close()
        if self.projector is not None:
            self.projector.close()
        if self.draft_model is not None:
            self.draft_model.close()
        self.model.close()


def _to_streams(output: StepOutput) -> None:
    """A step's events to the streams that submitted them (the event loop woken once a step)."""
    deliver_to_streams(output.events)
