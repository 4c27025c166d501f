"""A scripted engine, for fast tests of everything above the engine (splitting, framing, the
protocols): it plays back the text a script gives for each request, as the real engines emit
it — Started, Text events, each choice's Done — with a byte tokenizer, no model and no thread.
Each piece counts as one generated token (for max_tokens and the loop detector, where the same
piece is the same token).

    FakeEngine(lambda request, choice: ["Hello", " world"])
    ModelHost(registry, engine=fake_factory(script))  # every model of the registry plays it

A script can also fail, the ways a real engine fails as the generation layer sees it:

    ["Hello", EngineError("llama_decode returned -3")]  # an engine error: the request ends with it
    ["Hel", Crash()]       # the worker dies (WorkerEngine): every started request ends with engine_crashed;
                           # `crash_limit` deaths within a minute mark the model failed (submit: 503)
    [Wait(2.0), "Hi"]      # a slow prompt (nothing for 2 s before the first token); mid-script: a stall

A script that raises ends its request with that error too (it never hangs the stream). Requests
take `parallel` slots (n each) and wait for free ones, as the scheduler's; past `max_queue`
waiting ones, submit raises QueueFull. `prompt_text(request)` reads a request's prompt back,
for a script that answers by what was asked."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import re
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import ContextOverflow, EngineCrashed, ModelUnavailable
from .base import Emit, Stream, check_queue, no_slot_actions
from .params import Done, EngineStats, Generate, Prepared, SlotDone, SlotInfo, Started, Text
from .sampling.repetition import detector

CRASH_LIMIT, CRASH_WINDOW = 3, 60.0  # as WorkerEngine's: this many deaths within this many seconds fail the model


@dataclass(frozen=True)
class Wait:
    """A pause in the script: before the first piece a slow prompt, between pieces a stall."""

    seconds: float


@dataclass(frozen=True)
class Crash:
    """The model's worker dies here (a segfault): what WorkerEngine reports when its process dies."""

    how: str = "signal SIGSEGV"


Step = str | Wait | Crash | BaseException
Script = Callable[[Generate, int], Iterable[Step]]  # (request, choice index) → the pieces of text it generates


def _fresh(exc: BaseException) -> BaseException:
    """A copy of a script's error, so that playing it again (or a layer that amends an error's
    message or field) never touches the one the script holds."""
    try:
        return copy.copy(exc)
    except Exception:  # noqa: BLE001 - an exception that cannot be rebuilt from its args: the script's own
        return exc


def prompt_text(request: Generate) -> str:
    """The request's prompt as text (its byte tokens; special tokens left out)."""
    return bytes(t for t in request.tokens if t < 256).decode("utf-8", "replace")


class ByteTokenizer:
    """Every UTF-8 byte is a token; the given special strings (control tokens) have their own."""

    def __init__(self, specials: Iterable[str] = ()) -> None:
        self.specials = list(dict.fromkeys(specials))
        self.n_vocab = 256 + len(self.specials)
        self.bos: int | None = None
        self.fim: dict[str, int] = {}
        self._split = re.compile("(" + "|".join(map(re.escape, self.specials)) + ")") if self.specials else None

    def tokenize(self, segments: Iterable[tuple[str, bool]]) -> list[int]:
        return self.tokenize_at(list(segments), 0)[0]

    def tokenize_at(self, segments: list[tuple[str, bool]], at: int) -> tuple[list[int], int]:
        parts = [self.tokenize_bytes(text.encode(), parse_special=not plain) for text, plain in segments]
        return [t for part in parts for t in part], sum(len(part) for part in parts[:at])

    def tokenize_bytes(self, data: bytes, parse_special: bool) -> list[int]:
        if not parse_special or self._split is None:
            return list(data)
        out: list[int] = []
        for k, part in enumerate(self._split.split(data.decode("utf-8", "replace"))):
            out += [256 + self.specials.index(part)] if k % 2 else list(part.encode())
        return out

    def token_id(self, text: str) -> int | None:
        return 256 + self.specials.index(text) if text in self.specials else None

    def piece(self, token: int) -> bytes:
        return bytes([token]) if token < 256 else self.specials[token - 256].encode()


@dataclass
class _Job:
    request: Generate
    emit: Emit
    task: asyncio.Task[None] | None = None
    started: bool = False


