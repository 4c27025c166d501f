"""Embeddings: a second llama context on the same weights, pooled (one vector per input).

Inputs are packed into as few llama batches as fit (at most `n_seq` sequences and `n_batch`
tokens each); every vector is L2-normalized. Runs beside the generation context: llama.cpp
contexts of one model may decode on different threads."""

from __future__ import annotations

import os
import threading
from typing import Any

import llama_cpp as C
import numpy as np

from ...errors import EngineError, InvalidRequest, ModelUnavailable
from ..params import EMBED_BATCH
from .batch import Batch
from .model import Model


class Embedder:
    param = "input"  # the request field an input error names
    last_only = False  # request outputs for every token (pooling reads them), not just each input's last

    def __init__(self, model: Model, *, n_batch: int = EMBED_BATCH, n_seq: int = 16, pooling: int | None = None,
                 n_threads: int | None = None) -> None:
        cparams = C.llama_context_default_params()
        cparams.embeddings = True
        cparams.pooling_type = C.LLAMA_POOLING_TYPE_UNSPECIFIED if pooling is None else pooling  # the GGUF's
        cparams.n_ctx = cparams.n_batch = cparams.n_ubatch = n_batch  # a non-causal model needs one ubatch
        cparams.n_seq_max = n_seq
        cparams.kv_unified = True
        cparams.n_threads = cparams.n_threads_batch = n_threads or os.cpu_count() or 1
        self._configure(cparams)
        self.ctx = C.llama_init_from_model(model.ptr, cparams)
        if not self.ctx:
            raise ModelUnavailable(f"llama.cpp could not create an embedding context for {model.path}")
        try:
            self._check()
        except ModelUnavailable:
            C.llama_free(self.ctx)
            raise
        self.model, self.n_batch, self.n_seq = model, n_batch, n_seq
        self.n_embd = C.llama_model_n_embd(model.ptr)
        self._encode = C.llama_model_has_encoder(model.ptr) and not C.llama_model_has_decoder(model.ptr)
        self._mem = C.llama_get_memory(self.ctx)
        self._batch = Batch(n_batch)
        self._lock = threading.Lock()

    def _configure(self, cparams: Any) -> None:
        """A subclass's changes to the context's parameters."""

    def _check(self) -> None:
        if C.llama_pooling_type(self.ctx) == C.LLAMA_POOLING_TYPE_NONE:
            raise ModelUnavailable("the model declares no pooling: set `embedding = true` in models.toml")

    def embed(self, inputs: list[list[int]]) -> list[list[float]]:
        return self._all(inputs)

    def _all(self, inputs: list[list[int]]) -> list[Any]:
        """One result per input, in as few decodes as fit."""
        for i, tokens in enumerate(inputs):
            if not tokens:
                raise InvalidRequest(f"{self.param}[{i}] is empty", param=f"{self.param}.{i}")
            if len(tokens) > self.n_batch:
                raise InvalidRequest(f"{self.param}[{i}] is {len(tokens)} tokens; this model takes at most "
                                     f"{self.n_batch}", param=f"{self.param}.{i}")
        out: list[Any] = []
        with self._lock:
            group: list[list[int]] = []
            for tokens in inputs:
                if group and (len(group) == self.n_seq or sum(map(len, group)) + len(tokens) > self.n_batch):
                    out += self._run(group)
                    group = []
                group.append(tokens)
            if group:
                out += self._run(group)
        return out

    def _run(self, group: list[list[int]]) -> list[Any]:
        C.llama_memory_clear(self._mem, True)
        n, last = 0, []
        for seq, tokens in enumerate(group):
            for pos, token in enumerate(tokens):
                self._batch.set(n, token, pos, seq, not self.last_only or pos == len(tokens) - 1)
                n += 1
            last.append(n - 1)
        rc = self._batch.decode(self.ctx, n, encode=self._encode)
        if rc != 0:
            raise EngineError(f"llama.cpp could not embed ({'llama_encode' if self._encode else 'llama_decode'} "
                              f"returned {rc})")
        return [self._read(seq, row) for seq, row in enumerate(last)]

    def _read(self, seq: int, row: int) -> Any:
        """The result for sequence `seq`, whose last token is row `row` of the batch."""
        ptr = C.llama_get_embeddings_seq(self.ctx, seq)
        v = np.ctypeslib.as_array(ptr, shape=(self.n_embd,)).astype(np.float64)
        norm = np.linalg.norm(v)
        return (v / norm if norm > 0 else v).tolist()

    def close(self) -> None:
        self._batch.close()
        C.llama_free(self.ctx)
