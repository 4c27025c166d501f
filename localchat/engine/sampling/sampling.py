"""Choosing the next token: the sampler chain in C, and a grammar that costs little.

Logit bias and repetition penalties are applied here, to the few tokens they touch, with
llama.cpp's arithmetic (its penalties sampler looks up all 262,144 candidates in a hash map:
1.5 ms a token, 7% of a decode step). Greedy decoding without a grammar is then an argmax;
sampling runs llama.cpp's chain (top-k/top-p/min-p, temperature, dist) on the adjusted logits.

Checking a grammar against all 262,144 candidates at every step is what makes constrained
decoding slow. Here the chain runs first and the grammar judges only the candidates it kept;
the whole vocabulary goes through the grammar only when none of those survive. Greedy decoding
keeps the 64 best candidates for the check, so it still returns the best token the grammar
allows."""

from __future__ import annotations

import ctypes
import functools
import random
import re
from collections import deque
from collections.abc import Callable, Sequence

import llama_cpp as C
import numpy as np

from ...errors import EngineError, GrammarDeadEnd
from ..llama.utf8guard import Utf8Guard, Utf8Tables
from ..params import Constraint, SamplingParams

GREEDY_CANDIDATES = 64
WIDE = 1024  # candidates the grammar judges first when none of the chain's picks is allowed
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


