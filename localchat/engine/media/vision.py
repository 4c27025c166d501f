"""Images and audio in a prompt, through llama.cpp's mtmd library: a projector (an mmproj GGUF)
turns each into embeddings the text model reads in the place of tokens.

A request's media sit at token positions of its prompt (`Media.at`). Expanding the prompt
tokenizes each with mtmd (which preprocesses it as its projector needs, resizing an image, and
adds the model's own markers around it, such as Gemma 3's <start_of_image>): its span of the
prompt holds placeholder ids derived from the media's hash, all negative (never a vocabulary
id), so a slot's cached tokens compare equal when the same image comes again and the prefix
cache covers it, as llama-server's comparison of chunk ids does. Encoding (the vision tower) runs
off the decode loop; decoding the embeddings into a slot is llama-server's own helper
(`mtmd_helper_decode_image_chunk`: positions, M-RoPE, non-causal attention where the projector
needs it)."""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import llama_cpp as C
import llama_cpp.mtmd_cpp as M
import numpy as np

from ...errors import InvalidRequest, ModelUnavailable
from ..llama.model import Model, _llama_log
from ..params import Generate, Media

_log = logging.getLogger("localchat.engine")
M.mtmd_log_set(_llama_log, ctypes.c_void_p(0))  # errors to the log, the rest of its chatter nowhere
M.mtmd_helper_log_set(_llama_log, ctypes.c_void_p(0))
_NO_CALLBACK = M.mtmd_helper_post_decode_callback()  # a NULL function pointer


@dataclass(eq=False)
class Span:
    """The positions of an expanded prompt that one media chunk fills."""

    start: int  # index in the expanded prompt
    n_tokens: int
    n_pos: int  # positions it takes (fewer than n_tokens with M-RoPE)
    chunk: int  # the mtmd_input_chunk (owned by its Expanded)
    placeholder: int
    embd: np.ndarray | None = None  # its embeddings, once encoded
    error: BaseException | None = None
    encoding: bool = False


@dataclass(eq=False)
class Expanded:
    """A prompt with its media in place: tokens (placeholders for media) and the media's spans."""

    tokens: list[int]
    spans: list[Span]
    chunks: list[int] = field(default_factory=list)  # mtmd_input_chunks to free
    lock: threading.Lock = field(default_factory=threading.Lock)
    busy: int = 0  # spans being encoded now
    closed: bool = False

    def span_at(self, index: int) -> Span | None:
        return next((s for s in self.spans if s.start == index), None)

    def next_start(self, index: int) -> int:
        """Where the next span at or after `index` starts (the prompt's end if none)."""
        return min((s.start for s in self.spans if s.start >= index), default=len(self.tokens))

    def inside(self, index: int) -> Span | None:
        """The span that `index` falls strictly inside, if any."""
        return next((s for s in self.spans if s.start < index < s.start + s.n_tokens), None)


