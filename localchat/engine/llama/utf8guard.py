"""Keeping constrained output valid UTF-8.

llama.cpp's grammar reads a byte sequence that is not valid UTF-8 (a surrogate, an overlong
form, a code point past U+10FFFF) as one character, while the text we return replaces every
bad byte with U+FFFD: a string the grammar kept within maxLength could come out longer. So
under a grammar only tokens that keep the bytes valid UTF-8 may be chosen, judged with tables
built once per model."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# Allowed range of the first continuation byte after each lead byte (RFC 3629).
_FIRST_CONTINUATION = {0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F), 0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}


class Utf8Tables:
    def __init__(self, n_vocab: int, piece: Callable[[int], bytes]) -> None:
        pieces = [piece(t) for t in range(n_vocab)]
        single = np.array([p[0] if len(p) == 1 else 0 for p in pieces], dtype=np.int32)
        self.whole = np.array([_valid(p) for p in pieces])  # complete characters only (or nothing)
        self.lead = (single >= 0xC2) & (single <= 0xF4)
        self.byte = single  # the byte of a one-byte token, else 0


def _valid(piece: bytes) -> bool:
    try:
        piece.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


class Utf8Guard:
    def __init__(self, tables: Utf8Tables) -> None:
        self.t = tables
        self.need = 0  # continuation bytes still expected
        self.low, self.high = 0x80, 0xBF

    def allowed(self, ids: np.ndarray) -> np.ndarray:
        if self.need == 0:
            return self.t.whole[ids] | self.t.lead[ids]
        b = self.t.byte[ids]
        return (b >= self.low) & (b <= self.high)

    def accept(self, piece: bytes) -> None:
        for b in piece:
            if self.need:
                self.need -= 1
                self.low, self.high = 0x80, 0xBF
            elif b >= 0xC2:
                self.need = 1 if b < 0xE0 else 2 if b < 0xF0 else 3
                self.low, self.high = _FIRST_CONTINUATION.get(b, (0x80, 0xBF))
