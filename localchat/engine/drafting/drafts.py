"""Drafts from the text: the tokens a sequence will likely write next, read from what it has read
and written (prompt-lookup speculation), as long as the text allows.

An edit, a refactor, a patch, a file echoed back: much of what a coding model writes is already in
its prompt or its answer. The drafter keeps the sequence aligned with earlier text: when the last
tokens written occurred before, what followed them there is the draft, and as long as the tokens
written keep following that text the alignment moves along with them (nothing is looked up). When
they part, the next lookup finds the occurrence of the last NGRAM tokens that matches the longest
run of tokens before them (the longest match wins; among equals, the prediction's, then the
latest) — except that, just after a copy parted from its source, an occurrence that meets that
source again within MAX_SUB tokens wins (an edit goes on where it was). One index per sequence
(n-gram -> the positions after its latest occurrences), kept up to date per token: a lookup reads
a few candidates, never the whole text.

Rewrites: when the text parts from its source at X and meets it again just after X, having written
Y instead (`settings` -> `config`, `_find_longest_prefix_key` -> `_longest_prefix`; Y may be empty:
a deleted line), X -> Y is learned, and later drafts write Y where the source has X, so a rename
does not end every draft that crosses it. Where the model keeps X after all, the rewrite is not
used after that token again; after MAX_REFUSED such tokens, not at all. Under a grammar the prompt
is also read as a JSON string writes it (json_view), so a tool call's arguments copying a file
read earlier copy it with its newlines as `\\n`.

A prediction (OpenAI's Predicted Outputs: the text the client expects back, the file being edited)
is the first source: read before the other texts, the answer aligned with its start when they
begin alike, and of occurrences that match as long a lookup takes the prediction's (one elsewhere
that matches longer still wins: the answer repeating an edit it made earlier, where the prediction
has the old text).

How long a draft is, and whether there is one, is not decided here: `survival` says how likely
the draft's first tokens are to be kept — how often the alignment foresaw the next token lately,
drafted or not, counted by how long it had matched — and the scheduler's cost model
(draft_cost.py) picks the length that gives the most tokens per second for what a step costs on
this machine. Every token is still sampled from the model's own distribution given the tokens
before it (and through the grammar, if any), so the text is the text without drafts: greedy token
for token (up to a near-tie that another batch size breaks the other way), sampled from the same
distribution."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Protocol

NGRAM = 3  # the tokens a lookup matches on (the index's key)
CANDIDATES = 16  # the latest occurrences of an n-gram a lookup compares
MAX_MATCH = 64  # a match is not compared further back than this
MAX_SUB = 12  # the longest X and Y of a learned substitution, in tokens
SETTLED = 8  # an alignment this long is a copy: where it parts is where the next rewrite starts
BUCKETS = (3, 4, 6, 8, 12, 16, 24, 32, 48)  # the match lengths the foresight is counted by (at least each)
PRIOR = 2.0  # how many tokens' worth of evidence the prior (survival's) weighs
DECAY = 0.995  # the weight of a count one foreseen token later
MAX_REFUSED = 3  # a substitution refused after this many different tokens is forgotten


class Drafter(Protocol):
    """What a sequence drafts with, the one interface of both kinds: TextDrafter (drafts from the
    text, below) and draft_model.ModelDrafter (a draft model's). The scheduler's decoder asks for a
    draft each step (`propose`), verifies it in the same batch, and says how much was kept."""

    drafted: int  # totals, for the log and the bench
    kept: int

    def push(self, token: int) -> None:
        """The sequence wrote `token`."""

    def propose(self, room: int) -> tuple[list[int], list[float] | None]:
        """At most `room` tokens that could follow, and the chances that its first 1, 2, … are all
        kept (the cost model then picks how many pay), or None: use them as they are."""

    def verified(self, drafted: int, kept: int) -> None:
        """Of the `drafted` tokens of the last draft, the model kept the first `kept`."""


class Sub:
    """Write Y where the source has X, except after a token the model kept X after."""

    __slots__ = ("x", "y", "refused")

    def __init__(self, x: tuple[int, ...], y: tuple[int, ...]) -> None:
        self.x, self.y, self.refused = x, y, set()


class TextDrafter:
    """`history`: the tokens read and written so far (the prompt, then the answer's first token);
    `views`: other texts drafts may copy from (json_view: the prompt as a JSON string writes it),
    read as if they came first; `prediction`: the text the answer is expected to be, read first."""

    def __init__(self, history: list[int], limit: int, views: Iterable[list[int]] = (),
                 prediction: list[int] | None = None) -> None:
        self.limit = limit  # the longest draft (the request's ngram_draft)
        self.tokens: list[int] = []
        self._index: dict[tuple[int, ...], list[int]] = {}  # n-gram -> positions after its latest occurrences
        self._src: int | None = None  # aligned: tokens[_src] is what the source wrote next
        self._ahead: list[int] = []  # the rest of a substitution's Y, to be written before tokens[_src]
        self.match = 0  # how many tokens the alignment has matched so far
        self._broke: tuple[int, int] | None = None  # where the text last parted: (source position, text position)
        self._subs: dict[int, list[Sub]] = {}  # X[0] -> the substitutions learned
        self._used: dict[int, tuple[Sub, int]] = {}  # the last draft's substitutions: index -> (it, source position)
        self._right = [0.0] * len(BUCKETS)  # the alignment foresaw the next token, by match length (decayed)
        self._wrong = [0.0] * len(BUCKETS)
        self.drafted = self.kept = 0  # totals, for the log and the bench
        self.longest = 0  # the most drafted tokens kept in one step
        self._predicted = (0, len(prediction or ()))  # where the prediction sits in the text
        for view in [prediction or [], *views]:
            for token in view:
                self.push(token)
        for token in history:
            self.push(token)
        if prediction and history and prediction[0] == history[-1]:  # the answer begins as predicted
            self._src, self.match = 1, 1

    # -- the text ------------------------------------------------------------------------------

    def push(self, token: int) -> None:
        """A token written (a prompt token, or one sampled): the alignment moves on or breaks."""
        n = len(self.tokens)
        if self._src is not None:
            bucket = _bucket(self.match)
            if self._follow(token, n):
                self._count(bucket, right=True)
            else:
                self._count(bucket, right=False)
                self._part(n)
        self.tokens.append(token)
        if n + 1 >= NGRAM:
            places = self._index.setdefault(tuple(self.tokens[-NGRAM:]), [])
            places.append(n + 1)
            if len(places) > CANDIDATES:
                del places[0]

    def _follow(self, token: int, n: int) -> bool:
        """Move the alignment on by `token` if it is what the source (rewritten) has next."""
        if self._ahead:
            if token != self._ahead[0]:
                return False
            self._ahead.pop(0)
        else:
            expected, after, ahead, used = self._emit(self._src, self.tokens)
            if token == expected:
                self._src, self._ahead = after, ahead
            elif self._src < n and token == self.tokens[self._src]:
                if used is not None:  # the model kept X where the substitution said Y
                    self._refuse(*used, self.tokens)
                self._src += 1
            else:
                return False
        self.match += 1
        return True

    def _emit(self, at: int, text) -> tuple[int | None, int, list[int], tuple[Sub, int] | None]:
        """The source's next token from `at`, rewritten: (the token, the source position after it,
        the rest of a substitution's Y to write after it, the substitution that applied and where)."""
        used = None
        while at < len(text):
            sub = self._sub_at(at, text)
            if sub is None:
                return text[at], at + 1, [], used
            used = used or (sub, at)
            if sub.y:
                return sub.y[0], at + len(sub.x), list(sub.y[1:]), used
            at += len(sub.x)  # X deleted: what follows it comes next
        return None, at, [], used

    def _count(self, bucket: int, right: bool) -> None:
        for counts in (self._right, self._wrong):
            counts[bucket] *= DECAY
        (self._right if right else self._wrong)[bucket] += 1.0

    def _part(self, at: int) -> None:
        # where a copy parted from its source (not a passing match since: the rename's new name may
        # occur elsewhere, in the request that asked for it), for the lookup that meets it again
        if not self._ahead and (self._broke is None or self.match >= SETTLED):
            self._broke = (self._src, at)
        self._src, self._ahead, self.match = None, [], 0

    def _lookup(self) -> None:
        """Align with the earlier occurrence of the last NGRAM tokens that matches the most tokens
        back (at most MAX_MATCH), or, if the text has just parted from its source, with the one that
        meets that source again within MAX_SUB tokens of where they parted (an edit goes on where it
        was: a rename, an escape), learning the substitution; of equals, the prediction's, else the
        latest."""
        tokens, n = self.tokens, len(self.tokens)
        if n < NGRAM:
            return
        broke, (lo, hi) = self._broke, self._predicted
        best, best_key = None, (False, 0, False)
        for p in reversed(self._index.get(tuple(tokens[-NGRAM:]), ())):
            if p >= n:
                continue  # the last n-gram itself
            m = NGRAM
            while m < MAX_MATCH and m < p and tokens[p - 1 - m] == tokens[n - 1 - m]:
                m += 1
            near = broke is not None and broke[0] < p - m <= broke[0] + MAX_SUB and broke[1] <= n - m
            if (near, m, lo < p < hi) > best_key:
                best, best_key = p, (near, m, lo < p < hi)
        if broke is not None and n - broke[1] > MAX_SUB + MAX_MATCH:
            self._broke = None  # too long ago
        if best is None:
            return
        near, m, _ = best_key
        if near:
            x, y = tokens[broke[0]:best - m], tokens[broke[1]:n - m]
            if len(y) <= MAX_SUB and x != y:
                self._learn(tuple(x), tuple(y), tokens[broke[0] - 1] if broke[0] > 0 else None)
            self._broke = None
        self._src, self.match = best, m

    # -- substitutions -------------------------------------------------------------------------

    def _learn(self, x: tuple[int, ...], y: tuple[int, ...], after: int | None) -> None:
        subs = self._subs.setdefault(x[0], [])
        known = next((sub for sub in subs if sub.x == x), None)
        if known is None or known.y != y:
            if known is not None:
                subs.remove(known)
            known = Sub(x, y)
            subs.insert(0, known)
        known.refused.discard(after)

    def _refuse(self, sub: Sub, at: int, text) -> None:
        """The model kept X at `at`: not after this token again; forgotten after MAX_REFUSED such."""
        sub.refused.add(text[at - 1] if at > 0 else None)
        subs = self._subs.get(sub.x[0], [])
        if len(sub.refused) >= MAX_REFUSED and sub in subs:
            subs.remove(sub)

    def _sub_at(self, at: int, text) -> Sub | None:
        if at >= len(text):
            return None
        for sub in self._subs.get(text[at], ()):
            x = sub.x
            if at + len(x) <= len(text) and all(text[at + i] == t for i, t in enumerate(x)) \
                    and (text[at - 1] if at > 0 else None) not in sub.refused:
                return sub
        return None

    # -- drafts --------------------------------------------------------------------------------

    def available(self, room: int) -> list[int]:
        """The draft after the last token written, up to min(limit, room) tokens: what followed the
        aligned earlier text (substitutions applied), or nothing when no earlier text matches."""
        n = min(self.limit, room)
        self._used = {}
        if n <= 0:
            return []
        if self._src is None:
            self._lookup()
            if self._src is None:
                return []
        draft = list(self._ahead[:n])
        tokens, at = self.tokens, self._src
        lo, hi = self._predicted
        end = hi if lo <= at < hi else None  # a draft from the prediction ends where it ends
        while len(draft) < n and (end is None or at < end):
            # the source may be the text just written (a repeat): then it goes on with the draft itself
            token, at, ahead, used = self._emit(at, tokens if at < len(tokens) else _Joined(tokens, draft))
            if token is None:
                break
            if used is not None:
                self._used[len(draft)] = used
            draft.append(token)
            draft.extend(ahead)
        return draft[:n]

    def propose(self, room: int) -> tuple[list[int], list[float]]:
        tokens = self.available(room)
        return tokens, self.survival(len(tokens))

    def survival(self, n: int) -> list[float]:
        """The chances that the first 1, 2, … n tokens of the draft are all kept: along the draft the
        match grows, and each token is kept as often as the alignment foresaw the next token lately
        at that match length (while there is little to go by there: as often as at any length, at most
        as often as a match that long is a copy by the prior 1 - 1 / (length + 1)) — but never more
        often than Laplace's rule of succession allows after `match` tokens foreseen in a row,
        (match + 1) / (match + 2). What the counts saw lately is mostly long copies passing through
        short matches; an alignment just found after the text parted from its source is not one
        yet, and a long draft on it is lost whole."""
        right, wrong = sum(self._right), sum(self._wrong)
        seen = (right + 1.0) / (right + wrong + 2.0)  # at any length
        rates = [(self._right[b] + PRIOR * min(seen, 1.0 - 1.0 / (BUCKETS[b] + 1))) / (self._right[b] + self._wrong[b] + PRIOR)
                 for b in range(len(BUCKETS))]
        out, alive, match = [], 1.0, self.match + len(self._ahead)
        for _ in range(n):
            alive *= min(rates[_bucket(match)], (match + 1) / (match + 2))
            out.append(alive)
            match += 1
        return out

    def verified(self, drafted: int, kept: int) -> None:
        self.drafted += drafted
        self.kept += kept
        self.longest = max(self.longest, kept)
        if kept < drafted and kept in self._used:  # refused where a substitution was drafted
            self._refuse(*self._used[kept], self.tokens)
        self._used = {}


def json_view(tokens: list[int], piece: Callable[[int], bytes], tokenize: Callable[[bytes], list[int]]) -> list[int]:
    """The text of `tokens` as the content of a JSON string writes it (newlines as \\n, quotes as \\"),
    tokenized: where a tool call's arguments copy a file read earlier (Claude Code's Write, Codex's
    apply_patch), they copy it in this form."""
    text = b"".join(piece(t) for t in tokens).decode("utf-8", "replace")
    return tokenize(json.dumps(text, ensure_ascii=False)[1:-1].encode())


def _bucket(match: int) -> int:
    b = 0
    while b + 1 < len(BUCKETS) and match >= BUCKETS[b + 1]:
        b += 1
    return b


class _Joined:
    """The text and a draft after it, read as one sequence without copying the text."""

    def __init__(self, text: list[int], draft: list[int]) -> None:
        self.text, self.draft = text, draft

    def __len__(self) -> int:
        return len(self.text) + len(self.draft)

    def __getitem__(self, i: int) -> int:
        return self.text[i] if i < len(self.text) else self.draft[i - len(self.text)]