class Projector:
    """A model's mmproj, loaded in the process that decodes (the worker)."""

    def __init__(self, model: Model, path: Path, *, n_threads: int | None = None, use_gpu: bool = False) -> None:
        params = M.mtmd_context_params_default()
        params.n_threads = n_threads or os.cpu_count() or 1
        params.use_gpu = use_gpu
        params.print_timings = False
        self.ctx = M.mtmd_init_from_file(str(path).encode(), model.ptr, params)
        if not self.ctx:
            raise ModelUnavailable(f"llama.cpp could not load the projector {path} for {model.path.name}: is it an "
                                   "mmproj GGUF made for this model? (see the server log)")
        self.path, self.model = path, model
        self.vision, self.audio = bool(M.mtmd_support_vision(self.ctx)), bool(M.mtmd_support_audio(self.ctx))
        self.n_embd = C.llama_model_n_embd_inp(model.ptr)
        self._encode_lock = threading.Lock()  # one encode at a time: its output buffer is the context's

    def expand(self, request: Generate) -> Expanded:
        """The request's prompt with its media tokenized in place (blocking: preprocesses images)."""
        out = Expanded([], [])
        done = 0
        try:
            for media in sorted(request.media, key=lambda m: m.at):
                if not 0 <= media.at < len(request.tokens):
                    raise InvalidRequest(f"{media.param}: the {media.kind} must be followed by text in the prompt",
                                         param=media.param)
                out.tokens += request.tokens[done:media.at]
                done = media.at
                self._add(out, media)
            out.tokens += request.tokens[done:]
        except BaseException:
            self.free(out)
            raise
        return out

    def _add(self, out: Expanded, media: Media) -> None:
        bitmap = self._bitmap(media)
        chunks = M.mtmd_input_chunks_init()
        out.chunks.append(chunks)
        part = M.mtmd_input_part(text=None, bitmap=bitmap)
        parts = (ctypes.POINTER(M.mtmd_input_part) * 1)(ctypes.pointer(part))
        rc = M.mtmd_tokenize_from_parts(self.ctx, chunks, parts, 1, False)
        M.mtmd_bitmap_free(bitmap)
        if rc != 0:
            raise InvalidRequest(f"{media.param}: the model's projector could not read this {media.kind} "
                                 f"(mtmd_tokenize returned {rc})", param=media.param)
        for i in range(M.mtmd_input_chunks_size(chunks)):
            chunk = M.mtmd_input_chunks_get(chunks, i)
            if M.mtmd_input_chunk_get_type(chunk) == M.MTMD_INPUT_CHUNK_TYPE_TEXT:
                n = ctypes.c_size_t()
                tokens = M.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                out.tokens += tokens[: n.value]
                continue
            n_tokens = M.mtmd_input_chunk_get_n_tokens(chunk)
            digest = hashlib.sha256(f"{media.id}:{i}".encode()).digest()
            placeholder = -1 - int.from_bytes(digest[:4], "little") % (2**31 - 2)
            out.spans.append(Span(len(out.tokens), n_tokens, M.mtmd_input_chunk_get_n_pos(chunk), chunk, placeholder))
            out.tokens += [placeholder] * n_tokens

    def _bitmap(self, media: Media) -> int:
        if media.kind == "image":
            if not self.vision:
                raise InvalidRequest(f"{media.param}: this model's projector takes no images", param=media.param)
            if media.width * media.height * 3 != len(media.data) or not media.width or not media.height:
                raise InvalidRequest(f"{media.param}: the image's pixels do not match its size", param=media.param)
            buf = (ctypes.c_ubyte * len(media.data)).from_buffer_copy(media.data)
            bitmap = M.mtmd_bitmap_init(media.width, media.height, buf)
        else:
            if not self.audio:
                raise InvalidRequest(f"{media.param}: this model's projector takes no audio", param=media.param)
            buf = (ctypes.c_ubyte * len(media.data)).from_buffer_copy(media.data)
            bitmap = M.mtmd_helper_bitmap_init_from_buf(self.ctx, buf, len(media.data), False)
            if bitmap and not M.mtmd_bitmap_is_audio(bitmap):
                M.mtmd_bitmap_free(bitmap)
                bitmap = None
            if not bitmap:
                raise InvalidRequest(f"{media.param}: not audio this model can read (WAV, MP3 or FLAC)",
                                     param=media.param)
        M.mtmd_bitmap_set_id(bitmap, media.id.encode())
        return bitmap

    def encode(self, prompt: Expanded, span: Span) -> None:
        """Blocking (the vision or audio tower): the span's embeddings, or its error."""
        with prompt.lock:
            if prompt.closed:
                return
            prompt.busy += 1
        try:
            with self._encode_lock:
                rc = M.mtmd_encode_chunk(self.ctx, span.chunk)
                if rc != 0:
                    raise RuntimeError(f"mtmd_encode_chunk returned {rc}")
                out = M.mtmd_get_output_embd(self.ctx)
                span.embd = np.ctypeslib.as_array(out, shape=(span.n_tokens * self.n_embd,)).copy()
        except Exception as exc:  # noqa: BLE001 - the request's own failure, reported to it
            span.error = exc
        finally:
            with prompt.lock:
                prompt.busy -= 1
                last = prompt.closed and not prompt.busy
            if last:
                self._free(prompt)

    def decode(self, lctx: int, span: Span, pos: int, seq_id: int, n_batch: int) -> int:
        """Decode the span's embeddings into a sequence at position `pos`; llama.cpp's return code."""
        assert span.embd is not None
        embd = span.embd.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        new_pos = C.llama_pos(0)
        rc = M.mtmd_helper_decode_image_chunk(self.ctx, lctx, span.chunk, embd, pos, seq_id, n_batch,
                                              ctypes.byref(new_pos), _NO_CALLBACK, None)
        span.embd = None  # decoded once; a later request finds it in the slot's cache
        return rc

    def free(self, prompt: Expanded) -> None:
        """The prompt's chunks are no longer needed (freed once no encode uses them)."""
        with prompt.lock:
            if prompt.closed:
                return
            prompt.closed = True
            busy = prompt.busy
        if not busy:
            self._free(prompt)

    def _free(self, prompt: Expanded) -> None:
        for chunks in prompt.chunks:
            M.mtmd_input_chunks_free(chunks)
        prompt.chunks = []

    def close(self) -> None:
        M.mtmd_free(self.ctx)
        self.ctx = None
