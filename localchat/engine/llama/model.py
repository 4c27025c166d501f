"""A loaded GGUF model: weights, vocabulary, tokenizing and token pieces. Thread-safe reads
only; the context that decodes with it belongs to the scheduler."""

from __future__ import annotations

import bisect
import ctypes
import hashlib
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

import llama_cpp as C

from ...errors import ModelUnavailable
from ..base import check_fits
from .utf8guard import Utf8Tables

LONG_TEXT, LONG_TEXTS_KEPT = 4096, 32  # texts this long (bytes) have their tokens kept; how many
# Control tokens llama.cpp turns into user-defined ones when it loads a vocabulary (its "always
# render" hack for gpt-oss's harmony tokens; `<|end|>` too where `<|return|>` and `<|call|>` end
# turns): a user-defined token is matched even in text tokenized without special tokens, so
# message text could forge a harmony turn. Plain text is cut inside each of these (_tokenize).
PROMOTED = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>")
_backend_ready = False
_log = logging.getLogger("localchat.llama")


offloaded: str | None = None  # "N/M": the layers llama.cpp put on devices (GPUs, RPC workers) at the last load


@C.llama_log_callback
def _llama_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    global offloaded
    if level >= 4:  # GGML_LOG_LEVEL_ERROR; the rest is llama.cpp's chatter
        _log.error(text.decode(errors="replace").rstrip())
    elif b"offloaded " in text and (found := re.search(rb"offloaded (\d+/\d+) layers", text)):
        offloaded = found.group(1).decode()


C.llama_log_set(_llama_log, ctypes.c_void_p(0))


@C.llama_progress_callback
def quiet_progress(_progress: float, _user_data: ctypes.c_void_p) -> bool:
    return True  # keep loading; without a callback llama.cpp prints dots to stderr


