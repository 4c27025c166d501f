"""What every engine offers — the in-process one (engine.py), the worker client (worker.py), the
scripted fake for tests (fake.py) and another localchat's over HTTP (upstream.py): plain, picklable
data in (`Generate`), token and text events out (`Stream`), cancel by closing the stream; a
tokenizer to build prompts.

Nothing above this interface holds a llama pointer or calls llama.cpp synchronously."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Protocol

from ..errors import ContextOverflow, EngineError, InvalidRequest, NotSupported, QueueFull
from .params import Done, EngineStats, Event, Generate, Prepared, SlotDone, SlotInfo, Started, Text

Emit = Callable[[Event | Prepared | Started | BaseException | None], None]  # None: the request has ended


class Tokenizer(Protocol):
    """The model's vocabulary, in the server process (the worker's model holds the weights)."""

    n_vocab: int
    bos: int | None  # the token a prompt starts with, if the model adds one
    fim: dict[str, int]  # fill-in-the-middle tokens: pre, suf, mid, rep, sep

    def tokenize(self, segments: Iterable[tuple[str, bool]]) -> list[int]: ...  # (text, is_plain)

    # the tokens of the segments, and how many of them come before segment `at` (the segments are
    # tokenized one by one, so that is exact): a prompt and where its last message starts, in one pass
    def tokenize_at(self, segments: list[tuple[str, bool]], at: int) -> tuple[list[int], int]: ...

    def tokenize_bytes(self, data: bytes, parse_special: bool) -> list[int]: ...

    def token_id(self, text: str) -> int | None: ...

    def piece(self, token: int) -> bytes: ...


class Engine(Protocol):
    tokenizer: Tokenizer
    n_ctx: int  # tokens of context per slot
    parallel: int  # slots: sequences decoded together
    n_adapters: int  # LoRA adapters loaded with the model (a request's `adapters` index them)
    # True: `submit` cannot refuse at once (the engine is elsewhere): every stream starts with a Prepared
    # once the request is taken, or with its refusal, so the caller awaits `Stream.prepared()` first.
    confirms: bool


    def check_fits(self, tokens: list[int]) -> None: ...  # ContextOverflow

    def submit(self, request: Generate) -> Stream: ...  # QueueFull; must run on the event loop

    async def embed(self, inputs: list[list[int]]) -> list[list[float]]: ...

    async def rerank(self, prompts: list[list[int]], judge: tuple[int, int] | None = None) -> list[float]: ...

    def stats(self) -> EngineStats: ...

    def probe(self) -> None: ...  # an engine elsewhere asks its peer how it fares (blocking); a local one has none

    async def slots(self) -> list[SlotInfo]: ...  # GET /slots; NotSupported where the slots are not ours

    # llama-server's POST /slots/{id}?action=save|restore|erase (path: the file, checked by the caller);
    # InvalidRequest for a bad slot id or file, SlotBusy, NotSupported where the slots are not ours
    async def slot_action(self, action: str, slot_id: int, path: str | None = None) -> SlotDone: ...

    def close(self) -> None: ...


def check_fits(tokens: list[int], n_ctx: int) -> None:
    """A prompt must leave room for at least one generated token."""
    if len(tokens) >= n_ctx:
        raise ContextOverflow(
            f"prompt is too long: {len(tokens)} tokens > {n_ctx} maximum (the model's context); "
            "shorten the conversation or raise context_length in models.toml", param="messages")


def no_slot_actions(name: str, why: str) -> NotSupported:
    """The refusal of an engine whose slots' caches are not this server's to save or restore."""
    return NotSupported(f"slot actions are not supported for this model: {name} {why}", param="model")


def check_adapters(request: Generate, n_adapters: int) -> None:
    """The request's LoRA adapters are the model's (the layer above resolves names to indices)."""
    bad = next((i for i, _ in request.adapters if not 0 <= i < n_adapters), None)
    if bad is not None:
        raise InvalidRequest(f"lora: no adapter {bad}; this model has {n_adapters}", param="lora")


class Stream:
    """The events of one submitted request. Closing it (or abandoning it) cancels the request:
    a queued one never starts, a running one stops within one step. `generated`: per choice, the
    tokens generated so far by the events that have arrived, read or not (a cancelled request's usage)."""

    def __init__(self, submit: Callable[[Any, Emit], Any], cancel: Callable[[Any], None],
                 request: Any) -> None:
        """request: what `submit` takes (a Generate; a chat-mode upstream's Converse)."""
        self.loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Event | Prepared | Started | BaseException | None] = asyncio.Queue()
        self._cancel = cancel
        self._ended = False
        self.generated: dict[int, int] = {}
        self.cached = 0  # prompt tokens read from the cache (known once the engine starts the request)
        self.miss: tuple[str, int, int, tuple[int, ...]] | None = None  # why the cache served less than it held (Started.miss)
        # the stream is what the engine's events go to: one at a time (`__call__`), or a step's worth (`deliver`)
        self._handle = submit(request, self)

    def __call__(self, item: Event | Prepared | Started | BaseException | None) -> None:
        """One event, from any thread (an engine that has them one at a time)."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._arrived, item)

    def _arrived_all(self, items: list[Event | Prepared | Started | BaseException | None]) -> None:
        for item in items:
            self._arrived(item)

    def _arrived(self, item: Event | Prepared | Started | BaseException | None) -> None:
        if isinstance(item, Started):  # not an item of the stream: what it says is kept here
            self.cached, self.miss = item.cached, item.miss
            return
        if isinstance(item, (Text, Done)):
            self.generated[item.index] = item.generated if isinstance(item, Text) else item.completion_tokens
        self._queue.put_nowait(item)

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events()

    async def prepared(self) -> int:
        """For a request with media: wait until the engine has tokenized them (or refused them:
        that error is raised here, before any output); the prompt's length with its media."""
        try:
            item = await self._queue.get()
        except BaseException:  # the caller gave up (its client left): the request ends
            self.close()
            raise
        if isinstance(item, Prepared):
            return item.prompt_tokens
        self.close()
        raise item if isinstance(item, BaseException) else EngineError("the request ended before it started")

    async def _events(self) -> AsyncIterator[Event]:
        try:
            while (item := await self._queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                if not isinstance(item, (Started, Prepared)):
                    yield item
            self._ended = True
        finally:
            self.close()

    def close(self) -> None:
        if not self._ended:
            self._ended = True
            self._cancel(self._handle)


def deliver(events: Iterable[tuple[Stream, list[Event | Prepared | Started | BaseException | None]]]) -> None:
    """A step's events (each stream's, in order), from the engine's thread: the event loop woken
    once for them all, not once an event."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Stream, list]]] = {}
    for stream, items in events:
        by_loop.setdefault(stream.loop, []).append((stream, items))
    for loop, batch in by_loop.items():
        if not loop.is_closed():
            loop.call_soon_threadsafe(_arrive, batch)


def _arrive(batch: list[tuple[Stream, list]]) -> None:
    for stream, items in batch:
        stream._arrived_all(items)


def check_queue(waiting: int, free: int, max_queue: int | None, name: str) -> None:
    """The queue limit, for every engine: a request may wait where fewer than `max_queue` others
    wait beyond the `free` slots the queue's head takes next (None: no limit here; a worker's
    child leaves it to the server's side, which also holds the requests while the child restarts)."""
    if max_queue is not None and waiting - free >= max_queue:
        raise QueueFull(f"{waiting} requests are already waiting for {name}; try again shortly")
