"""One llama context and what a step decodes in it (the scheduler, scheduler.py, decides which
requests run; this turns them into one llama_batch). A step holds the next token of every
generating sequence, the drafts after them that pay for what a step costs here (drafts.py,
draft_cost.py: verified in the same batch), then chunks of pending prompts (chunked prefill: at
most `n_batch` tokens a step, so a long prompt delays running streams by one chunk at most); a
prompt's images and audio decode in decodes of their own as the prompt reaches them (media_feed).
A decode is three steps, which the scheduler runs: `plan` (a StepPlan: a Row per slot, with no
llama.cpp call and no request written: tests/test_decoder_plan.py; the scheduler applies the prompt
chunks it reads), `execute` (the batch, llama_decode) and `update` (sampling, drafts verified,
prompt log-probabilities).
While the scheduler has nothing else to do, `measure` takes a step of the measurement of what a
step of k tokens costs (draft_cost.probe), once per model and machine."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import llama_cpp as C

from ...errors import ModelUnavailable
from ..drafting import draft_cost
from ..llama.batch import Batch
from ..llama.model import Model
from ..media.vision import Span
from ..params import SWA_FULL, PromptLogprobs
from ..state.job import Adapters, Job, apply_adapters, chunk_size, read_prompt_logprobs
from ..state.slot import Sequence, Slot
from .media_feed import MediaFeed

_log = logging.getLogger("localchat.engine")
# Prompt tokens a step while a request wants their log-probabilities: each is a row of logits in
# llama.cpp's output buffer (32 × a 262k vocabulary: 34 MB), which keeps its largest size.
PROMPT_LOGPROBS_CHUNK = 32
CACHE_TYPES = {"f16": C.GGML_TYPE_F16, "q8_0": C.GGML_TYPE_Q8_0, "q4_0": C.GGML_TYPE_Q4_0}  # models.toml's names


def open_context(model: Model, *, n_ctx: int, parallel: int, n_batch: int, n_threads: int,
                 rope: tuple[str, float] | None, cache_types: tuple[str, str]) -> object:
    """The llama context of `parallel` slots of `n_ctx` tokens each."""
    cparams = C.llama_context_default_params()
    cparams.n_ctx = n_ctx * parallel  # every slot may hold a whole context_length
    cparams.n_seq_max = parallel
    # One KV stream per slot: a sequence's cells stay in position order, so its results do not
    # depend on what the other slots hold or decode (in a unified cache they do, on the CPU:
    # up to 0.7 in a logit, with flash attention from cell order, without it from batch mates).
    # llama.cpp then batches only consecutive slot ids in one graph: see Decoder.plan (rows in slot order) and the admission.
    cparams.kv_unified = False
    cparams.n_batch = cparams.n_ubatch = n_batch
    cparams.n_threads = cparams.n_threads_batch = n_threads
    cparams.swa_full = SWA_FULL  # keep sliding-window layers whole, so a cached prefix stays reusable
    if rope is not None:  # stretch the positions (llama-server's --rope-scaling / --rope-scale)
        cparams.rope_scaling_type = {"linear": C.LLAMA_ROPE_SCALING_TYPE_LINEAR,
                                     "yarn": C.LLAMA_ROPE_SCALING_TYPE_YARN}[rope[0]]
        cparams.rope_freq_scale = 1.0 / rope[1]
    cparams.type_k, cparams.type_v = (CACHE_TYPES[t] for t in cache_types)  # (a quantized V turns flash attention on)
    ctx = C.llama_init_from_model(model.ptr, cparams)
    if not ctx:
        if cache_types != ("f16", "f16"):
            raise ModelUnavailable(
                f"llama.cpp would not keep a {cache_types[0]} K / {cache_types[1]} V cache for {model.path}: a "
                "quantized cache needs attention heads whose size its blocks (32 values) divide, and a quantized "
                "V needs flash attention on this machine's backend; set cache_type_k and cache_type_v to \"f16\" "
                "(models.toml, or serve --cache-type-k/-v)", param="model")
        raise ModelUnavailable(f"llama.cpp could not create {parallel} slots of {n_ctx} tokens for {model.path}")
    return ctx


def shiftable(model: Model, ctx: object, k_type: str = "f16") -> bool:
    """Whether cells can be moved (a shifted reuse, prefix_cache.py): a cache whose cells can be moved, one
    per sequence (no sliding window: its save leaves out cells outside the window), positions that are tokens,
    and K kept unquantized (llama.cpp 0.3.36 segfaults turning a q8_0 or q4_0 K cache's RoPE on the CPU:
    tests/test_kv_state.py)."""
    rope = C.llama_model_rope_type(model.ptr)
    return (k_type == "f16" and bool(C.llama_memory_can_shift(C.llama_get_memory(ctx)))
            and C.llama_model_n_swa(model.ptr) == 0 and rope >= 0 and not rope & C.LLAMA_ROPE_TYPE_MROPE)


@dataclass
class Row:
    """One slot's part of a step's batch."""

    slot: Slot
    tokens: list[int]  # what it decodes: a sequence's next token and its drafts, or a chunk of a prompt
    who: Sequence | Job | None  # who samples at its last token: a sequence; the job whose prompt ends here; none
    every: tuple[Job, int] | None = None  # prompt log-probabilities wanted: the job, and its chunk's first index
    reads: Job | None = None  # the job whose prompt chunk this is (its pending tokens advance by it: `advance`)
    drafts: list[int] = field(default_factory=list)  # the tokens drafted after the next token, verified after


@dataclass
class StepPlan:
    """What one decode holds (`Decoder.plan`), and, once the batch is made (`execute`), where each
    row's logits come out."""

    rows: list[Row]
    landing: list[Job]  # jobs whose chunk ends a new span of a shifted reuse: the moved cells join after
    outputs: list[tuple[Sequence | Job, int, list[int]]] = field(default_factory=list)  # (who, logits row, drafts)
    prompts: list[tuple[Job, int, int, int]] = field(default_factory=list)  # prompt logprobs: job, start, row, count
    cuts: list[tuple[Slot, int]] = field(default_factory=list)  # after `update`: slots whose cells past n went (drafts not kept)


