"""What a step decodes, planned with no model (Decoder.plan: engine/core/decoder.py): a row per
generating sequence first (its next token, then the drafts that pay), prompt chunks in the room
left (never a last chunk under TILE_ROWS, at most PROMPT_LOGPROBS_CHUNK tokens a step when the
request wants the prompt's log-probabilities), rows in slot order; a plan writes no request: the
scheduler advances the jobs' pending prompts by the chunks it reads (scheduler.advance)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from localchat.engine.drafting import draft_cost
from localchat.engine.core.decoder import PROMPT_LOGPROBS_CHUNK, Decoder
from localchat.engine.state.job import TILE_ROWS
from localchat.engine.core.scheduler import advance
from localchat.engine.state.slot import Slot

pytestmark = pytest.mark.fast


def decoder(n_batch: int, n_ctx: int = 4096) -> Decoder:
    d = Decoder.__new__(Decoder)  # (planning reads these alone: no context, no batch)
    d.n_batch, d.n_ctx, d.media, d.cost = n_batch, n_ctx, None, draft_cost.DEFAULT
    return d


class Writer:
    """A generating sequence with its next token sampled; `offer`: what it could draft (and the
    chances its first ones are kept; None: a draft model's, taken as drafted)."""

    def __init__(self, slot: int, token: int, offer: tuple[list[int], list[float] | None] = ([], None)) -> None:
        self.slot, self.next_token, self.offer = Slot(slot), token, offer
        self.asked: list[int] = []

    def draft(self, room: int):
        self.asked.append(room)
        return self.offer

    def allowed(self, draft: list[int]) -> list[int]:
        return [t for t in draft if t != 666]  # (a grammar cuts a draft at a token it forbids: here, 666 goes)


def job(slot: int, pending: list[int], seqs=(), logprobs: bool = False) -> SimpleNamespace:
    lead = SimpleNamespace(slot=Slot(slot))
    request = SimpleNamespace(prompt_logprobs=0 if logprobs else None)
    return SimpleNamespace(seqs=list(seqs), pending=list(pending), tokens=list(pending), jumps=[], request=request,
                           lead=lead)


def test_writers_come_first_then_prompt_chunks_in_the_room_left_in_slot_order():
    a = Writer(2, 11)
    reading = job(0, list(range(500, 700)))  # 200 prompt tokens, 15 rows left: 15 now (185 >= TILE_ROWS stay)
    plan = decoder(16).plan([job(9, [], [a]), reading])
    assert [(r.slot.seq_id, r.tokens[:1], len(r.tokens)) for r in plan.rows] == [(0, [500], 15), (2, [11], 1)]
    assert plan.rows[1].who is a and plan.rows[0].who is None  # the prompt goes on: no logits yet
    assert len(reading.pending) == 200 and plan.rows[0].reads is reading  # a plan writes no request
    advance(plan)  # (the scheduler's: the chunk is read)
    assert reading.pending[:1] == [515] and len(reading.pending) == 185


def test_a_prompts_last_chunk_is_never_under_tile_rows():
    reading = job(1, list(range(TILE_ROWS + 10)))  # 74 tokens in a room of 40: 10 now, 64 next step
    advance(plan := decoder(40).plan([reading]))
    assert len(plan.rows[0].tokens) == 10 and len(reading.pending) == TILE_ROWS
    advance(plan := decoder(64).plan([reading]))  # all of what is left: the job samples at its last token
    assert len(plan.rows[0].tokens) == TILE_ROWS and plan.rows[0].who is reading and not reading.pending


def test_prompt_logprobs_read_a_bounded_chunk_a_step():
    reading = job(0, list(range(200)), logprobs=True)
    plan = decoder(512).plan([reading])
    assert len(plan.rows[0].tokens) == PROMPT_LOGPROBS_CHUNK and plan.rows[0].every == (reading, 0)


def test_a_draft_models_draft_is_taken_within_the_room_and_a_grammar_cuts_it():
    a = Writer(0, 11, ([21, 22, 666, 24], None))
    reading = job(1, list(range(100)))
    plan = decoder(8).plan([job(9, [], [a]), reading])
    row = next(r for r in plan.rows if r.who is a)
    assert row.tokens == [11, 21, 22, 24] and row.drafts == [21, 22, 24]
    assert a.asked == [7]  # offered the room after the writers' tokens
    chunk = next(r for r in plan.rows if r.who is not a)
    assert len(chunk.tokens) == 8 - 1 - 4  # the prompt takes the room the token and the offered draft leave


def test_text_drafts_no_one_would_keep_are_not_decoded():
    a = Writer(0, 11, ([21, 22, 23], [0.0, 0.0, 0.0]))
    plan = decoder(64).plan([job(9, [], [a])])
    assert plan.rows[0].tokens == [11] and plan.rows[0].drafts == []
    sure = Writer(0, 11, ([21, 22, 23], [0.99, 0.98, 0.97]))
    plan = decoder(64).plan([job(9, [], [sure])])
    assert plan.rows[0].drafts and plan.rows[0].tokens == [11, *plan.rows[0].drafts]