class Sampler:
    def __init__(self, params: SamplingParams, vocab, n_vocab: int, constraint: Constraint | None,
                 piece: Callable[[int], bytes], tokenize: Callable[[str], list[int]],
                 utf8: Callable[[], Utf8Tables] | None = None, prompt: Sequence[int] = ()) -> None:
        self.n_vocab, self.vocab = n_vocab, vocab
        self.constraint = constraint
        self.adjust = Adjustments(params, prompt)
        self._prompt = prompt
        self.greedy = params.temperature <= 0
        self.chain = _chain(params, constraint is not None and not (constraint.triggers or constraint.loose))
        self.grammar = self.pick = None
        self._params = self.params = params
        self._piece, self._tokenize = piece, tokenize
        self._recent = ""  # the tail of the free text, watched for a trigger
        self._utf8 = utf8
        self.guard: Utf8Guard | None = None
        self._forced: list[int] = []  # the rest of a trigger, emitted before the grammar starts
        self.buf: np.ndarray | None = None  # the candidates handed to llama.cpp's samplers
        self.cur = None
        self._armed = not (constraint and constraint.after)
        self._own = ""  # the grammar of the loose pattern that matched, if one did
        self._loose = [(re.compile(p), g) for p, g in constraint.loose] if constraint else []
        self._window = max([64 if not self._loose else 256] + [len(t) + 8 for t in (constraint.triggers if constraint
                                                                                     else ())])
        if constraint and not (constraint.triggers or constraint.loose):
            self._start_grammar()

    def _start_grammar(self) -> None:
        assert self.constraint is not None
        grammar = self._own or self.constraint.grammar
        self.grammar = C.llama_sampler_init_grammar(self.vocab, grammar.encode(), b"root")
        if not self.grammar:
            raise EngineError("llama.cpp rejected the grammar")
        if self.constraint.triggers or self.constraint.loose:  # the free chain picked by itself; now truncate only
            C.llama_sampler_free(self.chain)
            self.chain = _chain(self._params, True)
            self.adjust = Adjustments(self._params)  # penalties count from the call's start, not the prose's
        self.pick = C.llama_sampler_init_greedy() if self.greedy else C.llama_sampler_init_dist(_seed(self._params))
        if self._utf8 is not None:
            self.guard = Utf8Guard(self._utf8())

    def rewind(self, written: Sequence[int]) -> None:
        """The grammar's state again as it was after `written` (the tokens written since it
        started): a value the checker refused is written again (checking.py)."""
        assert self.grammar is not None
        C.llama_sampler_free(self.grammar)
        grammar = self._own or self.constraint.grammar
        self.grammar = C.llama_sampler_init_grammar(self.vocab, grammar.encode(), b"root")
        if not self.grammar:
            raise EngineError("llama.cpp rejected the grammar")
        lazy = bool(self.constraint.triggers or self.constraint.loose)
        self.adjust = Adjustments(self._params) if lazy else Adjustments(self._params, self._prompt)
        if self._utf8 is not None:
            self.guard = Utf8Guard(self._utf8())
        for token in written:
            C.llama_sampler_accept(self.grammar, token)
            self.adjust.accept(token)
            if self.guard is not None:
                self.guard.accept(self._piece(token))

    def sample(self, ctx, idx: int = -1, reject: Callable[[int], bool] | None = None) -> int:
        """The next token, from the logits at batch index `idx`; under the grammar, never one
        `reject` refuses (the next best, or another draw, instead: GrammarDeadEnd if none is left)."""
        if self._forced:
            return self._next_forced()
        logits = self.adjust.apply(np.ctypeslib.as_array(C.llama_get_logits_ith(ctx, idx), shape=(self.n_vocab,)))
        if self.grammar is None:
            if self.greedy:
                token = int(np.argmax(logits))  # the first of equal maxima, as llama.cpp's greedy
            else:
                self._load(logits)
                C.llama_sampler_apply(self.chain, ctypes.byref(self.cur))
                token = int(self._kept()[self.cur.selected]["id"])
                C.llama_sampler_accept(self.chain, token)
            self.adjust.accept(token)
            if self.constraint is not None:
                token = self._watch(token)
            return token
        self._load(logits)
        C.llama_sampler_apply(self.chain, ctypes.byref(self.cur))
        C.llama_sampler_apply(self.grammar, ctypes.byref(self.cur))
        if not self._keep_allowed():
            self._grammar_first(logits)
        C.llama_sampler_apply(self.pick, ctypes.byref(self.cur))
        token = int(self._kept()[self.cur.selected]["id"])
        refused: list[int] = []
        while reject is not None and reject(token):
            refused.append(token)
            kept = self._kept()
            left = kept[kept["id"] != token]
            if not len(left):  # every candidate refused: the grammar chooses among the rest of the vocabulary
                logits = logits.copy()  # (a copy: the array may be llama.cpp's own buffer)
                logits[refused] = -np.inf
                self._grammar_first(logits)
            else:
                self.buf[: len(left)] = left
                self.cur.data = self.buf.ctypes.data_as(C.llama_token_data_p)
                self.cur.size, self.cur.selected = len(left), -1
            C.llama_sampler_apply(self.pick, ctypes.byref(self.cur))
            token = int(self._kept()[self.cur.selected]["id"])
        C.llama_sampler_accept(self.grammar, token)
        C.llama_sampler_accept(self.chain, token)
        self.adjust.accept(token)
        if self.guard is not None:
            self.guard.accept(self._piece(token))
        return token

    def allowed(self, tokens: list[int]) -> int:
        """How many of `tokens`, written next in this order, the grammar allows (all of them while
        no grammar holds yet): a copy of the grammar's state judges each in turn."""
        if self.grammar is None or self._forced:
            return len(tokens)
        judge = C.llama_sampler_clone(self.grammar)
        one = np.zeros(1, dtype=_TOKEN_DATA)
        cur = C.llama_token_data_array(one.ctypes.data_as(C.llama_token_data_p), 1, -1, False)
        try:
            for i, token in enumerate(tokens):
                one[0] = (token, 0.0, 0.0)
                cur.size, cur.selected = 1, -1
                C.llama_sampler_apply(judge, ctypes.byref(cur))
                if not np.isfinite(one[0]["logit"]):
                    return i
                C.llama_sampler_accept(judge, token)
            return len(tokens)
        finally:
            C.llama_sampler_free(judge)

    def _watch(self, token: int) -> int:
        """Free text: does this token complete a trigger? If it also runs past the trigger's
        end, emit instead the tokens of its text up to that end, so the grammar starts exactly
        there (llama.cpp's own lazy grammar would be fed the overrun and abort the process)."""
        before = self._recent
        text = before + self._piece(token).decode("utf-8", errors="replace")
        self._recent = text[-self._window:]
        if not self._armed:
            at = text.find(self.constraint.after)
            if at < 0:
                return token
            self._armed = True
            before, text = "", text[at + len(self.constraint.after):]
            self._recent = text
        ends = [at + len(t) for t in self.constraint.triggers
                if (at := text.find(t, max(0, len(before) - len(t) + 1))) >= 0]
        for pattern, grammar in self._loose if not ends else ():
            found = next((m for m in pattern.finditer(text) if m.end() > len(before)), None)
            if found is not None:
                ends, self._own = [found.end()], grammar
                break
        for end in ends[:1]:
            if end == len(text):
                self._start_grammar()
                return token
            self._forced = self._tokenize(text[len(before):end])
            return self._next_forced()
        return token

    def _next_forced(self) -> int:
        token = self._forced.pop(0)
        if not self._forced:
            self._start_grammar()
        return token

    def _grammar_first(self, logits: np.ndarray) -> None:
        """None of the chain's picks is allowed: let the grammar choose first, among the
        WIDE best candidates if any of them is allowed, else among the whole vocabulary."""
        if self.n_vocab > WIDE:  # (the logits carry the bias and penalties already)
            best = np.argpartition(logits, -WIDE)[-WIDE:]
            self._load(logits, best)
            C.llama_sampler_apply(self.grammar, ctypes.byref(self.cur))
            if self._keep_allowed():
                C.llama_sampler_apply(self.chain, ctypes.byref(self.cur))
                return
        self._load(logits)
        C.llama_sampler_apply(self.grammar, ctypes.byref(self.cur))
        if not self._keep_allowed():
            raise GrammarDeadEnd("the grammar allows no token of this model's vocabulary at this point of the "
                                 "output: nothing can be written that follows it")
        C.llama_sampler_apply(self.chain, ctypes.byref(self.cur))

    def _load(self, logits: np.ndarray, subset: np.ndarray | None = None) -> None:
        if self.buf is None:  # made on first use: free greedy decoding never needs it
            self.buf = np.zeros(self.n_vocab, dtype=_TOKEN_DATA)
            self.cur = C.llama_token_data_array(self.buf.ctypes.data_as(C.llama_token_data_p), self.n_vocab, -1, False)
        if subset is not None:
            n = len(subset)
            self.buf["id"][:n] = subset
            self.buf["logit"][:n] = logits[subset]
            self.cur.data = self.buf.ctypes.data_as(C.llama_token_data_p)
            self.cur.size, self.cur.selected, self.cur.sorted = n, -1, False
            return
        self.buf["id"] = _ids(self.n_vocab)
        self.buf["logit"] = logits
        self.cur.data = self.buf.ctypes.data_as(C.llama_token_data_p)
        self.cur.size, self.cur.selected, self.cur.sorted = self.n_vocab, -1, False

    def _keep_allowed(self) -> int:
        """Drop the candidates the grammar rejected (-inf), keeping their order, so the final
        pick never sees them (dist takes the first entry of a sorted array as the maximum)."""
        kept = self._kept()
        ok = np.isfinite(kept["logit"])
        if self.guard is not None:
            ok &= self.guard.allowed(kept["id"])
        allowed = kept[ok]
        self.buf[: len(allowed)] = allowed
        self.cur.data = self.buf.ctypes.data_as(C.llama_token_data_p)
        self.cur.size = len(allowed)
        return len(allowed)

    def _kept(self) -> np.ndarray:
        if ctypes.addressof(self.cur.data.contents) == self.buf.ctypes.data:
            return self.buf[: self.cur.size]
        view = np.ctypeslib.as_array(ctypes.cast(self.cur.data, ctypes.POINTER(ctypes.c_uint8)),
                                     shape=(self.cur.size * _TOKEN_DATA.itemsize,))
        return view.view(_TOKEN_DATA)

    def close(self) -> None:
        """Free the C samplers and the vocabulary-sized buffers (4 MB with a grammar) at once,
        whoever still holds this object."""
        for s in (self.chain, self.grammar, self.pick):
            if s:
                C.llama_sampler_free(s)
        self.chain = self.grammar = self.pick = None
        self.buf = self.cur = self.guard = None