class Decoder:
    def __init__(self, model: Model, ctx: object, *, n_batch: int, n_ctx: int, n_threads: int,
                 media: MediaFeed | None, step_costs: str | None) -> None:
        self.model, self.ctx, self.n_batch, self.n_ctx, self.media = model, ctx, n_batch, n_ctx, media
        self.mem = C.llama_get_memory(ctx)
        self.batch = Batch(n_batch)
        self._adapters: Adapters = ()  # the LoRA adapters applied to the context now
        # what a step of k rows costs here (draft_cost.py): read from `step_costs`, else measured while idle
        self._costs_file = Path(step_costs) if step_costs else None
        self._costs_key = draft_cost.machine_key(model.path, n_threads, model.n_gpu_layers)
        self.cost = draft_cost.load(self._costs_file, self._costs_key)
        self._threads = n_threads
        self._measurements = 0  # measurements this load has started (draft_cost.REMEASURE at most)
        self._check = draft_cost.StaleCheck()  # the live steps of one token against the figures
        self.probe = self._measure_again() if self.cost is None else None
        self.cost = self.cost or draft_cost.DEFAULT

    def close(self) -> None:
        if self.probe is not None:
            self.probe.close()  # its context is freed
        self.batch.close()

    def measure(self) -> None:
        """One step of the measurement of what a step costs (draft_cost.probe); at its end, the
        figures replace the stand-in ones and are kept for the next load."""
        try:
            next(self.probe)
            return
        except StopIteration as end:
            seconds = end.value
        except Exception as exc:  # noqa: BLE001 - drafts keep the stand-in figures
            _log.warning("measuring the step costs failed: %s", exc)
            seconds = None
        self.probe = None
        if seconds and not draft_cost.plausible(seconds):  # disturbed (another program's load): again while idle
            self.probe = self._measure_again()
            _log.warning("%s: the step costs measured cannot be true (%s); %s", self.model.path.name,
                         draft_cost.StepCost(seconds).describe(),
                         "measured again while idle" if self.probe else "the stand-in figures are kept")
            return
        if seconds and 1 in seconds:
            self.cost = draft_cost.StepCost(seconds, measured=True)
            draft_cost.save(self._costs_file, self._costs_key, seconds)
            _log.info("%s: a step of k tokens costs (k: x one token) %s", self.model.path.name, self.cost.describe())

    def _measure_again(self) -> Iterator[None] | None:
        """A new measurement (draft_cost.probe), run while idle; None once a load has taken REMEASURE."""
        if self._measurements >= draft_cost.REMEASURE:
            return None
        self._measurements += 1
        return draft_cost.probe(self.model.ptr, self._threads, self.model.n_vocab)

    def _checked(self, seconds: float) -> None:
        """A live step of one token took `seconds`: where such steps run STALE times faster than the
        figures say, the figures were measured under load (draft_cost.StaleCheck): measured again while idle."""
        if self.probe is not None or not self._check.add(self.cost, seconds):
            return
        probe = self._measure_again()
        if probe is None:
            return
        _log.warning("%s: a step of one token takes %.1f ms here (the median of the last ones), the step costs "
                     "kept for it say %.1f ms (measured while the cores were busy?): the stand-in figures until they "
                     "are measured again, while idle",
                     self.model.path.name, self._check.median * 1000, self.cost.one * 1000)
        self.cost, self.probe = draft_cost.DEFAULT, probe

    def decode_one(self, seq: int, pos: int) -> bool:
        """One token at `pos` of sequence `seq`, no logits (the prefix cache turns moved cells so)."""
        self.batch.set(0, 0, pos, seq, False)
        return self.batch.decode(self.ctx, 1) == 0

    def use(self, adapters: Adapters) -> None:
        """Apply a set of LoRA adapters to the context (a no-op when it is already applied)."""
        if adapters != self._adapters:
            apply_adapters(self.ctx, self.model, adapters)
            self._adapters = adapters

    @property
    def adapters(self) -> Adapters:
        return self._adapters

    def decode_media(self, adapters: Adapters, jobs: list[Job],
                     fail: Callable[[Job, BaseException], None]) -> list[tuple[Job, Span]]:
        """Each prompt that has reached an encoded media chunk decodes it, in a decode of its own
        (media_feed.py); the jobs that did, with their chunks. A request's failure goes to `fail`."""
        if self.media is None:
            return []
        return self.media.decode_heads(jobs, self.ctx, lambda: self.use(adapters), self.n_batch, fail)

    def plan(self, jobs: list[Job]) -> StepPlan:
        """What this step decodes: a row per generating sequence (its next token, then the drafts
        that pay), then prompt chunks in the room left (each row of one says which job it reads:
        the scheduler advances the job's prompt by it, `advance`)."""
        rows: list[Row] = []
        room = self.n_batch
        for job in jobs:
            for seq in job.seqs:
                if seq.next_token is not None:
                    rows.append(Row(seq.slot, [seq.next_token], seq))
                    room -= 1
        writers = len(rows)
        offers = []  # (row, the tokens it could draft, the chances its first ones are kept: None for a draft model's)
        for row in rows:
            tokens, p = row.who.draft(min(room, self.n_ctx - row.slot.next_pos - 1))  # type: ignore[union-attr]
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
                limit = min(room, PROMPT_LOGPROBS_CHUNK) if every else room
                chunk = job.pending[: min(text, limit) if text < len(job.pending) else chunk_size(text, limit)]
                if job.jumps and job.jumps[0].span == len(chunk):
                    landing.append(job)
                start = len(job.tokens) - len(job.pending)
                rows.append(Row(job.lead.slot, chunk, job if len(chunk) == len(job.pending) else None,
                                (job, start) if every else None, reads=job))
                room -= len(chunk)
        self._draft(rows, writers, offers, reserve)
        rows.sort(key=lambda row: row.slot.seq_id)  # llama.cpp batches ascending slot ids together
        return StepPlan(rows, landing)

    def execute(self, adapters: Adapters, plan: StepPlan) -> int:
        """The plan's rows into the batch, and one llama_decode with these LoRA adapters (its
        return code); where each row's logits come out is kept in the plan."""
        self.use(adapters)
        n = 0
        for row in plan.rows:
            if row.every is not None:
                plan.prompts.append((*row.every, n, len(row.tokens)))
            logits, pos = row.every is not None or bool(row.drafts), row.slot.next_pos  # (the scheduler adds the
            for k, token in enumerate(row.tokens):                                 # cells: `advance`)
                self.batch.set(n, token, pos + k, row.slot.seq_id, logits)
                n += 1
            if row.who is not None:
                self.batch.logits[n - 1] = True
                plan.outputs.append((row.who, n - 1 - len(row.drafts), row.drafts))
        if n != 1 or self._check.settled:
            return self.batch.decode(self.ctx, n)
        start = time.perf_counter()  # (a step of one token: the step costs' check)
        rc = self.batch.decode(self.ctx, n)
        if rc == 0:
            self._checked(time.perf_counter() - start)
        return rc

    def update(self, plan: StepPlan, jobs: list[Job], fail: Callable[[Job, BaseException], None]) -> None:
        """After the decode (and the scheduler's `advance`): prompt log-probabilities are read, and
        every sequence whose logits came out samples (and verifies its drafts)."""
        for job, start, at, count in plan.prompts:
            read_prompt_logprobs(job, self.model, self.ctx, start, at, count)
        for item, idx, drafts in plan.outputs:
            try:
                if isinstance(item, Job):
                    self._prompt_done(item, idx)
                elif drafts:
                    self._verify(plan, item, idx, drafts)
                else:
                    item.sample(self.ctx, idx)
            except Exception as exc:  # noqa: BLE001 - one request's failure (a grammar dead end) is its own
                fail(item if isinstance(item, Job) else next(j for j in jobs if item in j.seqs), exc)

    def _draft(self, rows: list[Row], writers: int, offers: list, room: int) -> None:
        """Add the drafts to their rows: a draft model's as it drafted them, drafts from the text as
        long as the cost model says pays (draft_cost.lengths), within `room` tokens in all; a grammar
        cuts a draft at the first token it forbids."""
        def add(row: Row, draft: list[int]) -> int:
            draft = row.who.allowed(draft)  # type: ignore[union-attr]
            row.tokens.extend(draft)
            row.drafts.extend(draft)
            return len(draft)
        text = [(row, tokens, p) for row, tokens, p in offers if p is not None]
        for row, tokens, p in offers:
            if p is None:
                room -= add(row, tokens[:room])
        if not text:
            return
        chosen = draft_cost.lengths(self.cost, [(row.slot.seq_id, p) for row, _, p in text],
                                    {row.slot.seq_id: len(row.tokens) for row in rows}, writers)
        for (row, tokens, _), d in zip(text, chosen):
            room -= add(row, tokens[:min(d, room)])

    def _verify(self, plan: StepPlan, seq: Sequence, idx: int, drafts: list[int]) -> None:
        """The sequence samples at its next token's row, then at each drafted token's row while
        the drafted token is the one it sampled; the cells of the drafted tokens it did not keep go
        (from the slot: the scheduler, after the update, `plan.cuts`)."""
        seq.sample(self.ctx, idx)
        kept = 0
        for token in drafts:
            if seq.next_token != token or seq.cut:
                break
            kept += 1
            seq.sample(self.ctx, idx + kept)
        if seq.cut:  # the answer was cut back before the drafts: their cells went with it, its drafter too
            return
        if kept < len(drafts):
            slot, gone = seq.slot, len(drafts) - kept
            C.llama_memory_seq_rm(self.mem, slot.seq_id, slot.next_pos - gone, -1)
            plan.cuts.append((slot, len(slot.cells) - gone))
        seq.verified(len(drafts), kept)

    def share(self, job: Job) -> None:
        """n > 1, the prompt read: the lead slot's cells are copied to the other slots' sequences
        (the scheduler copies what they hold, before the update samples)."""
        lead = job.lead.slot
        for seq in job.seqs[1:]:
            C.llama_memory_seq_rm(self.mem, seq.slot.seq_id, -1, -1)
            C.llama_memory_seq_cp(self.mem, lead.seq_id, seq.slot.seq_id, -1, -1)

    def _prompt_done(self, job: Job, idx: int) -> None:
        """The prompt is in the lead slot (and shared with the others, `share`): every sequence
        samples its first token from the same logits."""
        if job.request.prompt_logprobs is not None:
            job.emit(PromptLogprobs(tuple(job.prompt_logprobs)))
        for seq in job.seqs:
            seq.sample(self.ctx, idx)
