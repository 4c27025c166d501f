"""The engine core of one model: N slots of one llama context, and the step that runs them.

A request waits in a bounded FIFO queue until enough slots are free; it takes the free slot whose
cache shares the longest prefix with its prompt, if that prefix is more than half of the prompt or
of the slot's cache (else an empty or the least recently used slot), and the prefix cache
(prefix_cache.py) says how much of its prompt that slot serves. With n > 1 the prompt is decoded
once and its cells are shared with the other n - 1 slots. Each step is one decode of every running
request (decoder.py: a token each, drafts, prompt chunks); requests with other LoRA adapters decode
in a batch of their own in the same step (_step). `step()` is one turn on the caller's thread and
returns what it produced (a StepOutput: each request's events); the engines run it in a thread of
its own and hand each step's outputs to their `deliver`. Other threads reach the context only through
`between_steps` (llama-server's slot actions: the prefix cache's slot_state; slot_restore and
slot_erase here, which apply what the cache did), run between two steps. Only the scheduler writes
requests (Job) and slots (Slot): the parts below answer (tests/test_writers.py). While idle, a
step measures what a step of k tokens costs (draft_cost.probe)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from ...errors import EngineError, InvalidRequest, LocalchatError, ModelUnavailable
from ..base import check_queue
from ..cache.prefix_cache import reuse
from ..cache.prompt_store import PromptStore
from ..llama.model import Model
from ..media.vision import Expanded, Projector
from ..outputs import Outbox, StepOutput
from ..params import N_BATCH, Draft, Generate, SlotInfo, Started
from ..state.job import Adapters, Job, owned, vacancy
from ..state.slot import Slot
from .decoder import StepPlan
from .executor import Executor

_log = logging.getLogger("localchat.engine")
T = TypeVar("T")


class Scheduler:
    def __init__(self, model: Model, *, n_ctx: int, parallel: int, max_queue: int | None,
                 n_threads: int | None = None, n_batch: int = N_BATCH, rope: tuple[str, float] | None = None,
                 projector: Projector | None = None, store: PromptStore | None = None,
                 draft: tuple[Model, Draft] | None = None, step_costs: str | None = None,
                 cache_types: tuple[str, str] = ("f16", "f16"),
                 deliver: Callable[[StepOutput], None] | None = None, executor: Executor | None = None) -> None:
        """deliver: step in a thread of its own whenever there is work, and hand each step's outputs
        to `deliver` there (the engines: base.deliver to the streams, a worker's child to the
        server); None: the caller calls `step()` and takes what it returns (tests: no thread).
        executor: what runs the steps in llama.cpp (default: one made of the other arguments)."""
        self.parallel, self.max_queue = parallel, max_queue
        n_batch = max(n_batch, parallel + 1)
        # what the scheduler asks of llama.cpp (executor.py): a scripted one runs the policy with no model
        self.executor = executor or Executor(model, n_ctx=n_ctx, parallel=parallel,
                                             n_threads=n_threads or os.cpu_count() or 1, n_batch=n_batch, rope=rope,
                                             projector=projector, store=store, draft=draft, step_costs=step_costs,
                                             cache_types=cache_types, wake=self._wake)
        self.slots = self.executor.slots
        self.queue: deque[Job] = deque()
        self.running: list[Job] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._preparing = 0  # requests whose media are being tokenized before they queue
        self._woken = False  # a media chunk was encoded since the loop last looked
        self.outbox = Outbox()  # the requests' events until the step ends (outputs.py)
        self._deliver = deliver
        self._commands: deque[tuple[Callable[[], Any], Future]] = deque()  # for the loop to run between steps
        self._tasks = 0  # requests admitted so far: each slot's `task` is the number of its last one
        self._thread: threading.Thread | None = None
        if deliver is not None:
            self._thread = threading.Thread(target=self._loop, name="localchat-scheduler", daemon=True)
            self._thread.start()

    # -- called from other threads ---------------------------------------------------------

    def submit(self, request: Generate, sink: Any) -> Job:
        """Queue a request; its events go to `sink` in the step outputs (StepOutput.events)."""
        if request.n > self.parallel:  # generation says so first (limits.check_n): the same 400 from either
            raise InvalidRequest(f"at most {self.parallel} completions per request for this model (its `parallel` "
                                 "setting)", field="n")
        if request.media and self.executor.media is None:
            raise InvalidRequest(f"{request.media[0].param}: this model takes no images or audio (it has no "
                                 "projector: `mmproj` in models.toml)", param=request.media[0].param)
        job = Job(request, sink, self.outbox)
        with self._cond:
            free = sum(not s.busy for s in self.slots)  # the queue's head takes these at the next step
            waiting = len(self.queue) + self._preparing
            check_queue(waiting, free, self.max_queue, "this model")
            if self.executor.media is None or not request.media:
                self.queue.append(job)
                self._cond.notify()
                return job
            self._preparing += 1
        self.executor.media.prepare(job, self._prepared)
        return job

    def _prepared(self, job: Job, prompt: Expanded | None) -> None:
        """A request's media are tokenized into its prompt (None: it failed, and was told): it queues now."""
        with self._cond:
            self._preparing -= 1
            if prompt is not None:
                job.prompt, job.tokens, job.n_prompt = prompt, prompt.tokens, len(prompt.tokens)
                self.queue.append(job)
            self._cond.notify()

    def _wake(self) -> None:
        """A media chunk is encoded: its request may go on (even if the loop is not waiting yet)."""
        with self._cond:
            self._woken = True
            self._cond.notify()

    def cancel(self, job: Job) -> None:
        job.cancelled = True
        with self._cond:
            self._cond.notify()

    def between_steps(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the scheduler's thread between two steps (never beside a decode), and return
        what it returns or raise what it raises; the calling thread waits until then (a step at most)."""
        if self._thread is None:  # no loop: the caller steps, so this is between two steps
            return fn()
        future: Future = Future()
        with self._cond:
            if self._stopping:
                raise ModelUnavailable("the model is being unloaded", param="model")
            self._commands.append((fn, future))
            self._cond.notify()
        return future.result()

    def slots_info(self) -> list[SlotInfo]:
        """Each slot's state now (read from any thread: a snapshot, not a lock)."""
        return [SlotInfo(s.seq_id, s.busy, len(s.cells), s.task) for s in self.slots]

    def stats(self) -> dict[str, int]:
        return {"slots": self.parallel, "busy": sum(s.busy for s in self.slots),
                "queued": len(self.queue) + self._preparing}

    def close(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()
        while self._commands:  # asked for while the loop was stopping: never run
            self._commands.popleft()[1].set_exception(ModelUnavailable("the model was unloaded", param="model"))
        self.executor.stop()
        for job in [*self.running, *self.queue]:
            job.emit(EngineError("the model was unloaded"))
            job.emit(None)
            self.executor.release(job)
        self._ship()  # (with no thread: the caller's next step() never comes; nothing is handed out)
        self.executor.close()

    # -- the loop --------------------------------------------------------------------------

    def holds(self, job: Job) -> bool:
        """Whether the request is still queued or running here."""
        return job in self.running or job in self.queue

    def _loop(self) -> None:
        """Step while there is work, each step's outputs delivered; sleep until there is."""
        deliver = self._deliver
        assert deliver is not None
        while True:
            # First: a request cancelled during the last step frees its slot, and the prompt it had
            # read stays there as that slot's cache, so a client's immediate retry is admitted into it.
            self._drop_cancelled()
            self._ship()  # what the drop emitted goes out before the loop sleeps
            with self._cond:
                if not self._stopping and self._idle() and not self.executor.probing:
                    self._cond.wait()  # then one turn, if only to flush (a request refused while preparing)
                if self._stopping:
                    return
            output = self.step()
            deliver(output)
            if not output.busy and self.running:  # every running request waits for its media to encode
                with self._cond:
                    if not self._woken:
                        self._cond.wait(0.05)
                    self._woken = False

    def step(self) -> StepOutput:
        """One turn, on the caller's thread: the commands asked for between steps, then the
        cancelled dropped, the queue's head admitted into free slots (their cached prompts reused,
        moved or restored), and one decode of every running request (a token each, prompt chunks,
        drafts). Idle, with the step costs still unmeasured: one decode of that measurement instead.
        Returns every request's events since the last step, and whether a decode ran."""
        with self._cond:
            probing = self.executor.probing and self._idle()
            commands = [self._commands.popleft() for _ in range(len(self._commands))]
        if probing:  # nothing else to do: one decode of the step-cost measurement
            self.executor.measure()
            return StepOutput(self.outbox.take(), True)
        for fn, future in commands:  # before admitting: a slot found free by a command is still free
            try:
                future.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - the caller raises it
                future.set_exception(exc)
        try:
            self._drop_cancelled()  # before admitting: a client's retry sent with its cancel finds the prompt it left
            with self._cond:
                admitted = self._admit()
            for job in admitted:
                self._start(job)
            self._drop_cancelled()
            busy = self._step() if self.running else False
        except Exception as exc:  # noqa: BLE001 - a bug of ours: the requests it may have touched end with an error
            self._fail_all(exc)
            busy = True
        return StepOutput(self.outbox.take(), busy)

    def _ship(self) -> None:
        """Hand out the events made outside a step (a drop before the loop sleeps, an unload)."""
        if self._deliver is None:  # (no thread: the caller takes them, with its next step or from the outbox)
            return
        events = self.outbox.take()
        if events:
            self._deliver(StepOutput(events, False))

    def _idle(self) -> bool:
        return not self.running and not self.queue and not self._commands

    def _admit(self) -> list[Job]:
        """Take queued jobs, first come first served, while enough slots are free."""
        admitted = []
        if any(j.cancelled for j in self.running):  # cancelled since the drop: the next step frees its slot first
            return admitted
        while self.queue:
            job = self.queue[0]
            if job.cancelled:  # its client left while it waited: it never starts
                self.queue.popleft()
                job.emit(None)
                self.executor.release(job)
                continue
            free = [s for s in self.slots if not s.busy]
            if len(free) < job.request.n:
                break
            self.queue.popleft()
            lead = max(free, key=lambda s: (reuse(s, job), owned(s, job), vacancy(s)))
            others = sorted((s for s in free if s is not lead), key=vacancy, reverse=True)[: job.request.n - 1]
            self._tasks += 1
            for s in (lead, *others):
                s.busy, s.task = True, self._tasks
            job.slots = [lead, *others]
            lead.key = job.request.cache_key
            admitted.append(job)
        return admitted

    def _start(self, job: Job) -> None:
        """Make the job's sequences (samplers can fail: a grammar llama.cpp rejects) and find
        how much of its prompt the lead slot already holds (prefix_cache.py)."""
        try:
            job.seqs = self.executor.start(job)
        except LocalchatError as exc:  # reported to its own request only
            for slot in job.slots:
                slot.busy = False
            job.emit(exc)
            job.emit(None)
            self.executor.release(job)
            return
        self.running.append(job)  # (before the cache places it: if that fails, the job is failed with the others)
        placed = self.executor.place(job)
        assert placed.held is not None
        job.slots[0].copy_from(placed.held)
        job.cached, job.pending, job.jumps, job.moved, job.miss = (placed.cached, placed.pending, placed.jumps,
                                                                   placed.moved, placed.miss)
        self._land(job)  # a moved stretch right after the prefix (a deletion) joins it now
        job.emit(Started(job.cached, job.miss))

    def _land(self, job: Job) -> None:
        """The moved stretches whose new span is read join the lead slot (prefix_cache.py's `land`)."""
        landed = self.executor.land(job)
        if landed is not None:
            job.slots[0].cells[:] = landed.cells
            job.jumps, job.moved, job.pending, job.cached = landed.jumps, landed.moved, landed.pending, landed.cached

    def _drop_cancelled(self) -> None:
        for job in [j for j in self.running if j.cancelled]:
            for seq in job.seqs:
                if seq.finish is None:
                    seq.cancel()
            self._finish(job)

    def _step(self) -> bool:
        """One llama_decode per set of LoRA adapters among the running requests (llama.cpp applies
        adapters to a whole context, not per sequence): most often one. Every set with work gets
        its decode in every step, so none waits more than a step; the set decoded last comes first
        in the next step, so two sets switch adapters once a step, not twice."""
        groups: dict[Adapters, list[Job]] = {}
        for job in self.running:
            groups.setdefault(job.request.adapters, []).append(job)
        order = sorted(groups, key=lambda a: a != self.executor.adapters)
        busy = False
        for adapters in order:
            busy = self._decode(adapters, groups[adapters]) or busy
        for job in [j for j in self.running if all(s.finish for s in j.seqs)]:
            self._finish(job)
        return busy

    def _decode(self, adapters: Adapters, jobs: list[Job]) -> bool:
        """One decode of these requests (one set of LoRA adapters): a prompt that has reached an
        encoded media chunk decodes it first, in a decode of its own; then the plan (the next token
        of every generating sequence, its drafts, prompt chunks), its prompt chunks read into the
        jobs (`advance`), the batch, and the sampling. Whether anything was decoded."""
        decoded = self.executor.decode_media(adapters, jobs, self._fail)
        for job, span in decoded:  # (its chunk's cells are the lead slot's now)
            job.lead.slot.add_media(span.n_tokens, span.n_pos, span.placeholder)
            del job.pending[:span.n_tokens]
        plan = self.executor.plan(jobs)
        if not plan.rows:
            return bool(decoded)
        rc = self.executor.execute(adapters, plan)
        if rc != 0:
            for job in jobs:
                self._fail(job, EngineError(f"llama_decode returned {rc}"))
            return True
        advance(plan)
        for job in plan.landing:
            self._land(job)
        for row in plan.rows:  # a prompt read whole, n > 1: the other slots hold its cells too
            if isinstance(row.who, Job) and len(row.who.seqs) > 1:
                self.executor.share(row.who)
                for seq in row.who.seqs[1:]:
                    seq.slot.copy_from(row.who.lead.slot)
        self.executor.update(plan, jobs, self._fail)
        for slot, n in plan.cuts:  # drafts not kept: their cells went
            slot.keep(n)
        return True

    def _finish(self, job: Job) -> None:
        self.running.remove(job)
        now = time.monotonic()
        for seq in job.seqs:
            seq.slot.busy, seq.slot.used_at = False, now
            if not job.cancelled:
                job.emit(seq.done(job.n_prompt, job.cached))
        job.jumps, job.moved = [], None  # (ended inside a new span: the slot holds what was read; the moved cells go)
        if job.pending:  # cancelled mid-prompt: the cells past what was decoded are the slot's cache
            total = len(job.tokens)
            read = total - len(job.pending)
            kept = ("a retry of the same prompt goes on from there" if job.request.cache_prompt
                    else "nothing is kept (cache_prompt is off)")
            _log.warning("a request was cancelled while its prompt was read: %d of %d tokens in (%d from the cache); %s",
                         read, total, job.cached, kept)
            job.pending = []
        self.executor.finish(job)
        if not job.request.cache_prompt:  # nothing of it stays: the slots are empty for the next request
            for slot in job.slots:
                self._empty(slot)
        job.emit(None)
        self.executor.release(job)

    def _fail_all(self, exc: Exception) -> None:
        """A step raised what no request's own handling caught (a bug, not a request's fault): every
        running request ends with an error and its slots are emptied; the queue and the server go on."""
        _log.error("a step failed; the %d running requests end with an error", len(self.running), exc_info=True)
        error = EngineError(f"the engine failed: {type(exc).__name__}: {exc}")
        for job in list(self.running):
            try:
                self._fail(job, error)
            except Exception:  # noqa: BLE001 - failing it failed too: what is left of it is undone by hand
                _log.error("ending a failed request failed", exc_info=True)
                if job in self.running:
                    self.running.remove(job)
                for slot in job.slots:
                    self._empty(slot)
                    slot.busy = False
                job.emit(error)
                job.emit(None)
                self.executor.release(job)

    def _fail(self, job: Job, exc: BaseException) -> None:
        if job not in self.running:
            return
        _log.warning("request failed in the engine: %s", exc)
        for seq in job.seqs:
            seq.cancel()
            self._empty(seq.slot)
        job.emit(exc if isinstance(exc, LocalchatError) else EngineError(f"llama.cpp failed: {exc}"))
        job.cancelled = True  # no Done events after an error
        self._finish(job)


    def _empty(self, slot: Slot) -> None:
        """Forget every cell of the slot (and of its draft model's sequence)."""
        self.executor.empty(slot)
        slot.keep(0)

    # -- llama-server's slot actions (slot_actions.py), between two steps -------------------

    def slot_restore(self, slot_id: int, tokens: list[int], state: bytearray) -> None:
        """Replace an idle slot's cells by a checked file's (prefix_cache.py's `slot_restore`)."""
        def restore() -> None:
            held, error = self.executor.cache.slot_restore(slot_id, tokens, state)
            slot = self.slots[slot_id]
            slot.copy_from(held)
            slot.used_at = time.monotonic()
            if error is not None:
                raise error
        self.between_steps(restore)

    def slot_erase(self, slot_id: int) -> int:
        """Empty an idle slot's cells; the tokens it held."""
        def erase() -> int:
            n = self.executor.cache.slot_erase(slot_id)
            self.slots[slot_id].keep(0)
            return n
        return self.between_steps(erase)


def advance(plan: StepPlan) -> None:
    """The plan's batch is decoded: each row's tokens are its slot's cells; each job's pending
    prompt advances by its chunk, and the new span of a shifted reuse under way shrinks by it (its
    moved cells join once it is read)."""
    for row in plan.rows:
        row.slot.cells += row.tokens
        if row.reads is not None:
            del row.reads.pending[:len(row.tokens)]
            if row.reads.jumps:
                row.reads.jumps[0].span -= len(row.tokens)
