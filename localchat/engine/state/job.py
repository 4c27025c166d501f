"""A request inside the scheduler: its sequences, its LoRA adapters, how its prompt is read in
chunks, which free slot it takes (`owned`, `vacancy`; how much a slot would serve: prefix_cache.py's `reuse`)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import llama_cpp as C

from ..llama.model import Model
from ..outputs import Item, Outbox
from ..params import Generate
from ..sampling.repetition import detector
from ..sampling.sampling import Sampler
from .slot import Sequence, Slot, token_logprob

if TYPE_CHECKING:
    from ..media.vision import Expanded

Adapters = tuple[tuple[int, float], ...]  # LoRA adapters applied: (index in the model's list, scale)

# llama.cpp's CPU flash attention computes a ubatch of fewer than 64 rows a sequence (GGML_FA_TILE_Q)
# with another kernel than a larger one: row by row, Q and the sums over V in F16, where its tiles keep
# F32. A cold read's last token mostly lands in a large chunk; a cached read of 1,587 tokens split
# 512/512/512/51 put it in a small one, and the same prompt answered 0.17 apart in probability (the
# tiny model with its random LoRA adapter, whose outsized values multiply the rounding:
# scripts/cachecheck --seed 44 --only 87; 0.0008 without the adapter). So no prompt chunk leaves a
# last chunk of fewer than TILE_ROWS tokens (chunk_size): a prompt's last token is then computed as a
# cold read computes it. (A cached read whose new part is shorter than that still reads it in one
# small chunk: re-reading cached tokens to make it TILE_ROWS would cost every short turn and keystroke.)
TILE_ROWS = 64


def chunk_size(pending: int, room: int) -> int:
    """How many of a prompt's `pending` tokens to read in a step with `room` free rows: all that
    fit, else no more than leaves TILE_ROWS for the last chunk (TILE_ROWS above)."""
    if pending <= room:
        return pending
    return min(room, pending - TILE_ROWS) if pending > TILE_ROWS else room


@dataclass
class Jump:
    """One stretch of a shifted reuse: `span` more prompt tokens to read (a new span), then the
    slot holds `tokens` again: the saved cells at positions start…end - 1."""

    span: int
    tokens: list[int]
    start: int
    end: int


class Job:
    def __init__(self, request: Generate, sink: Any, outbox: Outbox) -> None:
        """sink: what the request's events go to, opaque here (a Stream; a worker's job id); its
        events wait in the outbox until the step ends (outputs.py)."""
        self.request, self.sink, self._outbox = request, sink, outbox
        self.cancelled = False
        self.seqs: list[Sequence] = []
        self.slots: list[Slot] = []  # the lead slot (it decodes the prompt) first
        self.pending: list[int] = []  # prompt tokens still to decode (into the lead slot)
        self.cached = 0  # prompt tokens found in the lead slot's cache
        self.prompt: Expanded | None = None  # with media: the prompt expanded by the projector
        self.miss: tuple[str, int, int, tuple[int, ...]] | None = None  # why the cache served less than it held (prefix_cache.py)
        self.tokens = request.tokens  # the prompt, with media placeholders once expanded
        self.n_prompt = len(request.tokens)
        self.prompt_logprobs: list = []  # TokenLogprob of prompt tokens 1…, when the request asks for them
        # A shifted reuse under way: the stretches still to come back, and the save that holds them
        self.jumps: list[Jump] = []
        self.moved: bytearray | None = None

    @property
    def lead(self) -> Sequence:
        return self.seqs[0]

    def emit(self, item: Item) -> None:
        self._outbox.put(self, item)


def make_sequence(job: Job, i: int, slot: Slot, model: Model, n_ctx: int) -> Sequence:
    """Completion i of a job, in its slot: its sampler (seed + i), stop rules, token budget and
    loop detector."""
    req = job.request
    params = req.params
    if params.seed is not None and i:
        params = replace(params, seed=params.seed + i)
    if params.ignore_eos:  # as llama.cpp does it: end-of-generation tokens are never sampled
        banned = dict.fromkeys(model.eog | req.stop_tokens, float("-inf"))
        params = replace(params, logit_bias={**params.logit_bias, **banned})
    sampler = Sampler(params, model.vocab, model.n_vocab, req.constraint, model.piece,
                      lambda text: model.tokenize_bytes(text.encode(), parse_special=True), model.utf8_tables,
                      job.tokens)
    budget = n_ctx - len(job.tokens)
    if params.max_tokens is not None:
        budget = min(budget, params.max_tokens)
    return Sequence(i, slot, model, sampler, req.stop_tokens, params.stop, budget, req.logprobs, job.emit,
                    detector(params.repetition_stop), req.constraint.checks if req.constraint else (), req.prediction,
                    req.speed.ngram_draft)


def apply_adapters(ctx: int, model: Model, adapters: Adapters) -> None:
    """Set the context's LoRA adapters (llama.cpp rebuilds its graph on the next decode)."""
    n = len(adapters)
    ptrs = (C.llama_adapter_lora_p_ctypes * n)(*(model.adapters[i] for i, _ in adapters)) if n else None
    scales = (ctypes.c_float * n)(*(scale for _, scale in adapters)) if n else None
    C.llama_set_adapters_lora(ctx, ptrs, n, scales)


def vacancy(slot: Slot) -> tuple[bool, float, int]:
    """Which free slot to give up first: an empty one, the lowest first (llama.cpp batches
    consecutive slot ids in one graph), else the least recently used."""
    return (not slot.cells, -slot.used_at, -slot.seq_id)


def owned(slot: Slot, job: Job) -> bool:
    """Whether the slot's last request had the job's cache key (prompt_cache_key): where no slot's cache
    serves more, a conversation goes back to its own slot, not to another conversation's."""
    return job.request.cache_key is not None and slot.key == job.request.cache_key




def read_prompt_logprobs(job: Job, model: Model, ctx, start: int, at: int, count: int) -> None:
    """The log-probabilities of the prompt tokens that follow a chunk's tokens (the prompt's
    tokens start…start+count-1, decoded at batch indices at…at+count-1), each given the ones before it."""
    top = job.request.prompt_logprobs or 0
    for j in range(count):
        if start + j + 1 < len(job.tokens):
            job.prompt_logprobs.append(token_logprob(model, ctx, at + j, job.tokens[start + j + 1], top, rank=True))
