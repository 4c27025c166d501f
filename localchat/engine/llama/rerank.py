"""Reranking: one relevance score per (query, document) prompt, on a context of its own.

Two ways to score, chosen by the model:
- rank pooling (a GGUF with pooling type 4 and a classifier head, `cls.output`: BGE and Jina
  rerankers, Qwen3-Reranker): the score is the head's first output for the pooled token, as
  llama-server reads it;
- a judge (`rerank = true` in models.toml on a model without a classifier head): the prompt asks
  the model whether the document answers the query, and the score is P(yes) against P(no) for
  the next token, Qwen3-Reranker's own definition, computed from the logits."""

from __future__ import annotations

from typing import Any

import llama_cpp as C
import numpy as np

from ...errors import ModelUnavailable
from .embed import Embedder
from .model import Model

RANK = C.LLAMA_POOLING_TYPE_RANK


class Ranker(Embedder):
    param = "documents"

    def __init__(self, model: Model, *, judge: tuple[int, int] | None = None, n_threads: int | None = None) -> None:
        self.judge = judge  # (yes, no) token ids; None: the GGUF's rank pooling
        self.last_only = judge is not None  # a judge reads each prompt's last logits only
        super().__init__(model, pooling=None if judge else RANK, n_threads=n_threads)
        self.n_vocab = model.n_vocab

    def _configure(self, cparams: Any) -> None:
        if self.judge is not None:  # logits, not pooled embeddings
            cparams.embeddings = False
            cparams.pooling_type = C.LLAMA_POOLING_TYPE_NONE

    def _check(self) -> None:
        if self.judge is None and C.llama_pooling_type(self.ctx) != RANK:
            raise ModelUnavailable("the model has no rank pooling: set `rerank = true` in models.toml")

    def rank(self, inputs: list[list[int]]) -> list[float]:
        return self._all(inputs)

    def _read(self, seq: int, row: int) -> float:
        if self.judge is None:
            return float(C.llama_get_embeddings_seq(self.ctx, seq)[0])
        logits = np.ctypeslib.as_array(C.llama_get_logits_ith(self.ctx, row), shape=(self.n_vocab,))
        yes, no = (float(logits[t]) for t in self.judge)
        return float(1.0 / (1.0 + np.exp(no - yes)))  # softmax over (yes, no), P(yes)
