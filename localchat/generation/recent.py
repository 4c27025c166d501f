"""The last requests the server answered, newest first: what the web page's status panel shows
(through `GET /health`). Protocol-neutral: every generation goes through one Turn."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Answered:
    model: str
    started: float  # unix time
    seconds: float  # from the request's start (queue and prompt included) to its end
    prompt_tokens: int
    cached_tokens: int | None  # None: the request ended before the engine said
    completion_tokens: int | None
    finish: str  # stop | length | tool_calls | cancelled | error


class Recent:
    def __init__(self, keep: int = 20) -> None:
        self._items: deque[Answered] = deque(maxlen=keep)
        self._lock = threading.Lock()

    def add(self, item: Answered) -> None:
        with self._lock:
            self._items.append(item)

    def newest_first(self) -> list[dict[str, Any]]:
        with self._lock:
            items = list(self._items)
        return [asdict(i) for i in reversed(items)]


class Clock:
    """When a request started, on both clocks (the wall clock is shown, the monotonic one measures)."""

    def __init__(self) -> None:
        self.wall, self.mono = time.time(), time.monotonic()

    def elapsed(self) -> float:
        return round(time.monotonic() - self.mono, 3)
