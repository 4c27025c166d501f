"""Drafts from the text: n-gram lookup (prompt-lookup) speculation.

An edit, a refactor, a file echoed back: much of what a coding model writes is already in its
prompt or its output. When the last NGRAM tokens written occurred before, the tokens that
followed them then are the draft; the scheduler decodes the draft with the next token in the
same batch, and the sequence samples at each drafted position in turn, keeping drafted tokens
while each one is the token it samples. Every token is still sampled from the model's own
distribution given the tokens before it (and through the grammar, if any), so the text is the
text without drafts: greedy token for token, sampled from the same distribution. A rejected
draft costs its share of one batch and its cells are dropped.

The rule for when: a sequence drafts only when the lookup finds a match (chat about new things
rarely does: nothing is drafted, nothing costs), and the draft's length adapts — doubled up to
the request's `ngram_draft` after a fully kept draft, cut to what was kept (at least MIN) after a
partly kept one."""

from __future__ import annotations

NGRAM = 3  # the tokens a lookup matches on
MIN = 2  # the shortest draft; the first draft is START long
START = 4  # (or the request's ngram_draft, when smaller: 3 by default)


class NgramDrafter:
    def __init__(self, history: list[int], limit: int) -> None:
        self.limit, self.k = limit, min(START, limit)
        self.tokens: list[int] = []
        self._index: dict[tuple[int, ...], int] = {}  # n-gram -> the position after its latest occurrence
        self._prev: int | None = None  # the position after the previous occurrence of the last n-gram
        self.drafted = self.kept = 0  # totals, for the log and the bench
        for token in history:
            self.push(token)

    def push(self, token: int) -> None:
        """A token written (a prompt token, or one sampled)."""
        self.tokens.append(token)
        if len(self.tokens) >= NGRAM:
            key = tuple(self.tokens[-NGRAM:])
            self._prev = self._index.get(key)
            self._index[key] = len(self.tokens)

    def propose(self, room: int) -> list[int]:
        """The draft after the last token written: at most min(k, room) tokens, or none."""
        n = min(self.k, room)
        if self._prev is None or n <= 0:
            return []
        return self.tokens[self._prev:self._prev + n]

    def verified(self, drafted: int, kept: int) -> None:
        self.drafted += drafted
        self.kept += kept
        self.k = min(2 * self.k, self.limit) if kept == drafted else max(MIN, min(kept + 1, self.limit))
