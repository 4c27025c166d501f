"""The engine: one llama.cpp context, tokens in, text events out. The only module that
imports llama_cpp; its errors never leave this file untranslated."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import llama_cpp as C

from ..errors import ContextOverflow, EngineError, ModelUnavailable
from .params import Constraint, Done, Event, SamplingParams, Text
from .sampling import Sampler
from .utf8guard import Utf8Tables
from .text import StopMatcher, Utf8Stream

_backend_ready = False
_log = logging.getLogger("localchat.llama")


@C.llama_log_callback
def _llama_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    if level >= 4:  # GGML_LOG_LEVEL_ERROR; the rest is llama.cpp's chatter
        _log.error(text.decode(errors="replace").rstrip())


C.llama_log_set(_llama_log, ctypes.c_void_p(0))


@C.llama_progress_callback
def _quiet_progress(_progress: float, _user_data: ctypes.c_void_p) -> bool:
    return True  # keep loading; without a callback llama.cpp prints dots to stderr


class Cancelled(Exception):
    pass


class Engine:
    """Owns a model and its context. All decoding happens on one worker thread, one request at
    a time; the KV cache of the previous request is kept and its longest common prefix reused."""

    def __init__(self, path: Path, *, n_ctx: int, n_threads: int | None = None, n_gpu_layers: int = 0,
                 n_batch: int = 512, extra_buffers: bool = False) -> None:
        global _backend_ready
        if not _backend_ready:
            C.llama_backend_init()
            _backend_ready = True
        mparams = C.llama_model_default_params()
        mparams.n_gpu_layers = n_gpu_layers
        # Weight-repacking buffers: off by default, since ggml's AMX kernels crash on some
        # virtual machines whose CPU reports AMX (seen on the development machines).
        mparams.use_extra_bufts = extra_buffers
        mparams.progress_callback = _quiet_progress
        self._model = C.llama_model_load_from_file(str(path).encode(), mparams)
        if not self._model:
            raise ModelUnavailable(f"llama.cpp could not load {path}: is it a complete GGUF file?")
        self._vocab = C.llama_model_get_vocab(self._model)
        cparams = C.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = cparams.n_ubatch = n_batch
        cparams.n_threads = cparams.n_threads_batch = n_threads or os.cpu_count() or 1
        cparams.swa_full = True  # keep sliding-window layers whole, so a cached prefix stays reusable
        self._ctx = C.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            C.llama_model_free(self._model)
            raise ModelUnavailable(f"llama.cpp could not create a {n_ctx}-token context for {path}")
        self._mem = C.llama_get_memory(self._ctx)
        self.n_ctx = C.llama_n_ctx(self._ctx)
        self.n_vocab = C.llama_vocab_n_tokens(self._vocab)
        self._n_batch = n_batch
        self._bos = C.llama_vocab_bos(self._vocab)
        self._add_bos = C.llama_vocab_get_add_bos(self._vocab)
        self._pieces: dict[int, bytes] = {}
        self.visible: set[int] = set()
        self._utf8: Utf8Tables | None = None
        self._eog = frozenset(t for t in range(self.n_vocab) if C.llama_vocab_is_eog(self._vocab, t))
        self._cached: list[int] = []  # the tokens whose K/V are in the context, in order
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="localchat-engine")
        self._lock = asyncio.Lock()

    # -- text <-> tokens -------------------------------------------------------------------

    def tokenize(self, segments: Iterable[tuple[str, bool]]) -> list[int]:
        """Tokenize (text, is_plain) segments; control tokens are parsed only where is_plain is False."""
        tokens: list[int] = []
        for text, plain in segments:
            # "replace": a JSON body may carry lone surrogates (\ud800), which UTF-8 cannot hold
            tokens += self._tokenize(text.encode("utf-8", "replace"), parse_special=not plain)
        if self._add_bos and self._bos >= 0 and tokens[:1] != [self._bos]:
            tokens.insert(0, self._bos)
        return tokens

    def _tokenize(self, data: bytes, parse_special: bool) -> list[int]:
        cap = len(data) + 8
        buf = (C.llama_token * cap)()
        n = C.llama_tokenize(self._vocab, data, len(data), buf, cap, False, parse_special)
        if n < 0:
            cap = -n
            buf = (C.llama_token * cap)()
            n = C.llama_tokenize(self._vocab, data, len(data), buf, cap, False, parse_special)
        return list(buf[:n])

    def token_id(self, text: str) -> int | None:
        """The id of a control token given by its text, or None if the vocabulary lacks it."""
        ids = self._tokenize(text.encode(), parse_special=True)
        return ids[0] if len(ids) == 1 else None

    def piece(self, token: int) -> bytes:
        """A token's text. Control tokens are empty, except those named in `visible`
        (a family's tool-call marker such as Mistral's [TOOL_CALLS])."""
        cached = self._pieces.get(token)
        if cached is None:
            special = token in self.visible
            buf = ctypes.create_string_buffer(64)
            n = C.llama_token_to_piece(self._vocab, token, buf, 64, 0, special)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = C.llama_token_to_piece(self._vocab, token, buf, -n, 0, special)
            cached = self._pieces[token] = buf.raw[:n]
        return cached

    def _utf8_tables(self) -> Utf8Tables:
        if self._utf8 is None:  # built on the first constrained request (0.4 s for 262k tokens)
            self._utf8 = Utf8Tables(self.n_vocab, self.piece)
        return self._utf8

    def show_tokens(self, texts: Iterable[str]) -> None:
        """Let these control tokens appear in the output text (see `piece`)."""
        for text in texts:
            token = self.token_id(text)
            if token is not None and token not in self.visible:
                self.visible.add(token)
                self._pieces.pop(token, None)

    def check_fits(self, tokens: list[int]) -> None:
        """A prompt must leave room for at least one generated token."""
        if len(tokens) >= self.n_ctx:
            raise ContextOverflow(
                f"the prompt is {len(tokens)} tokens but the model's context holds {self.n_ctx}; "
                "shorten the conversation or raise context_length in models.toml", param="messages")

    # -- generation ------------------------------------------------------------------------

    async def generate(self, tokens: list[int], params: SamplingParams, stop_tokens: frozenset[int] = frozenset(),
                       constraint: Constraint | None = None) -> AsyncIterator[Event]:
        """Stream events for one completion. Closing the iterator (or cancelling its task)
        stops decoding within one token; a request still waiting for the engine never starts."""
        self.check_fits(tokens)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Event | BaseException | None] = asyncio.Queue()
        cancel = threading.Event()

        def emit(item: Event | BaseException | None) -> None:
            if not loop.is_closed():
                loop.call_soon_threadsafe(queue.put_nowait, item)

        try:
            async with self._lock:
                loop.run_in_executor(self._executor, self._run, tokens, params, stop_tokens, constraint, emit, cancel)
                while (item := await queue.get()) is not None:
                    if isinstance(item, BaseException):
                        raise item
                    yield item
        finally:
            cancel.set()

    def _run(self, tokens: list[int], params: SamplingParams, stop_tokens: frozenset[int],
             constraint: Constraint | None, emit: Callable[[Event | BaseException | None], None],
             cancel: threading.Event) -> None:
        try:
            if not cancel.is_set():
                emit(self._complete(tokens, params, stop_tokens, constraint, emit, cancel))
        except Cancelled:
            pass
        except Exception as exc:  # noqa: BLE001 - translated here, at the engine boundary
            self._reset()
            emit(exc if isinstance(exc, EngineError) else EngineError(f"llama.cpp failed: {exc}"))
        finally:
            emit(None)

    def _complete(self, tokens: list[int], params: SamplingParams, stop_tokens: frozenset[int],
                  constraint: Constraint | None, emit: Callable[[Event], None], cancel: threading.Event) -> Done:
        cached = self._prefill(tokens, cancel)
        if params.ignore_eos:  # as llama.cpp does it: end-of-generation tokens are never sampled
            banned = dict.fromkeys(self._eog | stop_tokens, float("-inf"))
            params = replace(params, logit_bias={**params.logit_bias, **banned})
        sampler = Sampler(params, self._vocab, self.n_vocab, constraint, self.piece,
                          lambda text: self._tokenize(text.encode(), parse_special=True), self._utf8_tables)
        utf8, stopper = Utf8Stream(), StopMatcher(list(params.stop))
        budget = self.n_ctx - len(tokens)
        if params.max_tokens is not None:
            budget = min(budget, params.max_tokens)
        finish, generated = "length", 0
        try:
            while generated < budget:
                if cancel.is_set():
                    finish = "cancelled"
                    break
                token = sampler.sample(self._ctx)
                if token in stop_tokens or C.llama_vocab_is_eog(self._vocab, token):
                    finish = "stop"
                    break
                generated += 1
                if sampler.grammar is None:
                    text, stopped = stopper.push(utf8.push(self.piece(token)))
                else:  # under a grammar the grammar says where the output ends: a stop string
                    text, stopped = stopper.flush() + utf8.push(self.piece(token)), False  # could cut JSON
                if text:
                    emit(Text(text))
                if stopped:
                    finish = "stop"
                    break
                if generated < budget:
                    self._decode([token])
        finally:
            sampler.close()
        if finish != "stop":
            tail = stopper.flush() + utf8.flush()
            if tail:
                emit(Text(tail))
        return Done(finish, len(tokens), generated, cached)

    def _prefill(self, tokens: list[int], cancel: threading.Event) -> int:
        """Bring the context to hold `tokens`, reusing the longest common prefix. Returns its length."""
        n = 0
        for a, b in zip(self._cached, tokens):
            if a != b:
                break
            n += 1
        n = min(n, len(tokens) - 1)  # the last prompt token is always decoded: its logits start the answer
        if n < len(self._cached):
            if not C.llama_memory_seq_rm(self._mem, -1, n, -1):
                C.llama_memory_clear(self._mem, True)
                n = 0
            del self._cached[n:]
        for start in range(n, len(tokens), self._n_batch):
            if cancel.is_set():
                raise Cancelled
            self._decode(tokens[start:start + self._n_batch])
        return n

    def _decode(self, tokens: list[int]) -> None:
        arr = (C.llama_token * len(tokens))(*tokens)
        rc = C.llama_decode(self._ctx, C.llama_batch_get_one(arr, len(tokens)))
        if rc != 0:
            raise EngineError(f"llama_decode returned {rc}")
        self._cached += tokens

    def _reset(self) -> None:
        C.llama_memory_clear(self._mem, True)
        self._cached = []

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        if self._ctx:
            C.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            C.llama_model_free(self._model)
            self._model = None
