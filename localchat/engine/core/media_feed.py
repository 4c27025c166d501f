"""The scheduler's media side: expand a request's prompt (tokenize its images and audio with the
projector) before it queues, encode each media chunk on a thread of its own when the prompt
reaches it, and decode the embeddings into the request's slot, each chunk in a decode of its own.

The decode loop never waits for the vision tower: while a chunk encodes, the other requests go
on decoding and the request waits at the chunk; its prompt before the chunk is decoded first."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ...errors import ContextOverflow, EngineError, LocalchatError
from ..media.vision import Expanded, Projector, Span
from ..params import Prepared
from ..state.job import Job
from ..state.slot import Slot

_log = logging.getLogger("localchat.engine")


class MediaFeed:
    def __init__(self, projector: Projector, n_ctx: int, wake: Callable[[], None]) -> None:
        self.projector, self.n_ctx, self._wake = projector, n_ctx, wake
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="localchat-media")

    def prepare(self, job: Job, queue: Callable[[Job, Expanded | None], None]) -> None:
        """Expand the job's prompt off the caller's thread, then `queue(job, prompt)` (or, if it
        failed, report the error to the job and `queue(job, None)`)."""
        self._pool.submit(self._prepare, job, queue)

    def _prepare(self, job: Job, queue: Callable[[Job, Expanded | None], None]) -> None:
        try:
            prompt = self.projector.expand(job.request)
            if len(prompt.tokens) >= self.n_ctx:
                self.projector.free(prompt)
                raise ContextOverflow(
                    f"the prompt is {len(prompt.tokens)} tokens with its media, but the model's context holds "
                    f"{self.n_ctx}; send fewer or smaller images, or raise context_length in models.toml",
                    param="messages")
        except Exception as exc:  # noqa: BLE001 - the request's own failure, reported to it
            job.emit(exc if isinstance(exc, LocalchatError) else EngineError(f"llama.cpp failed: {exc}"))
            job.emit(None)
            return queue(job, None)
        job.emit(Prepared(len(prompt.tokens)))
        queue(job, prompt)

    def head(self, job: Job) -> Span | None:
        """The media chunk the job's prompt has reached, if it is encoded; starts encoding it if not.
        Raises the chunk's encoding error."""
        if job.prompt is None or not job.pending:
            return None
        span = job.prompt.span_at(len(job.lead.slot.cells))
        if span is None:
            return None
        if span.error is not None:
            raise EngineError(f"the projector could not encode this media: {span.error}")
        if span.embd is None:
            if not span.encoding:
                span.encoding = True
                self._pool.submit(self._encode, job, span)
            return None
        return span

    def _encode(self, job: Job, span: Span) -> None:
        assert job.prompt is not None
        self.projector.encode(job.prompt, span)
        self._wake()

    def text_room(self, job: Job) -> int:
        """How many of the job's pending tokens come before its next media chunk."""
        if job.prompt is None:
            return len(job.pending)
        at = len(job.lead.slot.cells)
        return job.prompt.next_start(at) - at

    def decode(self, ctx: int, slot: Slot, span: Span, n_batch: int) -> int:
        """Decode an encoded chunk into the slot (the scheduler adds its cells to the slot:
        Slot.add_media); llama.cpp's return code."""
        return self.projector.decode(ctx, span, slot.next_pos, slot.seq_id, n_batch)

    def decode_heads(self, jobs: list[Job], ctx: int, use_adapters: Callable[[], None], n_batch: int,
                     fail: Callable[[Job, BaseException], None]) -> list[tuple[Job, Span]]:
        """Each job whose prompt has reached an encoded media chunk decodes it into its slot (with
        the jobs' LoRA adapters applied first). Returns the jobs that did, with their chunks (for
        the scheduler: the chunk's cells are the slot's, its tokens no longer pending)."""
        decoded = []
        for job in jobs:
            try:
                span = self.head(job)
                if span is None:
                    continue
                use_adapters()
                rc = self.decode(ctx, job.lead.slot, span, n_batch)
                if rc != 0:
                    raise EngineError(f"llama.cpp could not decode the media's embeddings (returned {rc})")
            except Exception as exc:  # noqa: BLE001 - this request's media, this request's failure
                fail(job, exc)
                continue
            decoded.append((job, span))
        return decoded

    def release(self, job: Job) -> None:
        if job.prompt is not None:
            self.projector.free(job.prompt)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
