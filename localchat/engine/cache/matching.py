"""How a cached prompt serves a new one: the tokens they share (`common_prefix`), and the
stretches of it met again after a span that differs (`shifted_matches`: a renamed folder, a date,
a moved block). Tokens in, positions out: how much a slot would serve is the prefix cache's
(`reuse`, prefix_cache.py), which moves the cells."""

from __future__ import annotations

import os
from collections import Counter
from difflib import SequenceMatcher

SHIFT_SPAN = 512  # tokens that may differ between a cached prompt and a new one (each side) for a shifted reuse
SHIFT_KEY = 16  # tokens that must match right after the span for it to be found
SHIFT_MIN = 256  # cached tokens after the span worth moving rather than reading again
SHIFT_EDIT = 16  # tokens an edit may hold on each side for the cells after it to move: a path, a date, a name
SHIFT_SAME = 4  # tokens two spans must share in a stretch for it to part two edits (small_edits)
SHIFT_EDGE = 2  # tokens at each end of a moved block that may be tokenized otherwise at its new place
# Tokens at the start of each stretch read again with the new span, not moved: they attend to the span most. Seed 44
# sequence 153 of scripts/cachecheck (a folder renamed in three places, the 0.5B): the answer's second token moved
# 0.27 in probability from a cold read's with every cell after the spans moved, 0.099 with 16 read again, 0.085 with 64.
SHIFT_FRESH = 16


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


def moved_stretches(hits: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """The stretches a shifted reuse moves (shifted_matches' meetings, in order): each but its first
    SHIFT_FRESH tokens, which are read with the new span before them (a stretch no longer than
    that is read whole, with the span before it)."""
    out, carry = [], 0
    for at, span, length in hits:
        if length > SHIFT_FRESH:
            out.append((at + SHIFT_FRESH, carry + span + SHIFT_FRESH, length - SHIFT_FRESH))
            carry = 0
        else:
            carry += span + length
    return out


def common_prefix(a: list[int], b: list[int]) -> int:
    return len(os.path.commonprefix([a, b]))
