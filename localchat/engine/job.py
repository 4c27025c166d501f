"""A request inside the scheduler: its sequences, the slot it picks, its LoRA adapters."""

from __future__ import annotations

import ctypes
import os
from collections import Counter
from difflib import SequenceMatcher
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import llama_cpp as C

from .model import Model
from .outputs import Item, Outbox
from .params import Generate
from .repetition import detector
from .sampling import Sampler
from .slot import Sequence, Slot, token_logprob

if TYPE_CHECKING:
    from .vision import Expanded

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
                    detector(params.repetition_stop), req.constraint.checks if req.constraint else (), req.prediction)


def apply_adapters(ctx: int, model: Model, adapters: Adapters) -> None:
    """Set the context's LoRA adapters (llama.cpp rebuilds its graph on the next decode)."""
    n = len(adapters)
    ptrs = (C.llama_adapter_lora_p_ctypes * n)(*(model.adapters[i] for i, _ in adapters)) if n else None
    scales = (ctypes.c_float * n)(*(scale for _, scale in adapters)) if n else None
    C.llama_set_adapters_lora(ctx, ptrs, n, scales)


def vacancy(slot: Slot) -> tuple[bool, float, int]:
    """Which free slot to give up first: an empty one, the lowest first (llama.cpp batches
    consecutive slot ids in one graph), else the least recently used."""
    return (not slot.cached, -slot.used_at, -slot.seq_id)


def owned(slot: Slot, job: Job) -> bool:
    """Whether the slot's last request had the job's cache key (prompt_cache_key): where no slot's cache
    serves more, a conversation goes back to its own slot, not to another conversation's."""
    return job.request.cache_key is not None and slot.key == job.request.cache_key


def reuse(slot: Slot, job: Job) -> int:
    """How much of a prompt a slot would serve from its cache, counted only when that is more
    than half of the prompt (llama-server's slot_prompt_similarity) or keeps at least half of
    what the slot holds (a chat's next turn with a long new message): prompts that share only
    a chat template's first tokens go to other slots, so each keeps its own cache. A cache made
    with other LoRA adapters serves nothing, nor does any cache to a request with cache_prompt off."""
    tokens = job.tokens
    if slot.adapters != job.request.adapters or not job.request.cache_prompt:
        return 0
    common = common_prefix(slot.cached, tokens)
    if shifts(slot, job):  # (the moved stretches serve too)
        common += sum(length for _, _, length in shifted_matches(slot.cached, tokens, common, job.request.fresh_from))
    return common if 2 * common > len(tokens) or 2 * common >= len(slot.cached) else 0


SHIFT_SPAN = 512  # tokens that may differ between a cached prompt and a new one (each side) for a shifted reuse
SHIFT_KEY = 16  # tokens that must match right after the span for it to be found
SHIFT_MIN = 256  # cached tokens after the span worth moving rather than reading again
SHIFT_EDIT = 16  # tokens an edit may hold on each side for the cells after it to move: a path, a date, a name
SHIFT_SAME = 4  # tokens two spans must share in a stretch for it to part two edits (small_edits)
SHIFT_EDGE = 2  # tokens at each end of a moved block that may be tokenized otherwise at its new place


@dataclass
class Jump:
    """One stretch of a shifted reuse: `span` more prompt tokens to read (a new span), then the
    slot holds `tokens` again: the saved cells at positions start…end - 1."""

    span: int
    tokens: list[int]
    start: int
    end: int


def shifts(slot: Slot, job: Job) -> bool:
    """Whether a shifted reuse may serve this job from this slot: a prompt as long as its
    `cache_reuse` or longer, text only, every cached position a token, the cache wanted and kept,
    no LoRA adapter (an adapter magnifies what moved cells differ by: scripts/cachecheck saw 0.023
    on the tiny model's, and such cells served later requests of the adapter as exact ones)."""
    req = job.request
    return (0 < req.params.cache_reuse <= len(job.tokens) and req.cache_prompt and req.prompt_logprobs is None
            and not req.media and not slot.media and slot.pos_delta == 0 and not req.adapters)


