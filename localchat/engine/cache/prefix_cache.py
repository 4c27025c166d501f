"""The prefix cache of one llama context: which cells a request reuses, and the cells kept beyond the
slots. A request's lead slot serves its prompt up to the first difference (`place`); a saved prompt
from the disk store (prompt_store.py) replaces the slot's cells when it serves RESTORE_MIN tokens
more, and a slot holding SAVE_MIN tokens more than any saved prompt is saved when its request ends
(`save`), one holding SPARE_MIN more when another prompt takes it (`_spare`); a prompt that differs
from the slot's only in spans (a folder's path, a date) keeps the cells after each span, moved to
their new positions (`_shift`, `land`); and llama-server's slot actions (save, restore, erase an
idle slot's cache). The scheduler (scheduler.py) owns the context and the slots, and calls these on
its thread (slot_actions.py: between two steps)."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import llama_cpp as C
import numpy as np

from ...errors import EngineError, InvalidRequest, SlotBusy
from ..state.job import Job, Jump
from ..state.slot import Slot
from . import kv_state
from .matching import common_prefix, moved_stretches, shifted_matches
from .prompt_store import REMEMBERED, RESTORE_MIN, SAVE_MIN, SPARE_MIN, PromptStore, common, copy_state, put_state

_log = logging.getLogger("localchat.engine")
MISS_MIN = 64  # cached tokens a prompt must miss for the access log to say why (prefix_cache.missed)
DIFF_TOKENS = 16  # of the closest cached prompt where the prompt parts from it, for the log's reason
Miss = tuple[str, int, int, tuple[int, ...]]  # why the cache served less than it held (PrefixCache._missed)


@dataclass
class Placement:
    """What of a request's prompt its lead slot serves (`PrefixCache.place`), for the scheduler
    to apply to the request and its lead slot: `cached` tokens its cells hold (kept, restored, or
    moved: the `jumps`, whose cells wait in the save `moved` until the new span before each is
    read, `land`), the tokens still to read (`pending`), why it served less than a cached sequence
    held (`miss`), and what the lead slot holds now (`held`: its cells, their adapters and media)."""

    cached: int
    pending: list[int]
    jumps: list[Jump] = field(default_factory=list)
    moved: bytearray | None = None
    miss: Miss | None = None
    held: Slot | None = None


@dataclass
class Landed:
    """What `PrefixCache.land` did, for the scheduler to apply: the lead slot's cells now, and
    the shifted reuse left to the request (its jumps, its save, what it reads, what it found cached)."""

    cells: list[int]
    jumps: list[Jump]
    moved: bytearray | None
    pending: list[int]
    cached: int


class PrefixCache:
    def __init__(self, ctx: object, slots: Sequence[Slot], n_ctx: int, store: PromptStore | None, shiftable: bool,
                 decode_one: Callable[[int, int], bool]) -> None:
        """shiftable: cells can be moved (RoPE positions, one stream per slot, no sliding window, no
        draft model). decode_one(seq, pos): one token at pos, no logits (the scheduler's batch)."""
        self.ctx, self.mem, self.slots, self.n_ctx = ctx, C.llama_get_memory(ctx), slots, n_ctx
        self.store, self.shiftable, self.decode_one = store, shiftable, decode_one
        self.evicted: deque[np.ndarray] = deque(maxlen=REMEMBERED)  # slots' prompts lately given to other prompts

    def place(self, job: Job) -> Placement:
        """How much of the job's prompt its lead slot serves: the slot's own cells up to the first
        difference, or a saved prompt restored from the store when it serves more, or a shifted
        reuse; the slot's other cells go. With why it was served less than a cached sequence held,
        if it was (`_missed`). The slots are not written: the placement says what the lead holds."""
        seen = self._seen(job)
        lead = job.slots[0]
        held = Slot(lead.seq_id, list(lead.cells), lead.adapters, media=list(lead.media), pos_delta=lead.pos_delta)
        placed = self._place(job, held)
        placed.miss, placed.held = self._missed(seen, len(job.tokens), placed.cached), held
        for i, slot in enumerate(job.slots):  # what this request takes from its slots
            kept = common_prefix(slot.cells, held.cells) if i == 0 else 0  # (n > 1: the others get the lead's prompt)
            if len(slot.cells) - kept >= MISS_MIN:
                self.evicted.append(np.asarray(slot.cells, dtype=np.int32))
        return placed

    def _place(self, job: Job, held: Slot) -> Placement:
        """(`held`: a copy of the lead slot, which this brings to what it holds after the placement)"""
        req = job.request
        self._spare(job)
        n = min(common_prefix(held.cells, job.tokens), len(job.tokens) - 1)  # the last token makes the logits
        cache = held.adapters == req.adapters and req.cache_prompt and req.prompt_logprobs is None
        if not cache:
            n, held.adapters = 0, req.adapters  # other adapters' cache, none wanted, or every token's logits wanted
        elif self.store is not None and job.prompt is None and not req.adapters:  # (saved: cells without adapters)
            n = self._restore(held, job.tokens, n)
        if job.prompt is not None and (span := job.prompt.inside(n)):  # a media chunk is decoded whole
            n = span.start
        if cache and (shifted := self._shift(job, held, n)) is not None:
            return shifted
        if n < len(held.cells) and not C.llama_memory_seq_rm(self.mem, held.seq_id, held.keep(n), -1):
            C.llama_memory_seq_rm(self.mem, held.seq_id, -1, -1)
            n = held.keep(0)
        return Placement(n, list(job.tokens[n:]))

    def _seen(self, job: Job) -> list[tuple[int, int, str, tuple[int, ...]]]:
        """Before the job takes its slots: each cached sequence's (tokens it shares with the prompt, its
        length, what it is, its DIFF_TOKENS tokens after those it shares): the slots' ("busy" with another request, or "idle") and the best saved
        prompt's ("idle"); and those the prompt could have been served from lately: a slot's prompt
        given to another ("evicted"), a saved one the store evicted ("dropped"), one saved for another
        version of the model file ("stale"). None for a request that wants no cache, or another
        adapters' cache."""
        req, tokens = job.request, job.tokens
        if not req.cache_prompt or req.prompt_logprobs is not None or req.adapters or job.prompt is not None:
            return []
        seen = [(n, len(s.cells), "busy" if s.busy and s not in job.slots else "idle", _after(s.cells, n))
                for s in self.slots if s.cells for n in [common_prefix(s.cells, tokens)]]
        hit = self.store.best(tokens, self.n_ctx) if self.store is not None else None
        if hit is not None:
            seen.append((hit[1], len(hit[0].tokens), "idle", _after(hit[0].tokens, hit[1])))
        gone = [("evicted", self.evicted)]
        if self.store is not None:
            gone += [("dropped", self.store.evicted), ("stale", self.store.stale)]
        want = np.asarray(tokens, dtype=np.int32)
        seen += [(common(old, want), len(old), kind, ()) for kind, olds in gone for old in olds]
        return seen

    @staticmethod
    def _missed(seen: list[tuple[int, int, str, tuple[int, ...]]], prompt: int, served: int) -> Miss | None:
        """Why the prompt was served MISS_MIN or more tokens less than a cached sequence could, or one
        held lately, for the access log: (kind, n, held) where a sequence of `held` tokens holds n of
        the prompt: "busy" when a slot busy with another request holds it, "unused" when an idle slot
        or a saved prompt did and was not used (a saved prompt is restored only for RESTORE_MIN tokens
        more), "evicted" / "dropped" / "stale" (see _seen) when it is gone; else ("differs", n, held)
        when the closest cached sequence and the prompt part at token n, both going on for MISS_MIN
        tokens or more (a system message changed, reasoning dropped from an earlier answer, another
        conversation), with the cached sequence's next DIFF_TOKENS tokens from there (what the prompt
        lacks, as reasoning dropped); None otherwise (a turn that only adds to what is cached)."""
        if not seen:
            return None
        live = ("busy", "idle")
        n, held, kind, _ = max(seen, key=lambda s: (s[0], s[2] in live))  # (a cache still held first, at a tie)
        if n - served >= MISS_MIN:
            return ("unused" if kind == "idle" else kind, n, held, ())
        cached = [s for s in seen if s[2] in live]
        if not cached:
            return None
        n, held, _, theirs = max(cached, key=lambda s: s[:2])
        if held - n >= MISS_MIN and prompt - n >= MISS_MIN:
            return ("differs", n, held, theirs)
        return None

    def _spare(self, job: Job) -> None:
        """The slots a job takes for a prompt they do not serve (the lead when `reuse` found nothing
        in it, the others of n > 1) lose their cells: each is saved first where the store lacks
        SPARE_MIN or more of its tokens, so the session it served restores them at its next turn
        instead of reading them again (the save when a request ends waits for SAVE_MIN new tokens:
        eight agents on four slots lost up to that much at each turn)."""
        if self.store is None:
            return
        for i, slot in enumerate(job.slots):
            if (len(slot.cells) < RESTORE_MIN or slot.adapters or slot.media or (i == 0 and reuse(slot, job))
                    or len(slot.cells) - self.store.saved_prefix(slot.cells) < SPARE_MIN):
                continue
            if self.store.save(self.ctx, slot.seq_id, slot.cells):
                _log.info("prompt cache: slot %d given to another prompt: its %d tokens saved first",
                          slot.seq_id, len(slot.cells))

    def _shift(self, job: Job, held: Slot, n: int) -> Placement | None:
        """A shifted reuse (matching.shifted_matches): the lead slot (`held`) holds the prompt but for spans after
        its first n tokens. The cached stretches between them (but the first SHIFT_FRESH tokens of each,
        read again: matching.moved_stretches) move to their new positions (llama.cpp
        shifts their RoPE); the rest of the cells go. llama.cpp reads a batch only at a sequence's
        last position + 1, so the moved cells wait in a save (kv_state.py) while each new span is
        read, then join it (`land`); then what is new is read. None, with the slot as it was,
        where this does not apply."""
        if not self.shiftable or not shifts(held, job):
            return None
        hits = moved_stretches(shifted_matches(held.cells, job.tokens, n, job.request.fresh_from))
        if not hits:
            return None
        seq, mem, far = held.seq_id, self.mem, 1 << 24
        edges = [n] + [x for at, _, length in hits for x in (at, at + length)] + [-1]
        for start, end in zip(edges[::2], edges[1::2]):  # the cells between the stretches go
            if end != start and not C.llama_memory_seq_rm(mem, seq, start, end):
                C.llama_memory_seq_rm(mem, seq, n, -1)
                held.keep(n)
                return None
        for at, _, length in hits:  # out of the way first, so no stretch lands on another one
            C.llama_memory_seq_add(mem, seq, at, at + length, far)
        t, pending, jumps = n, [], []
        for at, span, length in hits:
            C.llama_memory_seq_add(mem, seq, far + at, far + at + length, t + span - at - far)
            jumps.append(Jump(span, list(job.tokens[t + span:t + span + length]), t + span, t + span + length))
            pending += job.tokens[t:t + span]
            t += span + length
        held.keep(n)
        moved = copy_state(self.ctx, seq) if self._apply_moves(seq, t) else None
        if moved is not None and not kv_state.known(moved):
            moved = None  # another llama.cpp's save layout: the moved cells cannot join (the log says so once)
        C.llama_memory_seq_rm(mem, seq, n, -1)
        if moved is None:  # (the plain path: read all from n)
            return Placement(n, list(job.tokens[n:]))
        placed = Placement(n + sum(length for _, _, length in hits), pending + list(job.tokens[t:]), jumps, moved)
        where = ", ".join(f"cells {at}-{at + length - 1} to {jump.start}-{jump.end - 1}"
                          for (at, _, length), jump in zip(hits, jumps))  # (scripts/cachecheck redoes the move from it)
        _log.info("prompt cache: %d cached tokens moved past %d new span(s) after %d (%s); %d to read",
                  placed.cached - n, len(hits), n, where, len(placed.pending))
        return placed

    def _apply_moves(self, seq: int, pos: int) -> bool:
        """llama.cpp turns moved cells' K (their RoPE) to the new positions only at the next
        llama_decode, and a save copies the cells as they are (saved unturned, they came back
        with their old RoPE at the new positions): decode one token after the moved cells (no
        logits), then drop it, so a save holds them turned. False if llama.cpp would not."""
        ok = self.decode_one(seq, pos)
        C.llama_memory_seq_rm(self.mem, seq, pos, -1)
        return ok

    def land(self, job: Job) -> Landed | None:
        """The stretches whose new span is read join the slot (else they are read again): a stretch
        right after the prefix (a deletion) as soon as the job is placed, each other one once the
        decoder has read the span before it. None when no stretch is due."""
        if not job.jumps or job.jumps[0].span:
            return None
        seq, jumps, moved = job.slots[0].seq_id, list(job.jumps), job.moved
        cells, pending, cached = list(job.slots[0].cells), job.pending, job.cached
        while jumps and jumps[0].span == 0:
            jump = jumps.pop(0)
            state = copy_state(self.ctx, seq)
            merged = kv_state.joined(state, moved, jump.start, jump.end) if state is not None and moved is not None else None
            if merged is not None and put_state(self.ctx, seq, merged):
                cells += jump.tokens
                continue
            if merged is not None:  # the sequence is empty now: read it all
                cells = []
            pending = list(job.tokens[len(cells):])
            jumps, moved, cached = [], None, len(cells)
            _log.warning("prompt cache: the moved cells could not be put back; %d tokens read instead", len(pending))
        return Landed(cells, jumps, moved if jumps else None, pending, cached)

    def _restore(self, held: Slot, tokens: list[int], n: int) -> int:
        """Put a saved prompt into the lead slot when it serves RESTORE_MIN tokens more than the slot's
        own cache (whose cells it replaces; `held`: what the slot holds); how many of `tokens` it now holds."""
        hit = self.store.best(tokens, self.n_ctx)
        if hit is None or min(hit[1], len(tokens) - 1) - n < RESTORE_MIN:
            return n
        held.cells, held.media, held.pos_delta = self.store.restore(hit[0], self.ctx, held.seq_id) or [], [], 0
        served = min(common_prefix(held.cells, tokens), len(tokens) - 1)
        if held.cells:
            _log.info("prompt cache: %d tokens restored from %s (the slot held %d of them)", served,
                      hit[0].path.name, n)
        return served

    def save(self, job: Job) -> None:
        """Save the lead slot's cells when it holds SAVE_MIN tokens more than any saved prompt
        shares with it (an agent's first long prompt, a chat grown by that much)."""
        slot = job.slots[0]
        if (self.store is not None and job.request.cache_prompt and not slot.adapters and not slot.media
                and len(slot.cells) - self.store.saved_prefix(slot.cells) >= SAVE_MIN):
            self.store.save(self.ctx, slot.seq_id, slot.cells)

    # -- llama-server's slot actions (the scheduler runs them between two steps) ---------------

    def idle_slot(self, slot_id: int) -> Slot:
        if not 0 <= slot_id < len(self.slots):
            raise InvalidRequest(f"id_slot: no slot {slot_id}; this model has {len(self.slots)} "
                                 f"(0 to {len(self.slots) - 1})", param="id_slot")
        slot = self.slots[slot_id]
        if slot.busy:
            raise SlotBusy(f"id_slot: slot {slot_id} is processing a request; try again once it is done",
                           param="id_slot")
        return slot

    def slot_state(self, slot_id: int) -> tuple[list[int], bytearray]:
        """An idle slot's cached tokens and its cells, copied out (a memory copy)."""
        slot = self.idle_slot(slot_id)
        if slot.media or slot.adapters:
            what = "images or audio" if slot.media else "cells computed with LoRA adapters"
            raise InvalidRequest(f"id_slot: slot {slot_id} holds {what}; such a cache cannot be saved",
                                 param="id_slot")
        state = copy_state(self.ctx, slot.seq_id)
        if state is None:
            raise EngineError(f"llama.cpp would not copy slot {slot_id}'s cells out")
        return list(slot.cells), state

    def slot_restore(self, slot_id: int, tokens: list[int], state: bytearray) -> tuple[Slot, InvalidRequest | None]:
        """Replace an idle slot's cells by a checked file's tokens and cells: what the slot holds
        now, for the scheduler to apply, and the error to raise if llama.cpp had no room (it holds nothing)."""
        slot = self.idle_slot(slot_id)
        if len(tokens) > self.n_ctx:
            raise InvalidRequest(f"filename: its {len(tokens)} tokens do not fit in a slot of {self.n_ctx}",
                                 param="filename")
        C.llama_memory_seq_rm(self.mem, slot.seq_id, -1, -1)
        if tokens and not put_state(self.ctx, slot.seq_id, state):
            return Slot(slot.seq_id), InvalidRequest(
                f"filename: llama.cpp could not put its {len(tokens)} tokens' cells into slot {slot_id} (no room in "
                "the cache); the slot is empty now", param="filename")
        return Slot(slot.seq_id, list(tokens)), None

    def slot_erase(self, slot_id: int) -> int:
        """Empty an idle slot's cells (the scheduler empties the slot); the tokens it held."""
        slot = self.idle_slot(slot_id)
        C.llama_memory_seq_rm(self.mem, slot.seq_id, -1, -1)
        return len(slot.cells)


def _after(tokens: Sequence[int], n: int) -> tuple[int, ...]:
    """A cached sequence's DIFF_TOKENS tokens from where a prompt parts from it (what the prompt lacks there)."""
    return tuple(int(t) for t in tokens[n:n + DIFF_TOKENS])


def reuse(slot: Slot, job: Job) -> int:
    """How much of a prompt a slot would serve from its cache, counted only when that is more
    than half of the prompt (llama-server's slot_prompt_similarity) or keeps at least half of
    what the slot holds (a chat's next turn with a long new message): prompts that share only
    a chat template's first tokens go to other slots, so each keeps its own cache. A cache made
    with other LoRA adapters serves nothing, nor does any cache to a request with cache_prompt off."""
    tokens = job.tokens
    if slot.adapters != job.request.adapters or not job.request.cache_prompt:
        return 0
    common = common_prefix(slot.cells, tokens)
    if shifts(slot, job):  # (the moved stretches serve too)
        common += sum(length for _, _, length in moved_stretches(shifted_matches(slot.cells, tokens, common,
                                                                                 job.request.fresh_from)))
    return common if 2 * common > len(tokens) or 2 * common >= len(slot.cells) else 0


def shifts(slot: Slot, job: Job) -> bool:
    """Whether a shifted reuse may serve this job from this slot: a prompt as long as its
    `cache_reuse` or longer, text only, every cached position a token, the cache wanted and kept,
    no LoRA adapter (an adapter magnifies what moved cells differ by: scripts/cachecheck saw 0.023
    on the tiny model's, and such cells served later requests of the adapter as exact ones)."""
    req = job.request
    return (0 < req.speed.cache_reuse <= len(job.tokens) and req.cache_prompt and req.prompt_logprobs is None
            and not req.media and not slot.media and slot.pos_delta == 0 and not req.adapters)