class Adjustments:
    """Logit bias, then repetition/frequency/presence penalties over the last `penalty_last_n`
    tokens of the prompt and what was sampled after it (-1: all of them), in llama.cpp's order
    and float32 arithmetic, applied to a copy of the logits at the tokens they touch. The prompt
    counts as in llama-server (its sampler accepts every prompt token first) and transformers
    (whose repetition_penalty, the one Qwen's generation_config sets, sees the whole input). A
    tool call counts from its own start (the grammar's arguments are not the prose's)."""

    def __init__(self, p: SamplingParams, prompt: Sequence[int] = ()) -> None:
        self.bias_ids = np.fromiter(p.logit_bias, dtype=np.int64, count=len(p.logit_bias))
        self.bias = np.fromiter(p.logit_bias.values(), dtype=np.float32, count=len(p.logit_bias))
        self.repeat = np.float32(p.repeat_penalty)
        self.freq, self.present = np.float32(p.frequency_penalty), np.float32(p.presence_penalty)
        self.last_n = p.penalty_last_n
        self.penalize = self.last_n != 0 and (p.repeat_penalty != 1.0 or p.frequency_penalty != 0.0
                                              or p.presence_penalty != 0.0)
        self.window: deque[int] = deque()
        self.counts: dict[int, int] = {}
        if self.penalize:
            for token in prompt[-self.last_n:] if self.last_n > 0 else prompt:
                self.accept(token)

    def apply(self, logits: np.ndarray) -> np.ndarray:
        """`logits` itself when nothing applies, else an adjusted copy."""
        if not len(self.bias_ids) and not self.counts:
            return logits
        out = logits.copy()
        if len(self.bias_ids):
            out[self.bias_ids] += self.bias
        if self.counts:
            ids = np.fromiter(self.counts, dtype=np.int64, count=len(self.counts))
            count = np.fromiter(self.counts.values(), dtype=np.float32, count=len(self.counts))
            v = out[ids]
            v = np.where(v <= 0, v * self.repeat, v / self.repeat)
            out[ids] = v - (count * self.freq + (count > 0).astype(np.float32) * self.present)
        return out

    def accept(self, token: int) -> None:
        if not self.penalize:
            return
        self.counts[token] = self.counts.get(token, 0) + 1
        self.window.append(token)
        if 0 < self.last_n < len(self.window):
            old = self.window.popleft()
            if self.counts[old] == 1:
                del self.counts[old]
            else:
                self.counts[old] -= 1