def shifted_match(cached: list[int], tokens: list[int], c: int, t: int,
                  fresh_from: int | None = None) -> tuple[int, int, int] | None:
    """Where the cached tokens from c on meet the new ones from t on again: (where in `cached`,
    the new span's length, how many tokens match from there) for the first meeting within
    SHIFT_SPAN tokens on each side that serves SHIFT_MIN tokens (never the prompt's last token:
    it is read for the logits) after a span of small edits (small_edits: a path, a date), or one
    side of a moved block (moved_block). A stretch starts before `fresh_from`, where the turn being
    answered (the last message) begins, and may run on into it up to its first difference: from
    a difference inside that message on, everything is read. Moved cells saw the old span, and
    cells after the old message's own text would answer the new one as the old was — aider's
    rules follow each new message; the same start of a message (Qwen Code's and Claude Code's
    reminders before the task) saw only what every moved cell saw. None if there is none."""
    last = len(tokens) - 1
    starts_before = last if fresh_from is None else min(last, fresh_from)
    if len(cached) - c < SHIFT_MIN or last - t < SHIFT_MIN:
        return None
    keys: dict[tuple[int, ...], int] = {}
    for j in range(c, min(c + SHIFT_SPAN, len(cached) - SHIFT_KEY) + 1):
        keys.setdefault(tuple(cached[j:j + SHIFT_KEY]), j)
    for d in range(0, min(SHIFT_SPAN, len(tokens) - t - SHIFT_KEY, starts_before - 1 - t) + 1):
        j = keys.get(tuple(tokens[t + d:t + d + SHIFT_KEY]))
        if j is None or (j == c and d == 0):
            continue
        length = min(common_prefix(cached[j:], tokens[t + d:]), last - (t + d))
        if length >= SHIFT_MIN:  # (the first meeting is the span's end: a later one is the same stretch)
            old, new = cached[c:j], tokens[t:t + d]
            return (j, d, length) if small_edits(old, new) or moved_block(cached, tokens, c, j, t, d) else None
    return None


def small_edits(old: list[int], new: list[int]) -> bool:
    """Whether a span differs from the cached one only in short edits (each at most SHIFT_EDIT
    tokens on each side) between stretches of SHIFT_SAME tokens or more that both hold: a folder
    renamed in every line of a file list, a date. Two unlike lines (a rule of the system message
    replaced) share no such stretches, or only a few far apart."""
    if max(len(old), len(new)) <= SHIFT_EDIT:
        return True
    a = b = 0
    for block in SequenceMatcher(None, old, new, autojunk=False).get_matching_blocks():
        if block.size >= SHIFT_SAME or block.size == 0:  # (the last block, of size 0, is where both end)
            if block.a - a > SHIFT_EDIT or block.b - b > SHIFT_EDIT:
                return False
            a, b = block.a + block.size, block.b + block.size
    return True


def moved_block(cached: list[int], tokens: list[int], c: int, j: int, t: int, d: int) -> bool:
    """Whether a long span is a block moved (the cells after it saw the same text, in another
    order): blocks swapped within the span (both sides the same tokens but for SHIFT_EDIT, as an
    agent's environment block put after the task), or the cached tokens c…j-1 left out here and
    held elsewhere in the new prompt, or the new tokens t…t+d-1 put in here and held elsewhere in
    the cached one. Any other long span is text the cells after it never saw, or saw and the prompt
    no longer holds (a line of the system message replaced: on the 0.5B, moved cells then moved an
    answer's first token by 0.46–0.53, scripts/cachecheck seed 44 sequence 2): those cells are read again."""
    old, new = Counter(cached[c:j]), Counter(tokens[t:t + d])
    if old and new:
        return (old - new).total() + (new - old).total() <= SHIFT_EDIT
    if old:
        return _within(cached[c + SHIFT_EDGE:j - SHIFT_EDGE], tokens)
    return _within(tokens[t + SHIFT_EDGE:t + d - SHIFT_EDGE], cached)


def _within(part: list[int], whole: list[int]) -> bool:
    if len(part) < SHIFT_KEY:
        return False
    return f",{','.join(map(str, part))}," in f",{','.join(map(str, whole))},"


def shifted_matches(cached: list[int], tokens: list[int], n: int,
                    fresh_from: int | None = None) -> list[tuple[int, int, int]]:
    """After a common prefix of n tokens, every stretch of the cached tokens the new ones meet
    again, in order (shifted_match, from the end of the one before): a path and a date that
    differ at two places in a prompt are two spans."""
    hits, c, t = [], n, n
    while hit := shifted_match(cached, tokens, c, t, fresh_from):
        hits.append(hit)
        c, t = hit[0] + hit[2], t + hit[1] + hit[2]
    return hits


def common_prefix(a: list[int], b: list[int]) -> int:
    return len(os.path.commonprefix([a, b]))


def read_prompt_logprobs(job: Job, model: Model, ctx, start: int, at: int, count: int) -> None:
    """The log-probabilities of the prompt tokens that follow a chunk's tokens (the prompt's
    tokens start…start+count-1, decoded at batch indices at…at+count-1), each given the ones before it."""
    top = job.request.prompt_logprobs or 0
    for j in range(count):
        if start + j + 1 < len(job.tokens):
            job.prompt_logprobs.append(token_logprob(model, ctx, at + j, job.tokens[start + j + 1], top, rank=True))
