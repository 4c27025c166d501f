"""The loop that decodes: one llama context, N slots, one llama_batch per step.

Each step holds the next token of every generating sequence, the drafts after them that pay for
what a step costs here (drafts.py, draft_cost.py: verified in the same batch), plus chunks of
pending prompts (chunked prefill: at most `n_batch` tokens a step, so a long prompt delays running
streams by one chunk at most). A request waits in a bounded FIFO queue until enough slots are free; it
takes the free slot whose cache shares the longest prefix with its prompt, if that prefix is
more than half of the prompt or of the slot's cache (else an empty or the least recently used
slot). With n > 1 the prompt is decoded once and its cells are shared with the other n - 1 slots.
Requests with other LoRA adapters decode in a batch of their own in the same step (_step); a
prompt's images and audio decode in decodes of their own as the prompt reaches them (media_feed).
Other threads reach the context only through `between_steps` (llama-server's slot actions: slot_state,
slot_restore, slot_erase), which the loop runs between two steps. While it has nothing else to do,
the loop measures what a step of k tokens costs (draft_cost.probe), once per model and machine."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import llama_cpp as C
import numpy as np

from ..errors import EngineError, InvalidRequest, LocalchatError, ModelUnavailable, QueueFull
from . import draft_cost
from .draft_model import DraftContext
from .job import Adapters, Emit, Job, apply_adapters, make_sequence, read_prompt_logprobs, reuse, vacancy
from .media_feed import MediaFeed
from .model import Model
from .params import N_BATCH, SWA_FULL, Draft, Generate, PromptLogprobs, SlotInfo, Started
from .prefix_cache import PrefixCache
from .prompt_store import PromptStore
from .slot import Sequence, Slot
from .vision import Projector

_log = logging.getLogger("localchat.engine")
# Prompt tokens a step while a request wants their log-probabilities: each is a row of logits in
# llama.cpp's output buffer (32 × a 262k vocabulary: 34 MB), which keeps its largest size.
PROMPT_LOGPROBS_CHUNK = 32
T = TypeVar("T")


CACHE_TYPES = {"f16": C.GGML_TYPE_F16, "q8_0": C.GGML_TYPE_Q8_0, "q4_0": C.GGML_TYPE_Q4_0}  # models.toml's names


class Scheduler:
    def __init__(self, model: Model, *, n_ctx: int, parallel: int, max_queue: int,
                 n_threads: int | None = None, n_batch: int = N_BATCH, rope: tuple[str, float] | None = None,
                 projector: Projector | None = None, store: PromptStore | None = None,
                 draft: tuple[Model, Draft] | None = None, step_costs: str | None = None,
                 cache_types: tuple[str, str] = ("f16", "f16"), run: bool = True) -> None:
        """run: step in a thread of its own whenever there is work (the engines); False: the caller
        calls `step()` (tests: no thread, every step seen)."""
        self.model, self.n_ctx, self.parallel, self.max_queue = model, n_ctx, parallel, max_queue
        self.store = store  # slots' prompts on disk (prompt_store.py): saved when big, restored when they serve
        self.n_batch = max(n_batch, parallel + 1)
        cparams = C.llama_context_default_params()
        cparams.n_ctx = n_ctx * parallel  # every slot may hold a whole context_length
        cparams.n_seq_max = parallel
        # One KV stream per slot: a sequence's cells stay in position order, so its results do not
        # depend on what the other slots hold or decode (in a unified cache they do, on the CPU:
        # up to 0.7 in a logit, with flash attention from cell order, without it from batch mates).
        # llama.cpp then batches only consecutive slot ids in one graph: see _step and _admit.
        cparams.kv_unified = False
        cparams.n_batch = cparams.n_ubatch = self.n_batch
        cparams.n_threads = cparams.n_threads_batch = n_threads or os.cpu_count() or 1
        cparams.swa_full = SWA_FULL  # keep sliding-window layers whole, so a cached prefix stays reusable
        if rope is not None:  # stretch the positions (llama-server's --rope-scaling / --rope-scale)
            cparams.rope_scaling_type = {"linear": C.LLAMA_ROPE_SCALING_TYPE_LINEAR,
                                         "yarn": C.LLAMA_ROPE_SCALING_TYPE_YARN}[rope[0]]
            cparams.rope_freq_scale = 1.0 / rope[1]
        cparams.type_k, cparams.type_v = (CACHE_TYPES[t] for t in cache_types)  # (a quantized V turns flash attention on)
        self.ctx = C.llama_init_from_model(model.ptr, cparams)
        if not self.ctx:
            if cache_types != ("f16", "f16"):
                raise ModelUnavailable(
                    f"llama.cpp would not keep a {cache_types[0]} K / {cache_types[1]} V cache for {model.path}: a "
                    "quantized cache needs attention heads whose size its blocks (32 values) divide, and a quantized "
                    "V needs flash attention on this machine's backend; set cache_type_k and cache_type_v to \"f16\" "
                    "(models.toml, or serve --cache-type-k/-v)", param="model")
            raise ModelUnavailable(f"llama.cpp could not create {parallel} slots of {n_ctx} tokens for {model.path}")
        self.mem = C.llama_get_memory(self.ctx)
        # a shifted reuse (_shift) moves cells: a cache whose cells can be moved, one per sequence
        # (no sliding window: its save leaves out cells outside the window), positions that are tokens
        rope = C.llama_model_rope_type(model.ptr)
        self._shiftable = (bool(C.llama_memory_can_shift(self.mem)) and C.llama_model_n_swa(model.ptr) == 0
                           and rope >= 0 and not rope & C.LLAMA_ROPE_TYPE_MROPE)
        # a draft model's context (draft_model.py): one sequence per slot, as this one
        try:
            self.draft = DraftContext(draft[0], model, draft[1], n_ctx=n_ctx, parallel=parallel,
                                      n_threads=n_threads) if draft is not None else None
        except BaseException:
            C.llama_free(self.ctx)
            raise
        self.batch = C.llama_batch_init(self.n_batch, 0, 1)
        self._token = np.ctypeslib.as_array(self.batch.token, shape=(self.n_batch,))
        self._pos = np.ctypeslib.as_array(self.batch.pos, shape=(self.n_batch,))
        self._logits = np.ctypeslib.as_array(self.batch.logits, shape=(self.n_batch,))
        np.ctypeslib.as_array(self.batch.n_seq_id, shape=(self.n_batch,))[:] = 1
        self._seq = [self.batch.seq_id[i] for i in range(self.n_batch)]
        self.slots = [Slot(i) for i in range(parallel)]
        # the cells a request reuses, moves, restores or saves (prefix_cache.py); a draft model's cells cannot move
        self.cache = PrefixCache(self.ctx, self.slots, n_ctx, store, self._shiftable and self.draft is None,
                                 self._decode_one)
        self._adapters: Adapters = ()  # the LoRA adapters applied to the context now
        self.queue: deque[Job] = deque()
        self.running: list[Job] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._preparing = 0  # requests whose media are being tokenized before they queue
        self._woken = False  # a media chunk was encoded since the loop last looked
        self.media = MediaFeed(projector, n_ctx, self._wake) if projector else None
        self.after_step: Callable[[], None] | None = None  # the step hook: after every step (a worker flushes)
        self._commands: deque[tuple[Callable[[], Any], Future]] = deque()  # for the loop to run between steps
        self._tasks = 0  # requests admitted so far: each slot's `task` is the number of its last one
        # what a step of k rows costs here (draft_cost.py): read from `step_costs`, else measured while idle
        self._costs_file = Path(step_costs) if step_costs else None
        self._costs_key = draft_cost.machine_key(model.path, cparams.n_threads, model.n_gpu_layers)
        self.cost = draft_cost.load(self._costs_file, self._costs_key)
        self._probe = draft_cost.probe(model.ptr, cparams.n_threads, model.n_vocab) if self.cost is None else None
        self.cost = self.cost or draft_cost.DEFAULT
        self._thread: threading.Thread | None = None
        if run:
            self._thread = threading.Thread(target=self._loop, name="localchat-scheduler", daemon=True)
            self._thread.start()

    # -- called from other threads ---------------------------------------------------------

    def submit(self, request: Generate, emit: Emit) -> Job:
        if request.n > self.parallel:  # generation says so first (limits.check_n): the same 400 from either
            raise InvalidRequest(f"at most {self.parallel} completions per request for this model (its `parallel` "
                                 "setting)", field="n")
        if request.media and self.media is None:
            raise InvalidRequest(f"{request.media[0].param}: this model takes no images or audio (it has no "
                                 "projector: `mmproj` in models.toml)", param=request.media[0].param)
        job = Job(request, emit)
        with self._cond:
            free = sum(not s.busy for s in self.slots)  # the queue's head takes these at the next step
            waiting = len(self.queue) + self._preparing
            if waiting - free >= self.max_queue:
                raise QueueFull(f"{waiting} requests are already waiting for this model; try again shortly")
            if self.media is None or not request.media:
                self.queue.append(job)
                self._cond.notify()
                return job
            self._preparing += 1
        self.media.prepare(job, self._prepared)
        return job

    def _prepared(self, job: Job | None) -> None:
        """A request's media are tokenized (None: it failed, and was told): it queues now."""
        with self._cond:
            self._preparing -= 1
            if job is not None:
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
        return [SlotInfo(s.seq_id, s.busy, len(s.cached), s.task) for s in self.slots]

    def stats(self) -> dict[str, int]:
        return {"slots": self.parallel, "busy": sum(s.busy for s in self.slots),
                "queued": len(self.queue) + self._preparing}

    def close(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()
        if self._probe is not None:
            self._probe.close()  # its context is freed
        while self._commands:  # asked for while the loop was stopping: never run
            self._commands.popleft()[1].set_exception(ModelUnavailable("the model was unloaded", param="model"))
        if self.media is not None:
            self.media.close()
        for job in [*self.running, *self.queue]:
            job.emit(EngineError("the model was unloaded"))
            job.emit(None)
            self._release(job)
        if self.store is not None:
            self.store.close()  # what was copied out reaches the disk before the model goes
        C.llama_batch_free(self.batch)
        C.llama_free(self.ctx)
        self.ctx = None
        if self.draft is not None:
            self.draft.close()

    # -- the loop --------------------------------------------------------------------------

    def holds(self, job: Job) -> bool:
        """Whether the request is still queued or running here."""
        return job in self.running or job in self.queue

    def _loop(self) -> None:
        """Step while there is work; sleep until there is."""
        while True:
            # First: a request cancelled during the last step frees its slot, and the prompt it had
            # read stays there as that slot's cache, so a client's immediate retry is admitted into it.
            self._drop_cancelled()
            if self.after_step is not None:
                self.after_step()  # what the drop emitted goes out before the loop sleeps (a worker's batch)
            with self._cond:
                if not self._stopping and self._idle() and self._probe is None:
                    self._cond.wait()  # then one turn, if only to flush (a request refused while preparing)
                if self._stopping:
                    return
            if not self.step() and self.running:  # every running request waits for its media to encode
                with self._cond:
                    if not self._woken:
                        self._cond.wait(0.05)
                    self._woken = False

    def step(self) -> bool:
        """One turn, on the caller's thread: the commands asked for between steps, then the queue's
        head admitted into free slots (their cached prompts reused, moved or restored), the
        cancelled dropped, and one decode of every running request (a token each, prompt chunks,
        drafts); the step hook after it. Idle, with the step costs still unmeasured: one decode of
        that measurement instead. Returns whether a decode ran (False: nothing to do, or every
        running request waits for its media)."""
        with self._cond:
            probing = self._probe is not None and self._idle()
            commands = [self._commands.popleft() for _ in range(len(self._commands))]
        if probing:  # nothing else to do: one decode of the step-cost measurement
            self._measure()
            return True
        for fn, future in commands:  # before admitting: a slot found free by a command is still free
            try:
                future.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - the caller raises it
                future.set_exception(exc)
        with self._cond:
            admitted = self._admit()
        for job in admitted:
            self._start(job)
        self._drop_cancelled()
        busy = self._step() if self.running else False
        if self.after_step is not None:
            self.after_step()
        return busy

    def _idle(self) -> bool:
        return not self.running and not self.queue and not self._commands

    def _measure(self) -> None:
        """One step of the measurement of what a step costs (draft_cost.probe); at its end, the
        figures replace the stand-in ones and are kept for the next load."""
        try:
            next(self._probe)
            return
        except StopIteration as end:
            seconds = end.value
        except Exception as exc:  # noqa: BLE001 - drafts keep the stand-in figures
            _log.warning("measuring the step costs failed: %s", exc)
            seconds = None
        self._probe = None
        if seconds and 1 in seconds:
            self.cost = draft_cost.StepCost(seconds, measured=True)
            draft_cost.save(self._costs_file, self._costs_key, seconds)
            _log.info("%s: a step of k tokens costs (k: x one token) %s", self.model.path.name, self.cost.describe())

    def _admit(self) -> list[Job]:
        """Take queued jobs, first come first served, while enough slots are free."""
        admitted = []
        while self.queue:
            job = self.queue[0]
            if job.cancelled:  # its client left while it waited: it never starts
                self.queue.popleft()
                job.emit(None)
                self._release(job)
                continue
            free = [s for s in self.slots if not s.busy]
            if len(free) < job.request.n:
                break
            self.queue.popleft()
            lead = max(free, key=lambda s: (reuse(s, job), vacancy(s)))
            others = sorted((s for s in free if s is not lead), key=vacancy, reverse=True)[: job.request.n - 1]
            self._tasks += 1
            for s in (lead, *others):
                s.busy, s.task = True, self._tasks
            job.slots = [lead, *others]
            admitted.append(job)
        return admitted

    def _start(self, job: Job) -> None:
        """Make the job's sequences (samplers can fail: a grammar llama.cpp rejects) and find
        how much of its prompt the lead slot already holds (prefix_cache.py)."""
        slots = job.slots
        try:
            for i, slot in enumerate(slots):
                job.seqs.append(make_sequence(job, i, slot, self.model, self.n_ctx))
                job.seqs[-1].draft_model = self.draft
        except Exception as exc:  # noqa: BLE001 - reported to its own request only
            for seq in job.seqs:
                seq.sampler.close()
            for slot in slots:
                slot.busy = False
            job.emit(exc if isinstance(exc, LocalchatError) else EngineError(f"llama.cpp failed: {exc}"))
            job.emit(None)
            self._release(job)
            return
        self.cache.place(job)
        self.running.append(job)
        job.emit(Started(job.cached))

    # -- llama-server's slot actions (run by between_steps, on this thread: prefix_cache.py) ---

    def slot_state(self, slot_id: int) -> tuple[list[int], bytearray]:
        return self.cache.slot_state(slot_id)

    def slot_restore(self, slot_id: int, tokens: list[int], state: bytearray) -> None:
        self.cache.slot_restore(slot_id, tokens, state)

    def slot_erase(self, slot_id: int) -> int:
        return self.cache.slot_erase(slot_id)

    def _decode_one(self, seq: int, pos: int) -> bool:
        """One token at `pos` of sequence `seq`, no logits (the prefix cache turns moved cells so)."""
        self._token[0], self._pos[0], self._seq[0][0], self._logits[0] = 0, pos, seq, False
        self.batch.n_tokens = 1
        return C.llama_decode(self.ctx, self.batch) == 0

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
        order = sorted(groups, key=lambda a: a != self._adapters)
        busy = False
        for i, adapters in enumerate(order):
            if i and self.after_step is not None:
                self.after_step()  # the events of the sets decoded so far go out now
            busy = self._decode(adapters, groups[adapters]) or busy
        for job in [j for j in self.running if all(s.finish for s in j.seqs)]:
            self._finish(job)
        return busy

    def _decode(self, adapters: Adapters, jobs: list[Job]) -> bool:
        """One llama_decode: the next token of every generating sequence, then prompt chunks
        within the batch's room; then every sequence whose logits came out samples. A prompt
        that has reached an encoded media chunk decodes it first, in a decode of its own.
        Returns whether anything was decoded."""
        busy = self.media is not None and self.media.decode_heads(jobs, self.ctx, lambda: self._use(adapters),
                                                                  self.n_batch, self._fail)
        # tokens for a slot; who samples; with prompt logprobs, the job and the prompt index of its first token;
        # the tokens drafted after a sequence's next token (drafts.py), each with its logits, verified after
        rows: list[tuple[Slot, list[int], Sequence | Job | None, tuple[Job, int] | None, list[int]]] = []
        room = self.n_batch
        for job in jobs:
            for seq in job.seqs:
                if seq.next_token is not None:
                    rows.append((seq.slot, [seq.next_token], seq, None, []))
                    room -= 1
        writers = len(rows)
        offers = []  # (row, the tokens it could draft, the chances its first ones are kept: None for a draft model's)
        for row in rows:
            tokens, p = row[2].draft(min(room, self.n_ctx - row[0].next_pos - 1))
            if tokens:
                offers.append((row, tokens, p))
        reserve = min(room, sum(len(tokens) for _, tokens, _ in offers))
        room -= reserve  # the drafts' room, which prompt chunks leave them
        landing = []  # jobs whose chunk ends their new span: the moved cells join it after the decode
        for job in jobs:
            text = self.media.text_room(job) if self.media is not None else len(job.pending)
            if job.jumps:
                text = min(text, job.jumps[0].span)
            every = job.request.prompt_logprobs is not None
            if job.pending and room > 0 and text > 0:
                chunk = job.pending[: min(room, text, PROMPT_LOGPROBS_CHUNK if every else room)]
                if job.jumps:
                    job.jumps[0].span -= len(chunk)
                    if job.jumps[0].span == 0:
                        landing.append(job)
                start = len(job.tokens) - len(job.pending)
                del job.pending[: len(chunk)]
                rows.append((job.lead.slot, chunk, None if job.pending else job, (job, start) if every else None, []))
                room -= len(chunk)
        self._draft(rows, writers, offers, reserve)
        if not rows:
            return busy
        rows.sort(key=lambda row: row[0].seq_id)  # llama.cpp batches ascending slot ids together
        n, outputs, prompts = 0, [], []
        for slot, tokens, who, every, drafts in rows:
            if every is not None:
                prompts.append((*every, n, len(tokens)))
            for token in tokens:
                self._add(n, slot, token, every is not None or bool(drafts))
                n += 1
            if who is not None:
                self._logits[n - 1] = True
                outputs.append((who, n - 1 - len(drafts), drafts))
        self.batch.n_tokens = n
        self._use(adapters)
        rc = C.llama_decode(self.ctx, self.batch)
        if rc != 0:
            for job in jobs:
                self._fail(job, EngineError(f"llama_decode returned {rc}"))
            return True
        for job in landing:
            self.cache.land(job)
        for job, start, at, count in prompts:
            read_prompt_logprobs(job, self.model, self.ctx, start, at, count)
        for item, idx, drafts in outputs:
            try:
                if isinstance(item, Job):
                    self._prompt_done(item, idx)
                elif drafts:
                    self._verify(item, idx, drafts)
                else:
                    item.sample(self.ctx, idx)
            except Exception as exc:  # noqa: BLE001 - one request's failure (a grammar dead end) is its own
                job = item if isinstance(item, Job) else next(j for j in jobs if item in j.seqs)
                self._fail(job, exc)
        return True

    def _draft(self, rows: list, writers: int, offers: list, room: int) -> None:
        """Add the drafts to their rows: a draft model's as it drafted them, drafts from the text as
        long as the cost model says pays (draft_cost.lengths), within `room` tokens in all; a grammar
        cuts a draft at the first token it forbids."""
        def add(row, draft: list[int]) -> int:
            draft = row[2].allowed(draft)
            row[1].extend(draft)
            row[4].extend(draft)
            return len(draft)
        text = [(row, tokens, p) for row, tokens, p in offers if p is not None]
        for row, tokens, p in offers:
            if p is None:
                room -= add(row, tokens[:room])
        if not text:
            return
        chosen = draft_cost.lengths(self.cost, [(row[0].seq_id, p) for row, _, p in text],
                                    {row[0].seq_id: len(row[1]) for row in rows}, writers)
        for (row, tokens, _), d in zip(text, chosen):
            room -= add(row, tokens[:min(d, room)])

    def _verify(self, seq: Sequence, idx: int, drafts: list[int]) -> None:
        """The sequence samples at its next token's row, then at each drafted token's row while
        the drafted token is the one it sampled; the cells of the drafted tokens it did not keep go."""
        seq.sample(self.ctx, idx)
        kept = 0
        for token in drafts:
            if seq.next_token != token:
                break
            kept += 1
            seq.sample(self.ctx, idx + kept)
        if kept < len(drafts):
            slot = seq.slot
            C.llama_memory_seq_rm(self.mem, slot.seq_id, slot.keep(len(slot.cached) - (len(drafts) - kept)), -1)
        seq.drafter.verified(len(drafts), kept)

    def _use(self, adapters: Adapters) -> None:
        """Apply a set of LoRA adapters to the context (a no-op when it is already applied)."""
        if adapters != self._adapters:
            apply_adapters(self.ctx, self.model, adapters)
            self._adapters = adapters

    def _add(self, i: int, slot: Slot, token: int, logits: bool) -> None:
        self._token[i] = token
        self._pos[i] = slot.next_pos
        self._seq[i][0] = slot.seq_id
        self._logits[i] = logits
        slot.cached.append(token)

    def _prompt_done(self, job: Job, idx: int) -> None:
        """The prompt is in the lead slot: share its cells with the other slots, then every
        sequence samples its first token from the same logits."""
        if job.request.prompt_logprobs is not None:
            job.emit(PromptLogprobs(tuple(job.prompt_logprobs)))
        lead = job.lead.slot
        for seq in job.seqs[1:]:
            C.llama_memory_seq_rm(self.mem, seq.slot.seq_id, -1, -1)
            C.llama_memory_seq_cp(self.mem, lead.seq_id, seq.slot.seq_id, -1, -1)
            seq.slot.copy_from(lead)
        for seq in job.seqs:
            seq.sample(self.ctx, idx)

    def _finish(self, job: Job) -> None:
        self.running.remove(job)
        now = time.monotonic()
        for seq in job.seqs:
            seq.sampler.close()
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
        self.cache.save(job)
        if not job.request.cache_prompt:  # nothing of it stays: the slots are empty for the next request
            for slot in job.slots:
                C.llama_memory_seq_rm(self.mem, slot.seq_id, -1, -1)
                slot.keep(0)
                if self.draft is not None:
                    self.draft.forget(slot.seq_id)
        job.emit(None)
        self._release(job)

    def _release(self, job: Job) -> None:
        if self.media is not None:
            self.media.release(job)

    def _fail(self, job: Job, exc: BaseException) -> None:
        if job not in self.running:
            return
        _log.warning("request failed in the engine: %s", exc)
        for seq in job.seqs:
            seq.cancel()
            C.llama_memory_seq_rm(self.mem, seq.slot.seq_id, -1, -1)
            seq.slot.keep(0)
            if self.draft is not None:
                self.draft.forget(seq.slot.seq_id)
        job.emit(exc if isinstance(exc, LocalchatError) else EngineError(f"llama.cpp failed: {exc}"))
        job.cancelled = True  # no Done events after an error
        self._finish(job)
