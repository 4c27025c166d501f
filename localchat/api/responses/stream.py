"""The Responses API's output, built from generation events: `Output` turns each event into
output items (reasoning, message, function_call) and the stream events that describe them;
`stream` frames those events as named SSE with increasing sequence numbers; `Shell` makes the
response object around the items. `collect` (not streamed) runs the same `Output` and keeps
only its items, so the two agree."""

from __future__ import annotations

import copy
import itertools
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from ...generation import Delta, Finish, ReasoningDelta, ToolCallArguments, ToolCallStart, Turn
from ..common import stream_error
from .. import errors
from ..sse import frame
from .schemas import ResponsesRequest

Event = dict[str, Any]


def item_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


class Output:
    """The output items so far; `add` returns the stream events (no sequence numbers yet)."""

    def __init__(self, namespaces: frozenset[str] = frozenset()) -> None:
        self.namespaces = namespaces  # a call named NAMESPACE.NAME is a function of that namespace tool
        self.items: list[dict[str, Any]] = []
        self.finish: Finish | None = None
        self._open: dict[str, Any] | None = None  # the item being written
        self._space = ""  # whitespace before any message text: a message starts only with real text

    def add(self, event: object) -> list[Event]:
        if isinstance(event, Delta):
            return self._text(event.content)
        if isinstance(event, ReasoningDelta):
            return self._thought(event.text)
        if isinstance(event, ToolCallStart):
            space, _, name = event.name.rpartition(".")
            named = {"name": name, "namespace": space} if space in self.namespaces else {"name": event.name}
            return self._begin({"type": "function_call", "id": item_id("fc"), "call_id": f"call_{event.id}",
                                **named, "arguments": "", "status": "in_progress"})
        if isinstance(event, ToolCallArguments) and self._open is not None:
            self._open["arguments"] += event.fragment
            return [self._about("response.function_call_arguments.delta", delta=event.fragment)]
        if isinstance(event, Finish):
            self.finish = event
            return self.close()
        return []  # log-probabilities are not part of this protocol's output here

    @property
    def truncated(self) -> bool:
        return self.finish is not None and self.finish.reason == "length"

    # -- items -----------------------------------------------------------------------------

    def _text(self, text: str) -> list[Event]:
        events: list[Event] = []
        if self._open is None or self._open["type"] != "message":
            if not (self._space + text).strip():
                self._space += text
                return []
            text, self._space = self._space + text, ""
            events += self._begin({"type": "message", "id": item_id("msg"), "status": "in_progress",
                                   "role": "assistant", "content": []})
            events.append(self._part("content_part", "content", {"type": "output_text", "text": "", "annotations": []}))
        assert self._open is not None
        self._open["content"][0]["text"] += text
        return events + [self._about("response.output_text.delta", content_index=0, delta=text, logprobs=[])]

    def _thought(self, text: str) -> list[Event]:
        if not text:
            return []
        events: list[Event] = []
        if self._open is None or self._open["type"] != "reasoning":
            events += self._begin({"type": "reasoning", "id": item_id("rs"), "summary": []})
            events.append(self._part("reasoning_summary_part", "summary", {"type": "summary_text", "text": ""}))
        assert self._open is not None
        self._open["summary"][0]["text"] += text
        return events + [self._about("response.reasoning_summary_text.delta", summary_index=0, delta=text)]

    def _begin(self, item: dict[str, Any]) -> list[Event]:
        events = self.close()
        self.items.append(item)
        self._open = item
        return events + [{"type": "response.output_item.added", "output_index": len(self.items) - 1,
                          "item": copy.deepcopy(item)}]

    def _part(self, kind: str, field: str, part: dict[str, Any]) -> Event:
        assert self._open is not None
        self._open[field].append(part)
        index = "content_index" if field == "content" else "summary_index"
        return self._about(f"response.{kind}.added", **{index: 0}, part=dict(part))

    def close(self, status: str | None = None) -> list[Event]:
        """End the open item: its done events, then `response.output_item.done`."""
        item = self._open
        if item is None:
            return []
        status = status or ("incomplete" if self.truncated else "completed")
        if item["type"] == "message":
            part = item["content"][0]
            events = [self._about("response.output_text.done", content_index=0, text=part["text"], logprobs=[]),
                      self._about("response.content_part.done", content_index=0, part=dict(part))]
        elif item["type"] == "reasoning":
            part = item["summary"][0]
            events = [self._about("response.reasoning_summary_text.done", summary_index=0, text=part["text"]),
                      self._about("response.reasoning_summary_part.done", summary_index=0, part=dict(part))]
        else:
            events = [self._about("response.function_call_arguments.done", arguments=item["arguments"])]
        if "status" in item:
            item["status"] = status
        self._open = None
        return events + [{"type": "response.output_item.done", "output_index": len(self.items) - 1,
                          "item": copy.deepcopy(item)}]

    def _about(self, kind: str, **fields: Any) -> Event:
        assert self._open is not None
        return {"type": kind, "item_id": self._open["id"], "output_index": len(self.items) - 1, **fields}


