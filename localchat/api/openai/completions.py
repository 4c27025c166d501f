"""OpenAI legacy completions, `POST /v1/completions`: a raw prompt (no chat template), or
fill-in-the-middle with `suffix`; `echo`, legacy `logprobs`, several prompts, `n`.

Each prompt is one generation (its n choices decode together); choice `p * n + i` is prompt
p's i-th. Code-completion clients stream short answers with many stop strings and cancel often."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from pydantic import Field
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...errors import InvalidRequest
from ...generation import Chat, Delta, Finish, GenerationRequest, Logprobs, OutputRules, PromptLogprobs, Turn, total_usage
from ..body import KeepAlive, parse, read_json
from ..fields import SamplingFields
from .schemas import StreamOptions
from ..common import respond, sampling, stream_error
from .. import errors
from .chat import prompt_logprobs
from ..sse import DONE, frame


Written = Callable[[list], dict[str, Any]] | None  # a choice's logprobs in the legacy shape, if asked for


class CompletionRequest(SamplingFields):  # type: ignore[misc, valid-type]
    model: str | None = None
    prompt: str | list[str] = Field(min_length=1)
    suffix: str | None = None
    n: int = Field(1, ge=1, le=64)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=20)
    logit_bias: dict[str, float] | None = None
    ignore_eos: bool = False
    keep_alive: KeepAlive = None
    cache_prompt: bool = True  # extension (llama.cpp's): false: the slot's prompt cache is neither read nor kept
    return_tokens_as_token_ids: bool = False  # extension (vLLM's): logprobs' tokens as `token_id:N`
    prompt_logprobs: int | None = Field(None, ge=0, le=20)  # extension (vLLM's): the prompt tokens' log-probabilities
    json_schema: dict[str, Any] | bool | None = None  # extension (llama.cpp's): the text is JSON for this schema
    grammar: str | None = None  # extension (llama.cpp's): raw GBNF

    def requests(self) -> list[GenerationRequest]:
        knobs = self.model_dump()
        prompts = [self.prompt] if isinstance(self.prompt, str) else self.prompt
        overrides = sampling(knobs, stop=self.stop, logit_bias=self.logit_bias, ignore_eos=self.ignore_eos)
        if self.prompt_logprobs is not None and self.stream:
            raise InvalidRequest("prompt_logprobs: not available when streaming (as in vLLM)", param="prompt_logprobs")
        output = OutputRules(json_schema=self.json_schema, grammar=self.grammar)
        return [GenerationRequest(model=self.model, prompt=p, suffix=self.suffix, sampling=overrides, n=self.n,
                                  logprobs=self.logprobs, keep_alive=self.keep_alive,  # type: ignore[arg-type]
                                  cache_prompt=self.cache_prompt, output=output, prompt_logprobs=self.prompt_logprobs)
                for p in prompts]


def routes(chat: Chat) -> list[Route]:
    async def completions(request: Request) -> Response:
        settings = chat.settings
        body = await read_json(request, settings.max_body_bytes)

        def translate() -> tuple[CompletionRequest, list]:  # a long prompt, a batch of them: off the loop
            req = parse(CompletionRequest, body)
            return req, req.requests()

        req, asks = await asyncio.to_thread(translate)
        if req.suffix is not None and req.echo:
            raise InvalidRequest("echo cannot be used with suffix", param="echo")
        turns: list[Turn] = []
        try:
            for ask in asks:
                turns.append(await chat.start(ask))
        except BaseException:
            for turn in turns:
                turn.close()
            raise
        meta = {"id": f"cmpl-{secrets.token_hex(12)}", "created": int(time.time()), "model": turns[0].model}
        echo = [a.prompt or "" for a in asks] if req.echo else None
        close = lambda: [t.close() for t in turns]  # noqa: E731
        usage = bool(req.stream_options and req.stream_options.include_usage)
        as_ids = req.return_tokens_as_token_ids
        logprobs = (lambda tokens: legacy_logprobs(tokens, as_ids)) if req.logprobs is not None else None
        return await respond(request, req.stream, lambda: _stream(turns, req.n, meta, echo, logprobs, usage),
                             lambda: _collect(turns, req.n, meta, echo, logprobs), close)

    return [Route("/v1/completions", completions, methods=["POST"]),
            Route("/completions", completions, methods=["POST"])]


async def merged(turns: list[Turn], n: int) -> AsyncIterator[tuple[int, Any]]:
    """The events of several turns as they come, with their choice index (turn p, choice i → p * n + i)."""
    queue: asyncio.Queue[tuple[int, Any] | BaseException | None] = asyncio.Queue()

    async def pump(p: int, turn: Turn) -> None:
        try:
            async for i, event in turn.events():
                await queue.put((p * n + i, event))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            await queue.put(exc)
        finally:
            await queue.put(None)

    tasks = [asyncio.create_task(pump(p, t)) for p, t in enumerate(turns)]
    try:
        left = len(tasks)
        while left:
            item = await queue.get()
            if item is None:
                left -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()


class _Choice:
    def __init__(self, echo: str) -> None:
        self.text, self.tokens, self.finish = [echo], [], None
        self.prompt: list | None = None  # prompt_logprobs, when asked for

    def add(self, event: Any) -> None:
        if isinstance(event, PromptLogprobs):
            self.prompt = prompt_logprobs(event)
        elif isinstance(event, Delta):
            self.text.append(event.content)
        elif isinstance(event, Logprobs):
            self.tokens += event.tokens
        elif isinstance(event, Finish):
            self.finish = event


async def _collect(turns: list[Turn], n: int, meta: dict[str, Any], echo: list[str] | None,
                   logprobs: Written) -> dict[str, Any]:
    choices = [_Choice(echo[c // n] if echo else "") for c in range(len(turns) * n)]
    async for c, event in merged(turns, n):
        for target in (choices[c: c + n] if isinstance(event, PromptLogprobs) else [choices[c]]):
            target.add(event)  # a prompt's logprobs go to each of its choices
    finishes = [ch.finish for ch in choices if ch.finish is not None]
    usage = total_usage(finishes) if finishes else None
    prompt_tokens = sum(ch.finish.usage.prompt_tokens for k, ch in enumerate(choices) if k % n == 0 and ch.finish)
    return {**meta, "object": "text_completion", "choices": [
        {"text": "".join(ch.text), "index": c, "finish_reason": _reason(ch.finish) if ch.finish else None,
         "logprobs": logprobs(ch.tokens) if logprobs else None,
         **({"prompt_logprobs": ch.prompt} if ch.prompt is not None else {})} for c, ch in enumerate(choices)],
        "usage": _usage(prompt_tokens, sum(f.usage.completion_tokens for f in finishes),
                        usage.cached_tokens if usage else 0)}


async def _stream(turns: list[Turn], n: int, meta: dict[str, Any], echo: list[str] | None, logprobs: Written,
                  include_usage: bool) -> AsyncIterator[bytes]:
    def chunk(c: int, text: str, finish: str | None = None, tokens: list | None = None) -> bytes:
        return frame({**meta, "object": "text_completion", "choices": [{
            "text": text, "index": c, "finish_reason": finish,
            "logprobs": logprobs(tokens or []) if logprobs else None}]})

    pending: dict[int, list] = {}
    finishes: dict[int, Finish] = {}
    try:
        for c in range(len(turns) * n) if echo else ():
            yield chunk(c, echo[c // n])
        async for c, event in merged(turns, n):
            if isinstance(event, Logprobs):
                pending.setdefault(c, []).extend(event.tokens)
            elif isinstance(event, Delta) and event.content:
                yield chunk(c, event.content, None, pending.pop(c, None))
            elif isinstance(event, Finish):
                finishes[c] = event
                yield chunk(c, "", _reason(event), pending.pop(c, None))
        if include_usage and finishes:
            prompt = sum(f.usage.prompt_tokens for c, f in finishes.items() if c % n == 0)
            done = list(finishes.values())
            yield frame({**meta, "object": "text_completion", "choices": [], "usage": _usage(
                prompt, sum(f.usage.completion_tokens for f in done), total_usage(done).cached_tokens)})
    except Exception as exc:  # noqa: BLE001 - the stream has started: report in-band, never crash
        yield frame(ERROR_SHAPE.render(stream_error(exc)))
    yield DONE


def legacy_logprobs(tokens: list, as_ids: bool = False) -> dict[str, Any]:
    """OpenAI's legacy shape: parallel lists of tokens, their log-probabilities, the top
    alternatives as {token: logprob}, and each token's offset in the text; `as_ids` (vLLM's
    return_tokens_as_token_ids): tokens named `token_id:N`."""
    def name(x: Any) -> str:
        return f"token_id:{x.id}" if as_ids else x.token

    offsets, at = [], 0
    for t in tokens:
        offsets.append(at)
        at += len(t.token)
    return {"tokens": [name(t) for t in tokens], "token_logprobs": [t.logprob for t in tokens],
            "top_logprobs": [{name(x): x.logprob for x in t.top} for t in tokens], "text_offset": offsets}


def _usage(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def _reason(finish: Finish) -> str:
    return "length" if finish.reason == "length" else "stop"


# OpenAI's shape; a prompt, not messages
ERROR_SHAPE = errors.ErrorShape("/v1/completions", fields=[("messages", "prompt"), ("json_schema", "json_schema"),
                                                           *errors.OPENAI_FIELDS])
