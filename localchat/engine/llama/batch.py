"""A llama_batch of one sequence a row, written through numpy views of its arrays (setting a row
is no ctypes call per field). The one kind of batch the engine decodes: the step (decoder.py),
the draft model's, the step-cost probe's and the embeddings'."""

from __future__ import annotations

import llama_cpp as C
import numpy as np


class Batch:
    def __init__(self, size: int) -> None:
        self.raw = C.llama_batch_init(size, 0, 1)
        self.token = np.ctypeslib.as_array(self.raw.token, shape=(size,))
        self.pos = np.ctypeslib.as_array(self.raw.pos, shape=(size,))
        self.logits = np.ctypeslib.as_array(self.raw.logits, shape=(size,))
        np.ctypeslib.as_array(self.raw.n_seq_id, shape=(size,))[:] = 1  # one sequence a row, always
        self._seq = [self.raw.seq_id[i] for i in range(size)]

    def set(self, i: int, token: int, pos: int, seq: int, logits: bool) -> None:
        """Row i: `token` at position `pos` of sequence `seq`, its logits kept or not."""
        self.token[i], self.pos[i], self.logits[i] = token, pos, logits
        self._seq[i][0] = seq

    def decode(self, ctx: object, n: int, encode: bool = False) -> int:
        """llama_decode (or llama_encode) of the first n rows: its return code (0: done)."""
        self.raw.n_tokens = n
        return (C.llama_encode if encode else C.llama_decode)(ctx, self.raw)

    def close(self) -> None:
        if self.raw is not None:
            C.llama_batch_free(self.raw)
            self.raw = None
