"""What a scheduler step produced: each request's events, in order, handed to whoever runs the
steps (vLLM's EngineCoreOutputs): the engine's thread gives them to the streams (base.deliver),
a worker's child sends them to the server in one message.

A request's events are put in the outbox as the step makes them (by its sequences, the decoder,
the scheduler; by the media thread, which tokenizes a request's images before it queues); the
step takes them all at its end."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from .params import Event, Prepared, Started

Item = Event | Prepared | Started | BaseException | None  # None: the request has ended


@dataclass
class StepOutput:
    """events: per request that had any, its sink (what it was submitted with: a stream, a worker's
    job id) and its events in order; busy: whether a decode ran (False: nothing to do, or every
    running request waits for its media)."""

    events: list[tuple[Any, list[Item]]] = field(default_factory=list)
    busy: bool = False


class Outbox:
    """The events made since the last step took them, per request in the order of its first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # (the media thread puts too)
        # by the request itself (not its id: one may end and another start in the same step)
        self._items: dict[Any, tuple[Any, list[Item]]] = {}

    def put(self, job: Any, item: Item) -> None:
        """An event of `job` (a scheduler's Job: its `sink` is what the event goes to)."""
        with self._lock:
            entry = self._items.get(job)
            if entry is None:
                self._items[job] = (job.sink, [item])
            else:
                entry[1].append(item)

    def take(self) -> list[tuple[Any, list[Item]]]:
        with self._lock:
            items, self._items = self._items, {}
        return list(items.values())
