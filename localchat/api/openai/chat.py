"""OpenAI chat completions, `POST /v1/chat/completions`: the request (schemas.py) in, the
generation's events out as `chat.completion.chunk` SSE or one `chat.completion`; and
`GET /v1/models`. Finish reasons and call ids are said here, in OpenAI's words."""

from __future__ import annotations

import asyncio

import secrets
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...generation import (Chat, Delta, Finish, Logprobs, PromptLogprobs, ReasoningDelta, ToolCallArguments,
                           ToolCallStart, Turn, Usage, total_usage)
from ...errors import LocalchatError
from ...models import ModelSpec
from ...models.describe import Description
from ..common import respond, stream_error
from .. import errors
from ..sse import DONE, frame, loosened_headers
from .schemas import ChatCompletionRequest, read_chat_request


def finish_reason(finish: Finish) -> str:
    """OpenAI's words for how a choice ended."""
    return "length" if finish.reason == "length" else "tool_calls" if finish.calls else "stop"


def call_id(neutral: str) -> str:
    return f"call_{neutral}"


def routes(chat: Chat) -> list[Route]:
    async def completions(request: Request) -> Response:
        req = await read_chat_request(request, chat.settings)
        schema = req.schema_source()  # the answer's schema, and the field it came in (an error about it names that)
        with schema_named(schema[1]):
            turn = await chat.start(await asyncio.to_thread(req.to_request, schema))  # (images decoded: off the loop)
        meta = {"id": f"chatcmpl-{secrets.token_hex(12)}", "created": int(time.time()), "model": turn.model}
        form = _Form(req.logprobs, req.return_tokens_as_token_ids, echoed(req),
                     bool(req.stream_options and req.stream_options.include_usage))
        return await respond(request, req.stream, lambda: _stream(turn, meta, form, request.url.path),
                             lambda: _collect(turn, meta, form), turn.close, lambda: loosened_headers(turn))

    async def models(request: Request) -> Response:
        models = chat.models
        return JSONResponse({"object": "list", "data": [
            _model_card(name, spec, name == models.default, await models.context_length(name),
                        models.loaded(name) is not None, await models.describe(name))
            for name, spec in models.registered().items()]})  # reading GGUF headers: off the event loop

    return [Route("/v1/chat/completions", completions, methods=["POST"]),
            Route("/chat/completions", completions, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]), Route("/models", models, methods=["GET"])]


def _delta(piece: Delta | ReasoningDelta | ToolCallStart | ToolCallArguments) -> dict[str, Any]:
    if isinstance(piece, Delta):
        return {"content": piece.content}
    if isinstance(piece, ReasoningDelta):
        return {"reasoning_content": piece.text}
    if isinstance(piece, ToolCallStart):
        return {"tool_calls": [{"index": piece.index, "id": call_id(piece.id), "type": "function",
                                "function": {"name": piece.name, "arguments": ""}}]}
    return {"tool_calls": [{"index": piece.index, "function": {"arguments": piece.fragment}}]}


@dataclass(frozen=True)
class _Form:
    """How the answer is written: log-probabilities (their tokens as `token_id:N`), the echo."""

    logprobs: bool = False
    token_ids: bool = False  # return_tokens_as_token_ids
    echo: str = ""  # the last message's text, when echo is asked and it is the assistant's (vLLM's)
    include_usage: bool = False


def echoed(req: ChatCompletionRequest) -> str:
    """vLLM's `echo`: the answer starts with the last message's text when that message is the
    assistant's (a prefill continued, or a turn the answer follows)."""
    last = req.messages[-1]
    if not req.echo or last.role != "assistant":
        return ""
    if isinstance(last.content, list):
        return "".join(p.text or "" for p in last.content if p.type == "text")
    return last.content or ""


@contextmanager
def schema_named(param: str | None) -> Iterator[None]:
    """An error about the answer's schema names the field the schema came in (top-level
    `json_schema`, `response_format.schema`), not the usual `response_format.json_schema.schema`."""
    try:
        yield
    except LocalchatError as exc:
        if exc.field == "json_schema" and param and param != "response_format.json_schema.schema":
            exc.field, exc.param, exc.message = None, param, f"{param}: {exc.message}"
        raise


async def _stream(turn: Turn, meta: dict[str, Any], form: _Form, path: str) -> AsyncIterator[bytes]:
    def chunk(i: int, delta: dict[str, Any], finish: str | None = None, lp: list | None = None) -> bytes:
        choice: dict[str, Any] = {"index": i, "delta": delta, "finish_reason": finish}
        if form.logprobs:
            choice["logprobs"] = {"content": lp, "refusal": None} if lp else None
        return frame({**meta, "object": "chat.completion.chunk", "choices": [choice]})

    pending: list[list[dict[str, Any]]] = [[] for _ in range(turn.n)]  # logprobs not yet sent, per choice
    finishes: list[Finish] = []
    for i in range(turn.n):
        yield chunk(i, {"role": "assistant", "content": ""})
        if form.echo:
            yield chunk(i, {"content": form.echo})
    try:
        async for i, event in turn.events():
            if isinstance(event, PromptLogprobs):
                continue  # (not asked for: refused with stream)
            if isinstance(event, Logprobs):
                pending[i] += [logprob(t, form.token_ids) for t in event.tokens]
            elif isinstance(event, Finish):
                finishes.append(event)
                yield chunk(i, {}, finish_reason(event), pending[i])
            else:
                lp, pending[i] = (pending[i], []) if isinstance(event, Delta) else (None, pending[i])
                yield chunk(i, _delta(event), None, lp)
        if form.include_usage and finishes:
            yield frame({**meta, "object": "chat.completion.chunk", "choices": [], "usage": usage(total_usage(finishes))})
    except Exception as exc:  # noqa: BLE001 - the stream has started: report in-band, never crash
        yield frame(errors.OPENAI.render(stream_error(exc)))
    yield DONE


