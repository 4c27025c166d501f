"""What the scheduler asks of llama.cpp (scheduler.py decides; this does): the context of the
slots, a request's sequences and the cells its prompt finds (prefix_cache.py), the step's decode
(decoder.py), and the cells a request leaves behind. A scheduler made with another executor (a
scripted one: tests/test_scheduler_policy.py) runs its admission, queue, cancels and slot choice
with no model."""

from __future__ import annotations

from collections.abc import Callable

import llama_cpp as C

from ...errors import EngineError, LocalchatError
from ..cache.prefix_cache import Landed, Placement, PrefixCache
from ..cache.prompt_store import PromptStore
from ..drafting.draft_model import DraftContext
from ..llama.model import Model
from ..media.vision import Projector, Span
from ..params import Draft
from ..state.job import Adapters, Job, make_sequence
from ..state.slot import Sequence, Slot
from .decoder import Decoder, StepPlan, open_context, shiftable
from .media_feed import MediaFeed


class Executor:
    def __init__(self, model: Model, *, n_ctx: int, parallel: int, n_threads: int, n_batch: int,
                 rope: tuple[str, float] | None, projector: Projector | None, store: PromptStore | None,
                 draft: tuple[Model, Draft] | None, step_costs: str | None, cache_types: tuple[str, str],
                 wake: Callable[[], None]) -> None:
        """wake: called (from the media thread) when a media chunk is encoded."""
        self.model, self.n_ctx, self.store = model, n_ctx, store
        self.ctx = open_context(model, n_ctx=n_ctx, parallel=parallel, n_batch=n_batch, n_threads=n_threads,
                                rope=rope, cache_types=cache_types)
        self.mem = C.llama_get_memory(self.ctx)
        # a draft model's context (draft_model.py): one sequence per slot, as this one
        try:
            self.draft = DraftContext(draft[0], model, draft[1], n_ctx=n_ctx, parallel=parallel,
                                      n_threads=n_threads) if draft is not None else None
        except BaseException:
            C.llama_free(self.ctx)
            raise
        self.slots = [Slot(i) for i in range(parallel)]
        self.media = MediaFeed(projector, n_ctx, wake) if projector else None
        # the batch each step decodes, and what a step costs (decoder.py)
        self.decoder = Decoder(model, self.ctx, n_batch=n_batch, n_ctx=n_ctx, n_threads=n_threads,
                               media=self.media, step_costs=step_costs)
        # the cells a request reuses, moves, restores or saves (prefix_cache.py); a draft model's cells cannot move
        self.cache = PrefixCache(self.ctx, self.slots, n_ctx, store,
                                 shiftable(model, self.ctx, cache_types[0]) and self.draft is None,
                                 self.decoder.decode_one)

    @property
    def probing(self) -> bool:
        """Whether what a step costs is still to be measured (a step of it while idle: `measure`)."""
        return self.decoder.probe is not None

    def measure(self) -> None:
        self.decoder.measure()

    @property
    def adapters(self) -> Adapters:
        """The LoRA adapters applied to the context now."""
        return self.decoder.adapters

    def start(self, job: Job) -> list[Sequence]:
        """The job's sequences in its slots (raises, all undone, if a sampler cannot be made:
        a grammar llama.cpp rejects)."""
        seqs: list[Sequence] = []
        try:
            for i, slot in enumerate(job.slots):
                seqs.append(make_sequence(job, i, slot, self.model, self.n_ctx))
                seqs[-1].draft_model = self.draft
            return seqs
        except Exception as exc:
            for seq in seqs:
                seq.sampler.close()
            if isinstance(exc, LocalchatError):
                raise
            raise EngineError(f"llama.cpp failed: {exc}") from exc

    def place(self, job: Job) -> Placement:
        """How much of the job's prompt its lead slot serves, moves or restores (prefix_cache.py)."""
        return self.cache.place(job)

    def land(self, job: Job) -> Landed | None:
        """The moved stretches whose new span is read join the lead slot (prefix_cache.py)."""
        return self.cache.land(job)

    def decode_media(self, adapters: Adapters, jobs: list[Job],
                     fail: Callable[[Job, BaseException], None]) -> list[tuple[Job, Span]]:
        """The encoded media chunks the prompts have reached, each in a decode of its own (decoder.py)."""
        return self.decoder.decode_media(adapters, jobs, fail)

    def plan(self, jobs: list[Job]) -> StepPlan:
        """What one decode of these requests holds (decoder.py): nothing is written yet."""
        return self.decoder.plan(jobs)

    def execute(self, adapters: Adapters, plan: StepPlan) -> int:
        """The plan's batch, one llama_decode (its return code)."""
        return self.decoder.execute(adapters, plan)

    def share(self, job: Job) -> None:
        """n > 1, the prompt read: its cells copied to the other slots' sequences (decoder.py)."""
        self.decoder.share(job)

    def update(self, plan: StepPlan, jobs: list[Job], fail: Callable[[Job, BaseException], None]) -> None:
        """After the decode: the sequences sample (decoder.py)."""
        self.decoder.update(plan, jobs, fail)

    def finish(self, job: Job) -> None:
        """The job has ended: its samplers go, its prompt is saved if worth it."""
        for seq in job.seqs:
            seq.sampler.close()
        self.cache.save(job)

    def empty(self, slot: Slot) -> None:
        """Forget every cell of the slot's sequence (and of its draft model's; the scheduler empties the slot)."""
        C.llama_memory_seq_rm(self.mem, slot.seq_id, -1, -1)
        if self.draft is not None:
            self.draft.forget(slot.seq_id)

    def release(self, job: Job) -> None:
        """What the job held outside the slots (its media's embeddings)."""
        if self.media is not None:
            self.media.release(job)

    def stop(self) -> None:
        """No more media encoding (waits for a chunk under way): the first step of unloading."""
        if self.media is not None:
            self.media.close()

    def close(self) -> None:
        """Free the context, the draft model's and the step-cost probe's; the prompt store's copies
        reach the disk. After `stop`, and after the requests still here were told."""
        if self.store is not None:
            self.store.close()  # what was copied out reaches the disk before the model goes
        self.decoder.close()
        C.llama_free(self.ctx)
        self.ctx = None
        if self.draft is not None:
            self.draft.close()