class FakeEngine:
    confirms = False  # submit refuses at once (base.py)

    def __init__(self, script: Script, *, n_ctx: int = 4096, parallel: int = 4, specials: Iterable[str] = (),
                 delay: float = 0.0, prompt_delay: float = 0.0, max_queue: int = 64,
                 crash_limit: int | None = CRASH_LIMIT, name: str = "fake", **_: Any) -> None:
        self.script, self.delay, self.prompt_delay = script, delay, prompt_delay
        self.tokenizer = ByteTokenizer(specials)
        self.n_ctx, self.parallel, self.n_adapters, self.max_queue = n_ctx, parallel, 0, max_queue
        self.name, self.crash_limit = name, crash_limit
        self.requests: list[Generate] = []  # every request submitted, for tests to look at
        self.crashes = 0
        self.state = "ready"  # "failed": crashed crash_limit times within CRASH_WINDOW seconds
        self._crash_times: deque[float] = deque()
        self._jobs: list[_Job] = []
        self._busy = 0
        self._free: list[asyncio.Future[None]] = []  # requests waiting for slots

    def check_fits(self, tokens: list[int]) -> None:
        if len(tokens) >= self.n_ctx:
            raise ContextOverflow(f"prompt is too long: {len(tokens)} tokens > {self.n_ctx} maximum", field="messages")

    def submit(self, request: Generate) -> Stream:
        self.check_fits(request.tokens)
        if self.state == "failed":
            raise ModelUnavailable(self._failed_message(), param="model")
        waiting = sum(not j.started for j in self._jobs)
        check_queue(waiting, max(self.parallel - self._busy, 0), self.max_queue, self.name)
        self.requests.append(request)
        return Stream(self._start, self._cancel, request)

    def _start(self, request: Generate, emit: Emit) -> _Job:
        job = _Job(request, emit)
        self._jobs.append(job)
        job.task = asyncio.get_running_loop().create_task(self._run(job))
        return job

    def _cancel(self, job: _Job) -> None:
        if job.task is not None:
            job.task.cancel()

    async def _run(self, job: _Job) -> None:
        if job.request.media:  # read at once (a token each), before the queue: what Stream.prepared() waits for
            job.emit(Prepared(len(job.request.tokens) + len(job.request.media)))  # as _play's n_prompt
        try:
            while self._busy + job.request.n > self.parallel:  # wait for free slots, as the scheduler's queue
                free = asyncio.get_running_loop().create_future()
                self._free.append(free)
                try:
                    await free
                finally:
                    self._free.remove(free)
            self._busy += job.request.n
            job.started = True
            try:
                await self._play(job)
            finally:
                self._busy -= job.request.n
                for free in self._free:
                    if not free.done():
                        free.set_result(None)
        finally:
            if job in self._jobs:
                self._jobs.remove(job)

    async def _play(self, job: _Job) -> None:
        request, emit = job.request, job.emit
        n_prompt = len(request.tokens) + len(request.media)
        emit(Started())
        if self.prompt_delay:
            await asyncio.sleep(self.prompt_delay)
        try:
            for i in range(request.n):
                budget, made, reason, why = request.params.max_tokens or self.n_ctx, 0, "stop", None
                loop, ids = detector(request.params.repetition_stop), {}  # a piece is a token
                for step in self.script(request, i):
                    if isinstance(step, Wait):
                        await asyncio.sleep(step.seconds)
                        continue
                    if isinstance(step, Crash):
                        self._crash(step.how)
                        return
                    if isinstance(step, BaseException):
                        raise _fresh(step)
                    if made >= budget:
                        reason = "length"
                        break
                    await asyncio.sleep(self.delay)
                    made += 1
                    emit(Text(step, i, (), made))
                    if loop is not None and loop.push(ids.setdefault(step, len(ids))):
                        reason, why = "length", "repetition"
                        break
                emit(Done(reason, n_prompt, made, 0, i, None, why))
        except Exception as exc:  # noqa: BLE001 - a scripted failure (or a broken script): the request's error
            emit(exc)
        emit(None)

    def _crash(self, how: str) -> None:
        """The worker died: every started request fails with engine_crashed (the ones waiting for
        a slot run later, as WorkerEngine re-runs them on its fresh worker); too many deaths
        within CRASH_WINDOW seconds fail the model and every request in it."""
        self.crashes += 1
        now = time.monotonic()
        self._crash_times.append(now)
        while self._crash_times and now - self._crash_times[0] > CRASH_WINDOW:
            self._crash_times.popleft()
        failed = self.crash_limit is not None and len(self._crash_times) >= self.crash_limit
        if failed:
            self.state, self._why = "failed", how
        current = asyncio.current_task()
        for job in list(self._jobs):
            if not (job.started or failed):
                continue
            self._jobs.remove(job)
            if job.started:
                job.emit(EngineCrashed(f"the model {self.name} crashed ({how}) while generating; "
                                       "it is being restarted: send the request again", code="engine_crashed"))
            else:
                job.emit(ModelUnavailable(self._failed_message(), param="model"))
            job.emit(None)
            if job.task is not None and job.task is not current:
                job.task.cancel()

    def _failed_message(self) -> str:
        return (f"the model {self.name} is marked failed: its worker crashed {self.crash_limit} times within "
                f"{CRASH_WINDOW:.0f} s (last: {getattr(self, '_why', '?')}); see the server log, then restart the server")

    async def embed(self, inputs: list[list[int]]) -> list[list[float]]:
        vectors = []
        for tokens in inputs:
            digest = hashlib.sha256(bytes(t % 256 for t in tokens)).digest()
            raw = [b - 127.5 for b in digest[:8]]
            norm = sum(x * x for x in raw) ** 0.5 or 1.0
            vectors.append([x / norm for x in raw])
        return vectors

    async def rerank(self, prompts: list[list[int]], judge: tuple[int, int] | None = None) -> list[float]:
        return [len(p) / (len(p) + 1) for p in prompts]  # longer pairs rank higher: enough for ordering tests

    async def slots(self) -> list[SlotInfo]:
        """`parallel` slots, the first `busy` of them processing; none caches anything."""
        return [SlotInfo(i, i < self._busy, 0) for i in range(self.parallel)]

    async def slot_action(self, action: str, slot_id: int, path: str | None = None) -> SlotDone:
        raise no_slot_actions(self.name, "runs a scripted engine (no llama.cpp cache to save)")

    def probe(self) -> None:
        pass  # (nothing elsewhere to ask)

    def stats(self) -> EngineStats:
        return EngineStats(self.parallel, self._busy, sum(not j.started for j in self._jobs), self.n_ctx, 0)

    def close(self) -> None:
        pass


def fake_factory(script: Script, **options: Any) -> Callable[..., FakeEngine]:
    """An engine factory for ModelHost: every model it loads plays `script` (an engine named as
    the model, for its error messages)."""
    def make(path: Any, *, n_ctx: int, parallel: int, name: str = "fake", **_: Any) -> FakeEngine:
        return FakeEngine(script, n_ctx=n_ctx, parallel=parallel, name=name, **options)
    return make
