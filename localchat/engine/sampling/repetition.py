"""Loop detection: a generation that has started repeating itself is ended soon after.

The rule, on the generated token ids only (never the prompt): the generation ends when its
last L tokens are periodic — token i equals token i - p for every i in that tail — for some
period p of 1 to MAX_PERIOD tokens, with L at least `min_span` tokens (the `repetition_stop`
sampling field, default 256; 0: off) and at least REPEATS whole periods. So "ab ab ab …" ends
after `min_span` tokens, a 100-token paragraph written again and again after three copies of it.

What does not trip it: anything that changes inside the span. Numbered or counted lists, tables
whose rows differ, code whose repeated lines differ in a name or a number: one differing token
restarts the count for every period it breaks. Measured with Qwen2.5's tokenizer: the numbers
1 to 300, 60 asserts, 50 list items, JSON objects or table rows that differ in a cell span at
most 6 periodic tokens. Identical content longer than the span does trip it: an 8 × 8 matrix of
zeros is a 200-token span (passes), 16 × 16 one of 784 (trips), as does "say hello 200 times" or
a repetitive file echoed back whole: set `repetition_stop` higher, or 0, for such a request or
model.

Per token the cost is a few array operations over MAX_PERIOD integers (the run of matches at
every period, kept up to date), not a search over the text."""

from __future__ import annotations

import numpy as np

MAX_PERIOD = 256  # the longest repeated unit looked for, in tokens
REPEATS = 3  # the periodic tail holds at least this many whole periods


class LoopDetector:
    """Fed one generated token at a time; `push` says when the tail has become a loop."""

    def __init__(self, min_span: int, max_period: int = MAX_PERIOD, repeats: int = REPEATS) -> None:
        self.size = max(1, max_period)
        periods = np.arange(1, self.size + 1, dtype=np.int64)
        # per period p, the matches that trip: a tail of `runs + p` tokens is p-periodic
        self._enough = np.maximum(min_span, repeats * periods) - periods
        # the last `size` tokens, twice over, so that the newest first is one reversed view
        self._recent = np.full(2 * self.size, -1, dtype=np.int64)
        self._runs = np.zeros(self.size, dtype=np.int64)  # per period p: the latest tokens equal to the one p back
        self.count = 0

    def push(self, token: int) -> bool:
        """Add the next generated token; True once the tail is a loop by the rule above."""
        at = self.count % self.size
        back = self._recent[at: at + self.size][::-1]  # the tokens 1, 2, … size back (-1: none yet)
        self._runs += 1
        self._runs *= back == token
        self._recent[at] = self._recent[at + self.size] = token
        self.count += 1
        return bool((self._runs >= self._enough).any())

    @property
    def period(self) -> int | None:
        """The shortest period of the loop found (for tests), None if none."""
        hits = np.flatnonzero(self._runs >= self._enough)
        return int(hits[0]) + 1 if hits.size else None


def detector(min_span: int) -> LoopDetector | None:
    """A detector for a request's `repetition_stop` (None when it is 0: off)."""
    return LoopDetector(min_span) if min_span > 0 else None