class Model:
    def __init__(self, path: Path, *, n_gpu_layers: int = 0, extra_buffers: bool = False,
                 vocab_only: bool = False, tensor_split: Iterable[float] | None = None) -> None:
        global _backend_ready
        if not _backend_ready:
            C.llama_backend_init()
            _backend_ready = True
        mparams = C.llama_model_default_params()
        mparams.n_gpu_layers = n_gpu_layers
        # Weight-repacking buffers: off by default, since ggml's AMX kernels crash on some
        # virtual machines whose CPU reports AMX (seen on the development machines).
        mparams.use_extra_bufts = extra_buffers
        mparams.progress_callback = quiet_progress
        mparams.vocab_only = vocab_only  # a server holding only the vocabulary tokenizes; a worker decodes
        if tensor_split:  # each device's share of the layers (RPC devices first): read during the load only
            split = list(tensor_split)[:C.LLAMA_MAX_DEVICES]
            shares = (ctypes.c_float * C.LLAMA_MAX_DEVICES)(*split)
            mparams.tensor_split = ctypes.cast(shares, ctypes.POINTER(ctypes.c_float))
        self.path, self.n_gpu_layers = path, n_gpu_layers
        self.ptr = C.llama_model_load_from_file(str(path).encode(), mparams)
        if not self.ptr:
            raise ModelUnavailable(f"llama.cpp could not load {path}: is it a complete GGUF file?")
        self.vocab = C.llama_model_get_vocab(self.ptr)
        self.n_vocab = C.llama_vocab_n_tokens(self.vocab)
        self.size_bytes = path.stat().st_size
        self._bos = C.llama_vocab_bos(self.vocab)
        self._add_bos = C.llama_vocab_get_add_bos(self.vocab)
        self._pieces: dict[int, bytes] = {}
        self._by_text: tuple[list[bytes], list[int]] | None = None  # (every token's text sorted, their ids): starting_with
        self._long: OrderedDict[tuple[bytes, bool], tuple[int, ...]] = OrderedDict()
        self._lock = threading.Lock()
        self.visible: set[int] = set()
        self._utf8: Utf8Tables | None = None
        self.eog = frozenset(t for t in range(self.n_vocab) if C.llama_vocab_is_eog(self.vocab, t))
        fim = {"pre": C.llama_vocab_fim_pre, "suf": C.llama_vocab_fim_suf, "mid": C.llama_vocab_fim_mid,
               "rep": C.llama_vocab_fim_rep, "sep": C.llama_vocab_fim_sep, "pad": C.llama_vocab_fim_pad}
        self.fim = {k: t for k, f in fim.items() if (t := f(self.vocab)) >= 0}  # fill-in-the-middle tokens
        self.bos = self._bos if self._add_bos and self._bos >= 0 else None  # the BOS a prompt starts with
        self.adapters: list[int] = []  # LoRA adapters (llama.cpp pointers), freed with the model
        self._guarded = tuple(t for t in PROMOTED if (i := self.token_id(t)) is not None
                              and C.llama_vocab_get_attr(self.vocab, i) & C.LLAMA_TOKEN_ATTR_USER_DEFINED)

    def load_adapters(self, paths: Iterable[str]) -> None:
        for path in paths:
            adapter = C.llama_adapter_lora_init(self.ptr, str(path).encode())
            if not adapter:
                raise ModelUnavailable(f"llama.cpp could not load the LoRA adapter {path}: is it a LoRA GGUF made "
                                       f"for {self.path.name}? (see the server log)")
            self.adapters.append(adapter)

    # -- text <-> tokens -------------------------------------------------------------------

    def tokenize(self, segments: Iterable[tuple[str, bool]]) -> list[int]:
        """Tokenize (text, is_plain) segments; control tokens are parsed only where is_plain is False."""
        return self.tokenize_at(list(segments), 0)[0]

    def tokenize_at(self, segments: list[tuple[str, bool]], at: int) -> tuple[list[int], int]:
        """The segments' tokens (base.Tokenizer), and how many come before segment `at`."""
        tokens: list[int] = []
        before = 0
        for i, (text, plain) in enumerate(segments):
            if i == at:
                before = len(tokens)
            # "replace": a JSON body may carry lone surrogates (\ud800), which UTF-8 cannot hold
            tokens += self.tokenize_bytes(text.encode("utf-8", "replace"), parse_special=not plain)
        if at >= len(segments):
            before = len(tokens)
        if self._add_bos and self._bos >= 0 and tokens[:1] != [self._bos]:
            tokens.insert(0, self._bos)
            before += 1
        return tokens, before

    def tokenize_bytes(self, data: bytes, parse_special: bool) -> list[int]:
        """Tokens of a text. Long texts (an agent's tool descriptions, a system prompt) come back
        every turn: their tokens are kept, keyed by a hash of the text."""
        if len(data) < LONG_TEXT:
            return self._tokenize(data, parse_special)
        key = (hashlib.sha256(data).digest(), parse_special)
        with self._lock:
            if key in self._long:
                self._long.move_to_end(key)
                return list(self._long[key])
        tokens = self._tokenize(data, parse_special)
        with self._lock:
            self._long[key] = tuple(tokens)
            while len(self._long) > LONG_TEXTS_KEPT:
                self._long.popitem(last=False)
        return tokens

    def _tokenize(self, data: bytes, parse_special: bool) -> list[int]:
        if not parse_special and self._guarded and any(t.encode() in data for t in self._guarded):
            # plain text holding a promoted control token's text: cut one byte into each
            # occurrence, so that no piece holds the whole text (it stays plain characters)
            text = data.decode("utf-8", "replace")
            cuts = sorted({at + 1 for t in self._guarded for at in _occurrences(text, t)})
            pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
            return [tok for piece in pieces for tok in self._llama_tokenize(piece.encode(), False)]
        return self._llama_tokenize(data, parse_special)

    def _llama_tokenize(self, data: bytes, parse_special: bool) -> list[int]:
        cap = len(data) + 8
        buf = (C.llama_token * cap)()
        n = C.llama_tokenize(self.vocab, data, len(data), buf, cap, False, parse_special)
        if n < 0:
            cap = -n
            buf = (C.llama_token * cap)()
            n = C.llama_tokenize(self.vocab, data, len(data), buf, cap, False, parse_special)
        return list(buf[:n])

    def pair(self, query: list[int], document: list[int]) -> list[int]:
        """A (query, document) pair for a reranker without a prompt template, framed as
        llama-server does: BOS, query, EOS, SEP, document, EOS, each where the vocabulary adds it."""
        v = self.vocab
        eos = C.llama_vocab_eos(v)
        eos = eos if eos >= 0 else C.llama_vocab_sep(v)
        end = [eos] if C.llama_vocab_get_add_eos(v) and eos >= 0 else []
        sep = [C.llama_vocab_sep(v)] if C.llama_vocab_get_add_sep(v) and C.llama_vocab_sep(v) >= 0 else []
        return [*([self.bos] if self.bos is not None else []), *query, *end, *sep, *document, *end]

    def token_id(self, text: str) -> int | None:
        """The id of a control token given by its text, or None if the vocabulary lacks it."""
        ids = self.tokenize_bytes(text.encode(), parse_special=True)
        return ids[0] if len(ids) == 1 else None

    def piece(self, token: int) -> bytes:
        """A token's text. Control tokens are empty, except those named in `visible`
        (a family's tool-call marker such as Mistral's [TOOL_CALLS])."""
        cached = self._pieces.get(token)
        if cached is None:
            special = token in self.visible
            buf = ctypes.create_string_buffer(64)
            n = C.llama_token_to_piece(self.vocab, token, buf, 64, 0, special)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = C.llama_token_to_piece(self.vocab, token, buf, -n, 0, special)
            cached = self._pieces[token] = buf.raw[:n]
        return cached

    def starting_with(self, prefix: bytes) -> list[int]:
        """The tokens whose text starts with `prefix` (a sorted index of every token's text, made
        on first use)."""
        if self._by_text is None:
            pieces = [self.piece(t) for t in range(self.n_vocab)]
            order = sorted(range(self.n_vocab), key=pieces.__getitem__)
            self._by_text = ([pieces[t] for t in order], order)
        texts, ids = self._by_text
        lo = bisect.bisect_left(texts, prefix)
        hi = lo
        while hi < len(texts) and texts[hi].startswith(prefix):
            hi += 1
        return ids[lo:hi]

    def utf8_tables(self) -> Utf8Tables:
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

    def check_fits(self, tokens: list[int], n_ctx: int) -> None:
        check_fits(tokens, n_ctx)

    def close(self) -> None:
        if self.ptr:
            C.llama_model_free(self.ptr)
            self.ptr = None


def _occurrences(text: str, needle: str) -> list[int]:
    out, at = [], text.find(needle)
    while at >= 0:
        out.append(at)
        at = text.find(needle, at + 1)
    return out
