"""The loop that decodes: one llama context, N slots, one llama_batch per step.

Each step holds the next token of every generating sequence plus chunks of pending prompts
(chunked prefill: at most `n_batch` tokens a step, so a long prompt delays running streams by
one chunk at most). A request waits in a bounded FIFO queue until enough slots are free; it
takes the free slot whose cache shares the longest prefix with its prompt, if that prefix is
more than half of the prompt or of the slot's cache (else an empty or the least recently used
slot). With n > 1 the prompt is decoded once and its cells are shared with the other n - 1 slots."""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace

import llama_cpp as C
import numpy as np

from ..errors import EngineError, LocalchatError, ModelUnavailable, QueueFull
from .model import Model
from .params import Event, Generate, Started
from .sampling import Sampler
from .slot import Sequence, Slot

_log = logging.getLogger("localchat.engine")
Emit = Callable[[Event | Started | BaseException | None], None]  # None: the request has ended
Adapters = tuple[tuple[int, float], ...]  # LoRA adapters applied: (index in the model's list, scale)


class Job:
    def __init__(self, request: Generate, emit: Emit) -> None:
        self.request, self.emit = request, emit
        self.cancelled = False
        self.seqs: list[Sequence] = []
        self.slots: list[Slot] = []  # the lead slot (it decodes the prompt) first
        self.pending: list[int] = []  # prompt tokens still to decode (into the lead slot)
        self.cached = 0  # prompt tokens found in the lead slot's cache
        self.n_prompt = len(request.tokens)

    @property
    def lead(self) -> Sequence:
        return self.seqs[0]


