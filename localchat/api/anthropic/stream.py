"""The response side of the Anthropic Messages API: generation events → content blocks
(`thinking`, `text`, `tool_use`), sent as Anthropic's named SSE events or collected into one
message.

One `Blocks` turns the events into block events for both paths, so a streamed answer and a
collected one always hold the same blocks. Tool-call arguments only ever go into their own
`tool_use` block as `input_json_delta` fragments, never into a text block."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from ...generation import Delta, Finish, Logprobs, ReasoningDelta, ToolCallArguments, ToolCallStart, Turn, Usage
from ..common import stream_error
from .. import errors
from ..sse import frame

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                500: "api_error", 503: "overloaded_error", 529: "overloaded_error"}

Event = tuple[str, dict[str, Any]]  # (SSE event name, data)


def error_type(status: int) -> str:
    return _ERROR_TYPES.get(status) or ("invalid_request_error" if status < 500 else "api_error")


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type(status), "message": message}}


def tool_use_id(neutral: str) -> str:
    return "toolu_" + neutral


class Blocks:
    """Generation events → content block events, in order: a block is opened when the kind of
    output changes (thinking, text, each tool call) and closed before the next one opens."""

    def __init__(self) -> None:
        self.content: list[dict[str, Any]] = []  # the blocks so far, as a collected message holds them
        self._open: tuple[str, int] | None = None  # (kind, tool call index or -1)
        self._json: dict[int, str] = {}  # block index → a tool call's arguments so far

    def push(self, event: Delta | ReasoningDelta | ToolCallStart | ToolCallArguments) -> list[Event]:
        if isinstance(event, ToolCallStart):
            block = {"type": "tool_use", "id": tool_use_id(event.id), "name": event.name, "input": {}}
            return self._start(("tool_use", event.index), block)
        if isinstance(event, ToolCallArguments):
            if self._open != ("tool_use", event.index):
                return []  # arguments of a call that was never announced: nothing to attach them to
            self._json[len(self.content) - 1] += event.fragment
            return [self._delta({"type": "input_json_delta", "partial_json": event.fragment})]
        block, text = ("thinking", event.text) if isinstance(event, ReasoningDelta) else ("text", event.content)
        if not text:
            return []
        out = [] if self._open == (block, -1) else self._start((block, -1), {"type": block, block: "", **(
            {"signature": ""} if block == "thinking" else {})})
        self.content[-1][block] += text
        return out + [self._delta({"type": f"{block}_delta", block: text})]

    def close(self) -> list[Event]:
        if self._open is None:
            return []
        self._open = None
        index = len(self.content) - 1
        if index in self._json:
            self.content[index]["input"] = _parsed(self._json[index])
        return [("content_block_stop", {"type": "content_block_stop", "index": index})]

    def _start(self, key: tuple[str, int], block: dict[str, Any]) -> list[Event]:
        out = self.close()
        self._open = key
        self.content.append(block)
        if block["type"] == "tool_use":
            self._json[len(self.content) - 1] = ""
        start = {"type": "content_block_start", "index": len(self.content) - 1, "content_block": dict(block)}
        return out + [("content_block_start", start)]

    def _delta(self, delta: dict[str, Any]) -> Event:
        return "content_block_delta", {"type": "content_block_delta", "index": len(self.content) - 1, "delta": delta}


def _parsed(arguments: str) -> Any:
    """A call's arguments: grammar-constrained JSON, unless max_tokens cut the call short."""
    try:
        return json.loads(arguments)
    except ValueError:
        return {}


def usage(u: Usage) -> dict[str, int]:
    """Anthropic's counts: `input_tokens` are the prompt tokens not read from the cache."""
    return {"input_tokens": u.prompt_tokens - u.cached_tokens, "output_tokens": u.completion_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": u.cached_tokens}


def _ending(finish: Finish) -> dict[str, Any]:
    """Anthropic's words for how the answer ended (and the stop sequence that ended it)."""
    reason = {"stop": "stop_sequence", "length": "max_tokens"}.get(finish.reason) or (
        "tool_use" if finish.calls else "end_turn")
    return {"stop_reason": reason, "stop_sequence": finish.matched_stop}


async def collect(turn: Turn, meta: dict[str, Any]) -> dict[str, Any]:
    blocks, finish = Blocks(), None
    async for _, event in turn.events():
        if isinstance(event, Finish):
            finish = event
        elif not isinstance(event, Logprobs):
            blocks.push(event)
    blocks.close()
    assert finish is not None
    return {**meta, "content": blocks.content, **_ending(finish), "usage": usage(finish.usage)}


async def stream(turn: Turn, meta: dict[str, Any]) -> AsyncIterator[bytes]:
    """message_start, ping, the blocks' events, message_delta, message_stop; an error after
    the first byte is an `error` event. message_start counts the whole prompt as input; how much
    of it came from the cache is known once decoding starts: message_delta has the split."""
    start = usage(Usage(turn.prompt_tokens, 0, 0))
    yield frame({"type": "message_start", "message": {**meta, "content": [], "stop_reason": None,
                                                      "stop_sequence": None, "usage": start}}, event="message_start")
    yield frame({"type": "ping"}, event="ping")
    blocks, finish = Blocks(), None
    try:
        async for _, event in turn.events():
            if isinstance(event, Finish):
                finish = event
            elif not isinstance(event, Logprobs):
                for name, data in blocks.push(event):
                    yield frame(data, event=name)
        for name, data in blocks.close():
            yield frame(data, event=name)
        assert finish is not None
        yield frame({"type": "message_delta", "delta": _ending(finish), "usage": usage(finish.usage)},
                    event="message_delta")
        yield frame({"type": "message_stop"}, event="message_stop")
    except Exception as exc:  # noqa: BLE001 - the stream has started: report in-band, never crash
        error = stream_error(exc)
        yield frame(error_body(error.status, ERROR_SHAPE.param_of(error)[0]), event="error")


FIELDS = [(r"tools\.(\d+)\.parameters", r"tools.\1.input_schema"), (r"json_schema", "output_config.format.schema"),
          (r"json_object", "output_config.format"), (r"stop", "stop_sequences")]
ERROR_SHAPE = errors.ErrorShape("/v1/messages", lambda status, kind, message, param, code: error_body(status, message),
                                FIELDS)  # Anthropic's shape and words
