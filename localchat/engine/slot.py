"""One sequence of the shared context: the tokens it caches, and the completion generating in it.

A `Slot` is a llama.cpp sequence id whose K/V cells outlive a request (its prompt cache). A
`Sequence` is one completion while it runs there: its sampler, its UTF-8 and stop-string
state, its budget, its loop detector and where its events go. The scheduler decodes; a
sequence turns each sampled token into events and says when it is finished."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import llama_cpp as C
import numpy as np

from ..errors import GrammarDeadEnd
from .draft_model import DraftContext
from .drafts import Drafter, TextDrafter, json_view
from .model import Model
from .params import Done, Event, TokenLogprob, TopLogprob, Text
from .repetition import LoopDetector
from .sampling import Sampler
from .text import LineLimits, StopMatcher, Utf8Stream


@dataclass
class Slot:
    seq_id: int
    cached: list[int] = field(default_factory=list)  # tokens whose K/V this sequence holds, in order
    adapters: tuple[tuple[int, float], ...] = ()  # the LoRA adapters the cached K/V were computed with
    used_at: float = 0.0
    busy: bool = False
    media: list[tuple[int, int, int]] = field(default_factory=list)  # cached media: (start, n_tokens, n_pos)
    pos_delta: int = 0  # positions minus tokens cached (media with M-RoPE take fewer positions than tokens)
    task: int = -1  # the number of the last request it took (GET /slots' id_task); -1: none yet

    @property
    def next_pos(self) -> int:
        return len(self.cached) + self.pos_delta

    def keep(self, n: int) -> int:
        """Forget all but the first n cached tokens (never part of a media span); the position
        the cut starts at, for llama_memory_seq_rm."""
        self.media = [m for m in self.media if m[0] + m[1] <= n]
        self.pos_delta = sum(n_pos - n_tokens for _, n_tokens, n_pos in self.media)
        del self.cached[n:]
        return n + self.pos_delta

    def copy_from(self, other: "Slot") -> None:
        self.cached, self.adapters = list(other.cached), other.adapters
        self.media, self.pos_delta = list(other.media), other.pos_delta


class Sequence:
    def __init__(self, index: int, slot: Slot, model: Model, sampler: Sampler, stop_tokens: frozenset[int],
                 stops: tuple[str, ...], budget: int, logprobs: int | None, emit: Callable[[Event], None],
                 loop: LoopDetector | None = None) -> None:
        self.index, self.slot, self.model = index, slot, model
        self.sampler, self.stop_tokens, self.budget = sampler, stop_tokens, budget
        self.logprobs, self.emit, self.loop = logprobs, emit, loop
        self.utf8, self.stopper = Utf8Stream(), StopMatcher(list(stops))
        params = sampler.params
        self.lines = LineLimits(params.n_indent, params.t_max_predict_ms) \
            if params.n_indent > 0 or params.t_max_predict_ms > 0 else None
        self.generated = 0
        self.next_token: int | None = None  # sampled, to be decoded in the next step
        self.finish: str | None = None
        self.why: str | None = None  # "repetition": ended early as "length" because it looped
        self._pending_logprobs: list[TokenLogprob] = []
        self.drafter: Drafter | None = None  # made at the first step that may draft (scheduler)
        self.draft_model: DraftContext | None = None  # the model's draft model, if it has one (scheduler)

    def draft(self, room: int) -> tuple[list[int], list[float] | None]:
        """Tokens that could be decoded after next_token this step, to be verified, and the chances
        that its first 1, 2, … tokens are kept (drafts.py), or None for a draft model's draft, which
        is used as it is;
        none when drafts are off, nothing matches or there is no room (the batch's, the budget's).
        A model with a draft model drafts with it instead of the text (draft_model.py), except in a
        slot that holds images or audio (the draft model cannot read their cells); `ngram_draft = 0`
        turns either off."""
        limit = self.sampler.params.ngram_draft
        if not limit or self.next_token is None:
            return [], None
        if self.drafter is None:
            history = [*self.slot.cached, self.next_token]
            if self.draft_model is not None and not self.slot.media:
                self.drafter = self.draft_model.drafter(self.slot.seq_id, history)
            else:  # under a grammar (a tool call, JSON) the text may copy the prompt as a JSON string
                views = [json_view(self.slot.cached, self.model.piece, self._plain)] if self.sampler.constraint else []
                self.drafter = TextDrafter(history, limit, views)
        return self.drafter.propose(min(room, self.budget - self.generated - 1))

    def allowed(self, draft: list[int]) -> list[int]:
        """The draft up to the first token the grammar forbids (all of it without a grammar)."""
        return draft[:self.sampler.allowed(draft)] if draft and self.sampler.grammar is not None else draft

    def _plain(self, data: bytes) -> list[int]:
        return self.model.tokenize_bytes(data, parse_special=False)

    def sample(self, ctx, idx: int) -> None:
        """Sample from the logits at batch index `idx`; emit its text; finish or queue the token."""
        try:
            token = self.sampler.sample(ctx, idx)
        except GrammarDeadEnd:
            if not self.sampler.params.ignore_eos:
                raise
            # the grammar is complete: only the end of generation could follow, which ignore_eos bans
            return self._end("stop", flush=True)
        if token in self.stop_tokens or token in self.model.eog:
            return self._end("stop", flush=True)  # text held back as a possible stop string was text
        if self.logprobs is not None:  # content tokens only, as OpenAI does: not the end-of-turn token
            self._pending_logprobs.append(self._logprob(ctx, idx, token))
        self.generated += 1
        piece = self.model.piece(token)
        if self.sampler.grammar is None:
            text, stopped = self.stopper.push(self.utf8.push(piece))
        else:  # under a grammar the grammar says where the output ends: a stop string could cut JSON
            text, stopped = self.stopper.flush() + self.utf8.push(piece), False
        limited = False
        if self.lines is not None:
            text, limited = self.lines.push(text, time.monotonic())
        if text or (self._pending_logprobs and not stopped):
            self._text(text)
        if stopped:
            return self._end("stop", flush=False)
        if limited:  # llama-server's editor limits end the answer as its n_predict does
            return self._end("length", flush=False)
        if self.generated >= self.budget:
            return self._end("length", flush=True)
        if self.loop is not None and self.loop.push(token):
            self.why = "repetition"
            return self._end("length", flush=True)
        self.next_token = token
        if self.drafter is not None:
            self.drafter.push(token)

    def cancel(self) -> None:
        self.finish = "cancelled"
        self.next_token = None

    def _text(self, text: str) -> None:
        self.emit(Text(text, self.index, tuple(self._pending_logprobs), self.generated))
        self._pending_logprobs = []

    def _end(self, reason: str, flush: bool) -> None:
        if flush:
            tail = (self.lines.flush() if self.lines else "") + self.stopper.flush() + self.utf8.flush()
            if tail:
                self._text(tail)
        if self._pending_logprobs:
            self._text("")
        self.finish, self.next_token = reason, None

    def done(self, prompt_tokens: int, cached_tokens: int) -> Done:
        return Done(self.finish or "cancelled", prompt_tokens, self.generated, cached_tokens, self.index,
                    self.stopper.matched, self.why, *((self.drafter.drafted, self.drafter.kept) if self.drafter else ()))

    def _logprob(self, ctx, idx: int, token: int) -> TokenLogprob:
        return token_logprob(self.model, ctx, idx, token, max(self.logprobs or 0, 0))


def token_logprob(model: Model, ctx, idx: int, token: int, top: int, rank: bool = False) -> TokenLogprob:
    """`token`'s log-probability under the raw distribution at batch index `idx` (softmax of the
    logits), the `top` most likely tokens, and with `rank` the token's place among them all."""
    logits = np.ctypeslib.as_array(C.llama_get_logits_ith(ctx, idx), shape=(model.n_vocab,))
    peak = float(logits.max())
    lse = peak + float(np.log(np.exp(logits - peak, dtype=np.float64).sum()))
    best = np.argpartition(logits, -top)[-top:] if top else np.empty(0, dtype=np.int64)
    best = best[np.argsort(-logits[best], kind="stable")]

    def entry(t: int) -> tuple[str, float, list[int]]:
        raw = model.piece(t)
        return raw.decode("utf-8", errors="replace"), min(float(logits[t]) - lse, 0.0), list(raw)

    place = int((logits > logits[token]).sum()) + 1 if rank else 0
    return TokenLogprob(*entry(token), [TopLogprob(*entry(int(t)), id=int(t)) for t in best], id=token, rank=place)
