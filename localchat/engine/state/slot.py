"""One sequence of the shared context: the tokens it caches, and the completion generating in it.

A `Slot` is a llama.cpp sequence id whose K/V cells outlive a request (its prompt cache). A
`Sequence` is one completion while it runs there: its sampler, its UTF-8 and stop-string
state, its budget, its loop detector and where its events go. The scheduler decodes; a
sequence turns each sampled token into events and says when it is finished."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from difflib import SequenceMatcher

import llama_cpp as C
import numpy as np

from ...errors import GrammarDeadEnd
from ..drafting.draft_model import DraftContext
from ..drafting.drafts import Drafter, TextDrafter, json_view
from ..llama.model import Model
from ..params import Check, Done, Event, Text, TokenLogprob, TopLogprob
from ..sampling.checking import Cut, OutputCheck, squeeze
from ..sampling.repetition import LoopDetector
from ..sampling.sampling import Sampler
from ..sampling.text import LineLimits, StopMatcher, Utf8Stream

_log = logging.getLogger("localchat.engine")


_NUMBER = frozenset("0123456789.eE+-")  # what may go on writing a number


@dataclass
class Slot:
    seq_id: int
    cells: list[int] = field(default_factory=list)  # the tokens whose K/V this sequence holds, in order
    adapters: tuple[tuple[int, float], ...] = ()  # the LoRA adapters the cached K/V were computed with
    used_at: float = 0.0
    busy: bool = False
    media: list[tuple[int, int, int]] = field(default_factory=list)  # cached media: (start, n_tokens, n_pos)
    pos_delta: int = 0  # positions minus tokens cached (media with M-RoPE take fewer positions than tokens)
    task: int = -1  # the number of the last request it took (GET /slots' id_task); -1: none yet
    key: str | None = None  # the cache key (prompt_cache_key) of the last request it led

    @property
    def next_pos(self) -> int:
        return len(self.cells) + self.pos_delta

    def keep(self, n: int) -> int:
        """Forget all but the first n cached tokens (never part of a media span); the position
        the cut starts at, for llama_memory_seq_rm."""
        self.media = [m for m in self.media if m[0] + m[1] <= n]
        self.pos_delta = sum(n_pos - n_tokens for _, n_tokens, n_pos in self.media)
        del self.cells[n:]
        return n + self.pos_delta

    def add_media(self, n_tokens: int, n_pos: int, placeholder: int) -> None:
        """A media chunk's cells decoded after the others: `n_tokens` cells (each `placeholder`)
        over `n_pos` positions."""
        self.media.append((len(self.cells), n_tokens, n_pos))
        self.pos_delta += n_pos - n_tokens
        self.cells += [placeholder] * n_tokens

    def copy_from(self, other: "Slot") -> None:
        self.cells, self.adapters = list(other.cells), other.adapters
        self.media, self.pos_delta = list(other.media), other.pos_delta


class Sequence:
    def __init__(self, index: int, slot: Slot, model: Model, sampler: Sampler, stop_tokens: frozenset[int],
                 stops: tuple[str, ...], budget: int, logprobs: int | None, emit: Callable[[Event], None],
                 loop: LoopDetector | None = None, checks: tuple[Check, ...] = (),
                 prediction: tuple[int, ...] | None = None, draft_limit: int = 0) -> None:
        self.index, self.slot, self.model = index, slot, model
        self.draft_limit = draft_limit  # the longest draft a step (the request's ngram_draft); 0: none
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
        self.drafts = (0, 0)  # drafted and kept by drafters dropped (a cut starts a new one)
        self.prediction = list(prediction) if prediction else None  # OpenAI's Predicted Outputs: the first source
        self.drafting = True  # False after a drafter failed: drafts only make an answer faster, it goes on without
        # What the grammar does not hold, checked as it is written (checking.py): the tokens sampled,
        # where the grammar's text began among them, the checked text passed on so far, the tokens
        # banned after a cut (first token of the value, the tokens from there, the banned one)
        self.out: list[int] = []
        self.checking = OutputCheck(checks) if checks else None
        self.grammar_from: int | None = None
        self.n_prompt: int | None = None
        self.sent = 0
        # (a cut's first token, whether it starts inside a JSON string, the text from there that may not be written
        # again, its insignificant whitespace left out: checking.squeeze, whether it ends in a number: then only
        # that number is banned, not a longer one it begins)
        self.bans: list[tuple[int, bool, str, bool]] = []
        self.failed: dict[int, int] = {}  # values cut back, by their first token: how often
        self.resampled = 0  # tokens written, then taken back by a cut
        self.cut = False  # the last sample cut the answer back (the decoder's verification stops)

    def draft(self, room: int) -> tuple[list[int], list[float] | None]:
        """Tokens that could be decoded after next_token this step, to be verified, and the chances
        that its first 1, 2, … tokens are kept (drafts.py), or None for a draft model's draft, which
        is used as it is;
        none when drafts are off, nothing matches or there is no room (the batch's, the budget's).
        A model with a draft model drafts with it instead of the text (draft_model.py), except in a
        slot that holds images or audio (the draft model cannot read their cells) and for a request
        with a prediction (the text drafter reads it first); `ngram_draft = 0` turns either off."""
        limit = self.draft_limit
        if not limit or self.next_token is None or not self.drafting:
            return [], None
        try:
            if self.drafter is None:
                history = [*self.slot.cells, self.next_token]
                if self.draft_model is not None and not self.slot.media and self.prediction is None:
                    self.drafter = self.draft_model.drafter(self.slot.seq_id, history)
                else:  # under a grammar (a tool call, JSON) the text may copy the prompt as a JSON string
                    views = [json_view(self.slot.cells, self.model.piece, self._plain)] if self.sampler.constraint else []
                    self.drafter = TextDrafter(history, limit, views, self.prediction)
            return self.drafter.propose(min(room, self.budget - self.generated - 1))
        except Exception:  # noqa: BLE001 - a bug in a drafter costs its answer the drafts, not the answer
            self._drafter_failed()
            return [], None

    def verified(self, drafted: int, kept: int) -> None:
        """The decoder verified `drafted` tokens of the drafter's draft and kept `kept`."""
        if self.drafter is not None:
            try:
                self.drafter.verified(drafted, kept)
            except Exception:  # noqa: BLE001 - (see draft)
                self._drafter_failed()

    def _drafter_failed(self) -> None:
        _log.warning("a drafter failed; this answer goes on without drafts", exc_info=True)
        self.drafting = False
        self._retire_drafter()

    def _retire_drafter(self) -> None:
        """Drop the drafter, its counts kept (a cut starts a new one; a failed one none)."""
        if self.drafter is not None:
            drafter, self.drafter = self.drafter, None
            self.drafts = (self.drafts[0] + drafter.drafted, self.drafts[1] + drafter.kept)

    def allowed(self, draft: list[int]) -> list[int]:
        """The draft up to the first token the grammar forbids (all of it without a grammar)."""
        return draft[:self.sampler.allowed(draft)] if draft and self.sampler.grammar is not None else draft

    def _plain(self, data: bytes) -> list[int]:
        return self.model.tokenize_bytes(data, parse_special=False)

    def sample(self, ctx, idx: int) -> None:
        """Sample from the logits at batch index `idx`; emit its text; finish or queue the token."""
        self.cut = False
        if self.n_prompt is None:
            self.n_prompt = len(self.slot.cells)
        checked = self.checking is not None and self.sampler.grammar is not None and not self.checking.given_up
        if checked and self.grammar_from is None:
            self.grammar_from = len(self.out)
        reject = self._rejects if checked and self.bans else None
        try:
            token = self.sampler.sample(ctx, idx, reject)
        except GrammarDeadEnd:
            if reject is not None:  # every token allowed here writes a banned text: go back further
                return self._dead_end(ctx, idx)
            if not self.sampler.params.ignore_eos:
                raise
            # the grammar is complete: only the end of generation could follow, which ignore_eos bans
            return self._end("stop", flush=True)
        if token in self.stop_tokens or token in self.model.eog:
            if checked and (cut := self.checking.finish()) is not None:  # type: ignore[union-attr]
                if self.checking.starts[cut.token] >= self.sent and self.checking.allow_cut():  # type: ignore[union-attr]
                    return self._cut_back(ctx, cut)
                self._give_up()
            return self._end("stop", flush=True)  # text held back as a possible stop string was text
        if self.logprobs is not None:  # content tokens only, as OpenAI does: not the end-of-turn token
            self._pending_logprobs.append(self._logprob(ctx, idx, token))
        self.generated += 1
        self.out.append(token)
        if self.drafter is not None:
            try:
                self.drafter.push(token)
            except Exception:  # noqa: BLE001 - (see draft)
                self._drafter_failed()
        piece = self.model.piece(token)
        if self.sampler.grammar is None:
            text, stopped = self.stopper.push(self.utf8.push(piece))
        else:  # under a grammar the grammar says where the output ends: a stop string could cut JSON
            text, stopped = self.stopper.flush() + self.utf8.push(piece), False
        if checked:
            assert self.checking is not None
            cut = self.checking.push(text)
            if cut is not None and self.checking.starts[cut.token] >= self.sent and self.checking.allow_cut():
                return self._cut_back(ctx, cut)
            if cut is not None:  # passed on already (no cut was foreseen there), or too many cuts: as written
                self._give_up()
            text = self._release()
        limited = False
        if self.lines is not None:
            text, limited = self.lines.push(text, time.monotonic())
        if text or (self._pending_logprobs and not stopped and not self._holding()):
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

    # -- what the grammar does not hold (checking.py) -----------------------------------------

    def _rejects(self, token: int) -> bool:
        """Whether `token` would write again, from where a cut went back to, a text that broke the
        schema (in any spelling and spacing)."""
        piece = self.model.piece(token).decode("utf-8", errors="ignore")
        for first, inside, text, number in self.bans:
            written = self._written_since(first)
            if written is None:
                continue
            after = squeeze(written + piece, inside)
            if after.startswith(text) and not (number and len(after) > len(text) and after[len(text)] in _NUMBER):
                return True
        return False

    def _written_since(self, first: int) -> str | None:
        """The checked text written from token `first` on (None: that token was taken back)."""
        assert self.checking is not None and self.grammar_from is not None
        at = first - self.grammar_from
        if at > len(self.checking.starts):
            return None
        return self.checking.text[self.checking.starts[at] if at < len(self.checking.starts) else len(self.checking.text):]

    def _dead_end(self, ctx, idx: int) -> None:
        """Every token the grammar allows here completes a banned text: what was written since
        the innermost cut is banned too, and written again from there; with nothing written since,
        the checking gives up and the grammar alone holds."""
        assert self.checking is not None
        active = [(first, inside, squeeze(written, inside)) for first, inside, text, _ in self.bans
                  if (written := self._written_since(first)) is not None and text.startswith(squeeze(written, inside))]
        first, inside, written = max(active)
        if not written or not self.checking.allow_cut():
            self._give_up()
            return self.sample(ctx, idx)
        self.bans.append((first, inside, written, False))
        self._rewind_to(ctx, first)

    def _give_up(self) -> None:
        """Stop checking: what was held goes out as written."""
        assert self.checking is not None
        self.checking.give_up()
        if self.sent < len(self.checking.text):
            held, self.sent = self.checking.text[self.sent:], len(self.checking.text)
            self._text(held)

    def _holding(self) -> bool:
        return self.checking is not None and self.sent < len(self.checking.text)

    def _release(self) -> str:
        """The checked text that no cut can take back now, not passed on before."""
        assert self.checking is not None
        safe = self.checking.safe()
        if safe <= self.sent:
            return ""
        text, self.sent = self.checking.text[self.sent:safe], safe
        return text

    def _cut_back(self, ctx, cut: Cut) -> None:
        """A value broke the schema: go back to the token it began in and sample from there again,
        with its text banned. An array or an object broken again: its last member, then the one
        before it…, is what is written again."""
        assert self.grammar_from is not None and self.checking is not None
        again = self.failed.get(cut.token, 0)
        self.failed[cut.token] = again + 1
        if cut.members and again < len(cut.members):
            cut = cut.members[len(cut.members) - 1 - again]
        at = self.checking.starts[cut.token]
        inside = self.checking.inside_string(at)
        text = self.checking.text[at:cut.end]
        self.bans.append((self.grammar_from + cut.token, inside, squeeze(text, inside), text[-1:] in _NUMBER))
        self._rewind_to(ctx, self.grammar_from + cut.token)

    def _rewind_to(self, ctx, first: int) -> None:
        """Take back the tokens from `first` on: their cells go, and the token before them is
        decoded again for the logits to sample from (the prompt's last, at the very start)."""
        assert self.checking is not None and self.grammar_from is not None and self.n_prompt is not None
        back = len(self.out) - first
        self.resampled += back
        self.generated -= back
        if self.logprobs is not None:
            del self._pending_logprobs[max(0, len(self._pending_logprobs) - back):]
        del self.out[first:]
        self.checking.rewind(first - self.grammar_from)
        self.sent = min(self.sent, len(self.checking.text))
        self.sampler.rewind(self.out[self.grammar_from:])
        self.utf8 = Utf8Stream()
        replay = self.out[-1] if self.out else self.slot.cells[self.n_prompt - 1]
        keep = self.n_prompt + len(self.out) - 1
        C.llama_memory_seq_rm(C.llama_get_memory(ctx), self.slot.seq_id, self.slot.keep(keep), -1)
        self.next_token, self.cut = replay, True
        self._retire_drafter()  # its history holds what was taken back: a new one starts

    def cancel(self) -> None:
        self.finish = "cancelled"
        self.next_token = None

    def _text(self, text: str) -> None:
        self.emit(Text(text, self.index, tuple(self._pending_logprobs), self.generated))
        self._pending_logprobs = []

    def _end(self, reason: str, flush: bool) -> None:
        if self.checking is not None and self.sent < len(self.checking.text):  # held text: the answer ends
            held, self.sent = self.checking.text[self.sent:], len(self.checking.text)
            self._text(held)
        if flush:
            tail = (self.lines.flush() if self.lines else "") + self.stopper.flush() + self.utf8.flush()
            if tail:
                self._text(tail)
        if self._pending_logprobs:
            self._text("")
        self.finish, self.next_token = reason, None

    def done(self, prompt_tokens: int, cached_tokens: int) -> Done:
        drafted, kept = self.drafts
        if self.drafter is not None:
            drafted, kept = drafted + self.drafter.drafted, kept + self.drafter.kept
        unchecked = tuple(self.checking.given_up) if self.checking is not None else ()
        predicted = None
        if self.prediction is not None:
            accepted = in_order(self.prediction, self.out)
            predicted = (accepted, len(self.prediction) - accepted)
        return Done(self.finish or "cancelled", prompt_tokens, self.generated, cached_tokens, self.index,
                    self.stopper.matched, self.why, drafted, kept, self.resampled, unchecked, predicted)

    def _logprob(self, ctx, idx: int, token: int) -> TokenLogprob:
        return token_logprob(self.model, ctx, idx, token, max(self.logprobs or 0, 0))


def in_order(prediction: list[int], answer: list[int]) -> int:
    """How many of the prediction's tokens the answer wrote, in order (OpenAI's
    accepted_prediction_tokens; the rest are rejected): the matching blocks of a diff of the two.
    Once per answer; ~7 ms for a 1,200-token file and its answer here."""
    return sum(block.size for block in SequenceMatcher(None, prediction, answer, autojunk=False).get_matching_blocks())


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