@functools.lru_cache(maxsize=4)
def _ids(n_vocab: int) -> np.ndarray:
    ids = np.arange(n_vocab, dtype=np.int32)
    ids.flags.writeable = False
    return ids


def _seed(p: SamplingParams) -> int:
    return random.getrandbits(32) if p.seed is None else p.seed & 0xFFFFFFFF


def _chain(p: SamplingParams, constrained: bool):
    """Truncation and temperature; with no constraint the final pick is part of it too (bias
    and penalties are applied before it, by Adjustments)."""
    chain = C.llama_sampler_chain_init(C.llama_sampler_chain_default_params())

    def add(s) -> None:
        C.llama_sampler_chain_add(chain, s)

    if p.temperature <= 0:
        if constrained:
            add(C.llama_sampler_init_top_k(GREEDY_CANDIDATES))
        else:
            add(C.llama_sampler_init_greedy())
        return chain
    if p.top_k > 0:
        add(C.llama_sampler_init_top_k(p.top_k))
    if p.top_p < 1.0:
        add(C.llama_sampler_init_top_p(p.top_p, 1))
    if p.min_p > 0:
        add(C.llama_sampler_init_min_p(p.min_p, 1))
    add(C.llama_sampler_init_temp(p.temperature))
    if not constrained:
        add(C.llama_sampler_init_dist(_seed(p)))
    return chain
