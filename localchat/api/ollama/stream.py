"""Ollama's framing of one generation: NDJSON lines (or one object), whole tool calls with their
arguments as objects, and the last line's counts and durations (nanoseconds)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ...errors import LocalchatError
from ...generation import Delta, Finish, ReasoningDelta, ToolCallArguments, ToolCallStart, Turn
from ..common import stream_error
from .. import errors
from ..sse import ndjson



def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def nanos(seconds: float) -> int:
    return max(0, int(seconds * 1e9))


@dataclass
class Clock:
    """When the request came, when its model was ready, when its first token came."""

    start: float = field(default_factory=time.perf_counter)
    ready: float | None = None
    first: float | None = None

    def done(self, finish: Finish) -> dict[str, Any]:
        end = time.perf_counter()
        ready = self.ready or self.start
        first = self.first or end
        return {"done": True, "done_reason": "length" if finish.reason == "length" else "stop",
                "total_duration": nanos(end - self.start), "load_duration": nanos(ready - self.start),
                "prompt_eval_count": finish.usage.prompt_tokens, "prompt_eval_duration": nanos(first - ready),
                "eval_count": finish.usage.completion_tokens, "eval_duration": nanos(end - first)}


@dataclass
class LineShape:
    """How one line looks: /api/chat puts the text in `message`, /api/generate in `response`."""

    chat: bool
    model: str

    def line(self, parts: dict[str, Any], done: dict[str, Any] | None = None) -> dict[str, Any]:
        head: dict[str, Any] = {"model": self.model, "created_at": now_iso()}
        if self.chat:
            message = {"role": "assistant", "content": parts.get("content", "")}
            message.update((k, parts[k]) for k in ("thinking", "tool_calls") if parts.get(k))
            head["message"] = message
        else:
            head["response"] = parts.get("content", "")
            if parts.get("thinking"):
                head["thinking"] = parts["thinking"]
        if done is None:
            return {**head, "done": False}
        return {**head, **done, **({} if self.chat else {"context": []})}


class Answer:
    """Turns events into Ollama's message parts. A tool call goes out whole, once its arguments
    are complete (when the next call starts or the choice ends); `think=False` drops the thinking."""

    def __init__(self, think: bool | None) -> None:
        self.think = think
        self.open: dict[str, Any] | None = None
        self.finish: Finish | None = None

    def parts(self, event: Any) -> dict[str, Any] | None:
        if isinstance(event, Delta):
            return {"content": event.content} if event.content else None
        if isinstance(event, ReasoningDelta):
            return {"thinking": event.text} if event.text and self.think is not False else None
        if isinstance(event, ToolCallStart):
            done = self._close()
            self.open = {"id": f"call_{event.id}", "function": {"index": event.index, "name": event.name,
                                                                  "arguments": ""}}
            return done
        if isinstance(event, ToolCallArguments) and self.open is not None:
            self.open["function"]["arguments"] += event.fragment
        elif isinstance(event, Finish):
            self.finish = event
            return self._close()
        return None

    def _close(self) -> dict[str, Any] | None:
        call, self.open = self.open, None
        if call is None:
            return None
        try:
            call["function"]["arguments"] = json.loads(call["function"]["arguments"] or "{}")
        except ValueError:  # cut off by the length limit: not a call Ollama's shape can carry
            return None
        return {"tool_calls": [call]}


async def stream(turn: Turn, shape: LineShape, answer: Answer, clock: Clock) -> AsyncIterator[bytes]:
    try:
        async for _, event in turn.events():
            clock.first = clock.first or time.perf_counter()
            if parts := answer.parts(event):
                yield ndjson(shape.line(parts))
        if answer.finish is not None:
            yield ndjson(shape.line({}, clock.done(answer.finish)))
    except Exception as exc:  # noqa: BLE001 - the stream has started: report in-band, never crash
        yield ndjson({"error": ERROR_SHAPE.param_of(stream_error(exc))[0]})


async def collect(turn: Turn, shape: LineShape, answer: Answer, clock: Clock) -> dict[str, Any]:
    text: dict[str, list[str]] = {"content": [], "thinking": []}
    calls: list[dict[str, Any]] = []
    async for _, event in turn.events():
        clock.first = clock.first or time.perf_counter()
        for key, value in (answer.parts(event) or {}).items():
            if key == "tool_calls":
                calls += value
            else:
                text[key].append(value)
    if answer.finish is None:
        raise LocalchatError("the generation ended without finishing")
    whole = {"content": "".join(text["content"]), "thinking": "".join(text["thinking"]), "tool_calls": calls}
    return shape.line(whole, clock.done(answer.finish))


def _write(status: int, kind: str, message: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": message}


ERROR_SHAPE = errors.ErrorShape("/api/", _write, fields=[  # Ollama's `{"error": "message"}`, its field names
    (r"tools\.(\d+)\.parameters", r"tools.\1.function.parameters"), (r"json_schema", "format"),
    (r"json_object", "format"), (r"stop", "options.stop")])