class Scheduler:
    def __init__(self, model: Model, *, n_ctx: int, parallel: int, max_queue: int,
                 n_threads: int | None = None, n_batch: int = 512) -> None:
        self.model, self.n_ctx, self.parallel, self.max_queue = model, n_ctx, parallel, max_queue
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
        cparams.swa_full = True  # keep sliding-window layers whole, so a cached prefix stays reusable
        self.ctx = C.llama_init_from_model(model.ptr, cparams)
        if not self.ctx:
            raise ModelUnavailable(f"llama.cpp could not create {parallel} slots of {n_ctx} tokens for {model.path}")
        self.mem = C.llama_get_memory(self.ctx)
        self.batch = C.llama_batch_init(self.n_batch, 0, 1)
        self._token = np.ctypeslib.as_array(self.batch.token, shape=(self.n_batch,))
        self._pos = np.ctypeslib.as_array(self.batch.pos, shape=(self.n_batch,))
        self._logits = np.ctypeslib.as_array(self.batch.logits, shape=(self.n_batch,))
        np.ctypeslib.as_array(self.batch.n_seq_id, shape=(self.n_batch,))[:] = 1
        self._seq = [self.batch.seq_id[i] for i in range(self.n_batch)]
        self.slots = [Slot(i) for i in range(parallel)]
        self._adapters: Adapters = ()  # the LoRA adapters applied to the context now
        self.queue: deque[Job] = deque()
        self.running: list[Job] = []
        self._cond = threading.Condition()
        self._stopping = False
        self.after_step: Callable[[], None] | None = None  # called after every turn of the loop (a worker flushes)
        self._thread = threading.Thread(target=self._loop, name="localchat-scheduler", daemon=True)
        self._thread.start()

    # -- called from other threads ---------------------------------------------------------

    def submit(self, request: Generate, emit: Emit) -> Job:
        if request.n > self.parallel:
            raise EngineError(f"n={request.n} is more than this model's {self.parallel} slots")
        job = Job(request, emit)
        with self._cond:
            free = sum(not s.busy for s in self.slots)  # the queue's head takes these at the next step
            if len(self.queue) - free >= self.max_queue:
                raise QueueFull(f"{len(self.queue)} requests are already waiting for this model; try again shortly")
            self.queue.append(job)
            self._cond.notify()
        return job

    def cancel(self, job: Job) -> None:
        job.cancelled = True
        with self._cond:
            self._cond.notify()

    def stats(self) -> dict[str, int]:
        return {"slots": self.parallel, "busy": sum(s.busy for s in self.slots), "queued": len(self.queue)}

    def close(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join()
        for job in [*self.running, *self.queue]:
            job.emit(EngineError("the model was unloaded"))
            job.emit(None)
        C.llama_batch_free(self.batch)
        C.llama_free(self.ctx)
        self.ctx = None

    # -- the loop --------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not self.running and not self.queue:
                    self._cond.wait()
                if self._stopping:
                    return
                admitted = self._admit()
            for job in admitted:
                self._start(job)
            self._drop_cancelled()
            if self.running:
                self._step()
            if self.after_step is not None:
                self.after_step()

    def _admit(self) -> list[Job]:
        """Take queued jobs, first come first served, while enough slots are free."""
        admitted = []
        while self.queue:
            job = self.queue[0]
            if job.cancelled:  # its client left while it waited: it never starts
                self.queue.popleft()
                job.emit(None)
                continue
            free = [s for s in self.slots if not s.busy]
            if len(free) < job.request.n:
                break
            self.queue.popleft()
            lead = max(free, key=lambda s: (_reuse(s, job.request), _vacancy(s)))
            others = sorted((s for s in free if s is not lead), key=_vacancy, reverse=True)[: job.request.n - 1]
            for s in (lead, *others):
                s.busy = True
            job.slots = [lead, *others]
            admitted.append(job)
        return admitted

    def _start(self, job: Job) -> None:
        """Make the job's sequences (samplers can fail: a grammar llama.cpp rejects) and find
        how much of its prompt the lead slot already holds."""
        req, slots = job.request, job.slots
        try:
            for i, slot in enumerate(slots):
                job.seqs.append(self._sequence(job, i, slot))
        except Exception as exc:  # noqa: BLE001 - reported to its own request only
            for seq in job.seqs:
                seq.sampler.close()
            for slot in slots:
                slot.busy = False
            job.emit(exc if isinstance(exc, LocalchatError) else EngineError(f"llama.cpp failed: {exc}"))
            job.emit(None)
            return
        lead = slots[0]
        n = min(_common(lead.cached, req.tokens), len(req.tokens) - 1)  # the last prompt token makes the logits
        if lead.adapters != req.adapters:  # its cache was computed with other LoRA adapters
            n, lead.adapters = 0, req.adapters
        if n < len(lead.cached) and not C.llama_memory_seq_rm(self.mem, lead.seq_id, n, -1):
            C.llama_memory_seq_rm(self.mem, lead.seq_id, -1, -1)
            n = 0
        del lead.cached[n:]
        job.cached, job.pending = n, list(req.tokens[n:])
        self.running.append(job)
        job.emit(Started())

    def _sequence(self, job: Job, i: int, slot: Slot) -> Sequence:
        req, model = job.request, self.model
        params = req.params
        if params.seed is not None and i:
            params = replace(params, seed=params.seed + i)
        if params.ignore_eos:  # as llama.cpp does it: end-of-generation tokens are never sampled
            banned = dict.fromkeys(model.eog | req.stop_tokens, float("-inf"))
            params = replace(params, logit_bias={**params.logit_bias, **banned})
        sampler = Sampler(params, model.vocab, model.n_vocab, req.constraint, model.piece,
                          lambda text: model.tokenize_bytes(text.encode(), parse_special=True), model.utf8_tables)
        budget = self.n_ctx - len(req.tokens)
        if params.max_tokens is not None:
            budget = min(budget, params.max_tokens)
        return Sequence(i, slot, model, sampler, req.stop_tokens, params.stop, budget, req.logprobs, job.emit)

    def _drop_cancelled(self) -> None:
        for job in [j for j in self.running if j.cancelled]:
            for seq in job.seqs:
                if seq.finish is None:
                    seq.cancel()
            self._finish(job)

    def _step(self) -> None:
        """One llama_decode per set of LoRA adapters among the running requests (llama.cpp applies
        adapters to a whole context, not per sequence): most often one. Every set with work gets
        its decode in every step, so none waits more than a step; the set decoded last comes first
        in the next step, so two sets switch adapters once a step, not twice."""
        groups: dict[Adapters, list[Job]] = {}
        for job in self.running:
            groups.setdefault(job.request.adapters, []).append(job)
        order = sorted(groups, key=lambda a: a != self._adapters)
        for i, adapters in enumerate(order):
            if i and self.after_step is not None:
                self.after_step()  # the events of the sets decoded so far go out now
            self._decode(adapters, groups[adapters])
        for job in [j for j in self.running if all(s.finish for s in j.seqs)]:
            self._finish(job)

    def _decode(self, adapters: Adapters, jobs: list[Job]) -> None:
        """One llama_decode: the next token of every generating sequence, then prompt chunks
        within the batch's room; then every sequence whose logits came out samples."""
        rows: list[tuple[Slot, list[int], Sequence | Job | None]] = []  # tokens for a slot; who samples
        room = self.n_batch
        for job in jobs:
            for seq in job.seqs:
                if seq.next_token is not None:
                    rows.append((seq.slot, [seq.next_token], seq))
                    room -= 1
        for job in jobs:
            if job.pending and room > 0:
                chunk = job.pending[:room]
                del job.pending[: len(chunk)]
                rows.append((job.lead.slot, chunk, None if job.pending else job))
                room -= len(chunk)
        if not rows:
            return
        rows.sort(key=lambda row: row[0].seq_id)  # llama.cpp batches ascending slot ids together
        n, outputs = 0, []
        for slot, tokens, who in rows:
            for token in tokens:
                self._add(n, slot, token, False)
                n += 1
            if who is not None:
                self._logits[n - 1] = True
                outputs.append((who, n - 1))
        self.batch.n_tokens = n
        self._use(adapters)
        rc = C.llama_decode(self.ctx, self.batch)
        if rc != 0:
            for job in jobs:
                self._fail(job, EngineError(f"llama_decode returned {rc}"))
            return
        for item, idx in outputs:
            try:
                if isinstance(item, Job):
                    self._prompt_done(item, idx)
                else:
                    item.sample(self.ctx, idx)
            except Exception as exc:  # noqa: BLE001 - one request's failure (a grammar dead end) is its own
                job = item if isinstance(item, Job) else next(j for j in jobs if item in j.seqs)
                self._fail(job, exc)

    def _use(self, adapters: Adapters) -> None:
        """Apply a set of LoRA adapters to the context (a no-op when it is already applied)."""
        if adapters == self._adapters:
            return
        n = len(adapters)
        ptrs = (C.llama_adapter_lora_p_ctypes * n)(*(self.model.adapters[i] for i, _ in adapters)) if n else None
        scales = (ctypes.c_float * n)(*(scale for _, scale in adapters)) if n else None
        C.llama_set_adapters_lora(self.ctx, ptrs, n, scales)
        self._adapters = adapters

    def _add(self, i: int, slot: Slot, token: int, logits: bool) -> None:
        self._token[i] = token
        self._pos[i] = len(slot.cached)
        self._seq[i][0] = slot.seq_id
        self._logits[i] = logits
        slot.cached.append(token)

    def _prompt_done(self, job: Job, idx: int) -> None:
        """The prompt is in the lead slot: share its cells with the other slots, then every
        sequence samples its first token from the same logits."""
        lead = job.lead.slot
        for seq in job.seqs[1:]:
            C.llama_memory_seq_rm(self.mem, seq.slot.seq_id, -1, -1)
            C.llama_memory_seq_cp(self.mem, lead.seq_id, seq.slot.seq_id, -1, -1)
            seq.slot.cached, seq.slot.adapters = list(lead.cached), lead.adapters
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
        if job.pending:  # cancelled mid-prompt: the cells past what was decoded are the slot's cache
            job.pending = []
        job.emit(None)

    def _fail(self, job: Job, exc: BaseException) -> None:
        if job not in self.running:
            return
        _log.warning("request failed in the engine: %s", exc)
        for seq in job.seqs:
            seq.cancel()
            C.llama_memory_seq_rm(self.mem, seq.slot.seq_id, -1, -1)
            seq.slot.cached = []
        job.emit(exc if isinstance(exc, LocalchatError) else EngineError(f"llama.cpp failed: {exc}"))
        job.cancelled = True  # no Done events after an error
        self._finish(job)



def _vacancy(slot: Slot) -> tuple[bool, float, int]:
    """Which free slot to give up first: an empty one, the lowest first (llama.cpp batches
    consecutive slot ids in one graph), else the least recently used."""
    return (not slot.cached, -slot.used_at, -slot.seq_id)


def _reuse(slot: Slot, request: Generate) -> int:
    """How much of a prompt a slot would serve from its cache, counted only when that is more
    than half of the prompt (llama-server's slot_prompt_similarity) or keeps at least half of
    what the slot holds (a chat's next turn with a long new message): prompts that share only
    a chat template's first tokens go to other slots, so each keeps its own cache. A cache made
    with other LoRA adapters serves nothing."""
    tokens = request.tokens
    if slot.adapters != request.adapters:
        return 0
    common = _common(slot.cached, tokens)
    return common if 2 * common > len(tokens) or 2 * common >= len(slot.cached) else 0


def _common(a: list[int], b: list[int]) -> int:
    return len(os.path.commonprefix([a, b]))