class _Choice:
    def __init__(self, form: _Form) -> None:
        self.form = form
        self.content: list[str] = [form.echo] if form.echo else []
        self.reasoning: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.logprobs: list[dict[str, Any]] = []
        self.finish: Finish | None = None

    def add(self, event: Any) -> None:
        if isinstance(event, Delta):
            self.content.append(event.content)
        elif isinstance(event, ReasoningDelta):
            self.reasoning.append(event.text)
        elif isinstance(event, ToolCallStart):
            self.calls.append({"id": call_id(event.id), "type": "function",
                               "function": {"name": event.name, "arguments": ""}})
        elif isinstance(event, ToolCallArguments):
            self.calls[event.index]["function"]["arguments"] += event.fragment
        elif isinstance(event, Logprobs):
            self.logprobs += [logprob(t, self.form.token_ids) for t in event.tokens]
        else:
            self.finish = event

    def message(self, index: int) -> dict[str, Any]:
        text = "".join(self.content)
        message: dict[str, Any] = {"role": "assistant", "content": text if text or not self.calls else None}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = self.calls
        assert self.finish is not None
        return {"index": index, "message": message, "finish_reason": finish_reason(self.finish),
                "logprobs": {"content": self.logprobs, "refusal": None} if self.form.logprobs else None}


async def _collect(turn: Turn, meta: dict[str, Any], form: _Form) -> dict[str, Any]:
    choices = [_Choice(form) for _ in range(turn.n)]
    prompt: dict[str, Any] = {}
    async for i, event in turn.events():
        if isinstance(event, PromptLogprobs):
            prompt["prompt_logprobs"] = prompt_logprobs(event)
        else:
            choices[i].add(event)
    total = total_usage([c.finish for c in choices if c.finish is not None])
    return {**meta, "object": "chat.completion", "choices": [c.message(i) for i, c in enumerate(choices)],
            "usage": usage(total), **prompt}


def prompt_logprobs(event: PromptLogprobs) -> list[dict[str, Any] | None]:
    """vLLM's shape: None for the first prompt token, then for each one {token id: {logprob,
    rank, decoded_token}} for the token itself and the most likely alternatives."""
    out: list[dict[str, Any] | None] = [None]
    for t in event.tokens:
        entry = {str(x.id): {"logprob": x.logprob, "rank": r, "decoded_token": x.token} for r, x in enumerate(t.top, 1)}
        entry[str(t.id)] = {"logprob": t.logprob, "rank": t.rank, "decoded_token": t.token}
        out.append(entry)
    return out


def logprob(t: Any, as_ids: bool = False) -> dict[str, Any]:
    """A token's entry; `as_ids` (vLLM's return_tokens_as_token_ids): tokens as `token_id:N`."""
    def name(x: Any) -> str:
        return f"token_id:{x.id}" if as_ids else x.token

    return {"token": name(t), "logprob": t.logprob, "bytes": t.bytes,
            "top_logprobs": [{"token": name(x), "logprob": x.logprob, "bytes": x.bytes} for x in t.top]}


def usage(u: Usage) -> dict[str, Any]:
    """OpenAI's usage; `completion_tokens_details.resampled_tokens` (localchat's own) counts the tokens
    written and taken back because a value broke the schema, when there were any; with a prediction,
    `accepted_prediction_tokens` (its tokens the answer wrote, in order) and
    `rejected_prediction_tokens` (the rest of it), as OpenAI reports them."""
    out = {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
           "total_tokens": u.total_tokens, "prompt_tokens_details": {"cached_tokens": u.cached_tokens}}
    details: dict[str, int] = {}
    if u.prediction is not None:
        details["accepted_prediction_tokens"], details["rejected_prediction_tokens"] = u.prediction
    if u.resampled_tokens:
        details["resampled_tokens"] = u.resampled_tokens
    if details:
        out["completion_tokens_details"] = details
    return out


def _model_card(name: str, spec: ModelSpec, default: bool, context_length: int | None, loaded: bool,
                described: Description) -> dict[str, Any]:
    """OpenAI's fields, then ours: what the model is and can do, from its file or the model loaded."""
    return {"id": name, "object": "model", "created": 0, "owned_by": "localchat",
            "aliases": spec.aliases, "default": default,
            "context_length": context_length, "loaded": loaded, **described.card()}