Keep = Callable[[dict[str, Any], Output], None]  # called with each finished response and its output


class Numbered:
    """The named, numbered SSE events of one streamed response, and its keepalive: a repeated
    `response.in_progress` (a real event: clients such as the Codex CLI time a stream out on
    events, and skip SSE comments)."""

    def __init__(self, shell: Shell) -> None:
        self.shell, self.out, self._numbers = shell, Output(shell.namespaces), itertools.count()

    def emit(self, event: Event) -> bytes:
        event["sequence_number"] = next(self._numbers)
        return frame(event, event=event["type"])

    def keepalive(self) -> bytes:
        return self.emit({"type": "response.in_progress", "response": self.shell(self.out, "in_progress")})


async def stream(turn: Turn, events: Numbered, keep: Keep) -> AsyncIterator[bytes]:
    """The whole streamed response: created, in_progress, the items' events, then completed or
    incomplete; an error once streaming has begun is an `error` event, then `response.failed`."""
    shell, out, emit = events.shell, events.out, events.emit
    yield emit({"type": "response.created", "response": shell(out, "in_progress")})
    yield emit({"type": "response.in_progress", "response": shell(out, "in_progress")})
    try:
        async for _, event in turn.events():
            for e in out.add(event):
                yield emit(e)
    except Exception as exc:  # noqa: BLE001 - the stream has begun: report in-band, never crash
        error = stream_error(exc)
        message, param = ERROR_SHAPE.param_of(error)
        code = error.code or error.type
        yield emit({"type": "error", "code": code, "message": message, "param": param})
        out.close("incomplete")
        yield emit({"type": "response.failed",  # the response's error codes are OpenAI's few: this is a server error
                    "response": shell(out, "failed", {"code": "server_error", "message": message})})
        return
    response = shell(out)
    keep(response, out)
    yield emit({"type": f"response.{response['status']}", "response": response})


class Shell:
    """One response's body, made from its output so far, and what it says back about its request."""

    def __init__(self, req: ResponsesRequest, model: str) -> None:
        self.meta = {"id": item_id("resp"), "object": "response", "created_at": int(time.time())}
        fmt = req.text.format if req.text and req.text.format else None
        self.echo = {
            "instructions": req.instructions, "metadata": req.metadata or {}, "model": model,
            "parallel_tool_calls": req.parallel_tool_calls, "temperature": req.temperature, "top_p": req.top_p,
            "tool_choice": req.tool_choice if isinstance(req.tool_choice, str) else req.tool_choice.model_dump(),
            "tools": [_tool(t) for t in req.tools],
            "text": {"format": fmt.model_dump(by_alias=True, exclude_none=True) if fmt else {"type": "text"}},
            "reasoning": req.reasoning.model_dump() if req.reasoning else None,
            "max_output_tokens": req.max_output_tokens, "previous_response_id": req.previous_response_id,
            "store": req.store, "truncation": "disabled", "background": False,
        }
        self.namespaces = frozenset(t.name for t in req.tools if t.type == "namespace" and t.name)

    def __call__(self, out: Output, status: str | None = None,
                 error: dict[str, Any] | None = None) -> dict[str, Any]:
        final = status or ("incomplete" if out.truncated else "completed")
        usage = out.finish.usage if out.finish and final != "in_progress" else None
        items = out.items if final != "in_progress" else []
        return {**self.meta, "status": final, "completed_at": int(time.time()) if final == "completed" else None,
                "error": error,
                "incomplete_details": {"reason": "max_output_tokens"} if final == "incomplete" else None,
                **self.echo, "output": [dict(it) for it in items],
                "output_text": "".join(p["text"] for it in items if it["type"] == "message" for p in it["content"]),
                "usage": usage and {
                    "input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens,
                    "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
                    "output_tokens_details": {"reasoning_tokens": 0, **({"resampled_tokens": usage.resampled_tokens}
                                                                      if usage.resampled_tokens else {})},
                    "total_tokens": usage.total_tokens}}


async def collect(turn: Turn, shell: Shell, keep: Keep) -> dict[str, Any]:
    """The whole response at once (not streamed)."""
    out = Output(shell.namespaces)
    async for _, event in turn.events():
        out.add(event)
    response = shell(out)
    keep(response, out)
    return response


def _tool(t: Any) -> dict[str, Any]:
    """A tool of the request as the response echoes it."""
    if t.type != "function":
        return t.model_dump(exclude_none=True)
    return {"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters,
            "strict": True if t.strict is None else t.strict}


FIELDS = [(r"tools\.(\d+)\.parameters", r"tools.\1.parameters"), (r"json_schema", "text.format.schema"),
          (r"json_object", "text.format"), (r"messages", "input"), (r"logit_bias", "logit_bias")]
ERROR_SHAPE = errors.ErrorShape("/v1/responses", fields=FIELDS)  # OpenAI's shape, the Responses API's names
