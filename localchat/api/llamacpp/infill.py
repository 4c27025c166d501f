"""llama.cpp's own routes, as its editor plugins (llama.vim, llama.vscode) call them:
`POST /infill` (fill-in-the-middle with other files as context), `GET /props`,
`POST /tokenize`, `POST /detokenize` (generation/tokens.py). Same generation step as every other
protocol."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from collections.abc import AsyncIterator
from typing import Any

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...errors import LocalchatError
from ...generation import Chat, Delta, Finish, GenerationRequest, Turn
from ..body import parse, read_json
from ..common import Lenient as _Lenient, respond, sampling, stream_error
from ..openai.schemas import ChatCompletionRequest
from .. import errors
from ..sse import frame


class ExtraFile(_Lenient):
    """A file of the project, as context: `text` is required (a 400 names the chunk without it), as in llama-server."""

    filename: str = "tmp"
    text: str = Field(strict=True)


class InfillRequest(_Lenient):
    model: str | None = None
    input_prefix: str = ""
    input_suffix: str = ""
    input_extra: list[ExtraFile] = []
    prompt: str = ""  # text that goes right after the prefix (what the user typed so far)
    n_predict: int = Field(-1, ge=-2)  # -1, -2: until the model stops (within the server's cap); 0: only warm the cache
    stream: bool = False
    temperature: float | None = Field(None, ge=0, le=2)
    top_k: int | None = Field(None, ge=0)
    top_p: float | None = Field(None, ge=0, le=1)
    min_p: float | None = Field(None, ge=0, le=1)
    repeat_penalty: float | None = Field(None, gt=0, le=10)
    repeat_last_n: int | None = Field(None, ge=-1)
    repetition_stop: int | None = Field(None, ge=0)  # localchat's: 0 lets a loop run on
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    seed: int | None = None
    stop: list[str] = Field([], max_length=16)
    cache_prompt: bool = True  # false: the slot's prompt cache is neither read nor kept
    # llama.vscode's limits, as llama-server applies them (engine/sampling/text.py LineLimits); 0 or less: off
    n_indent: int = 0
    t_max_predict_ms: int = 0
    t_max_prompt_ms: int | None = None  # accepted and ignored, as llama-server does

    def to_request(self) -> GenerationRequest:
        knobs = {**self.model_dump(), "penalty_last_n": self.repeat_last_n,
                 # n_predict 0: the prompt is decoded (and cached); the answer is dropped
                 "max_tokens": self.n_predict if self.n_predict > 0 else 1 if self.n_predict == 0 else None}
        return GenerationRequest(model=self.model, prompt=self.input_prefix + self.prompt, suffix=self.input_suffix,
                                 extra=tuple((f.filename, f.text) for f in self.input_extra),
                                 sampling=replace(sampling(knobs, stop=self.stop), n_indent=max(self.n_indent, 0) or None,
                                                  t_max_predict_ms=max(self.t_max_predict_ms, 0) or None),
                                 cache_prompt=self.cache_prompt)


class TokenizeRequest(_Lenient):
    model: str | None = None
    content: str
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeRequest(_Lenient):
    model: str | None = None
    tokens: list[int]


def routes(chat: Chat) -> list[Route]:
    async def infill(request: Request) -> Response:
        req = parse(InfillRequest, await read_json(request, chat.settings.max_body_bytes))
        started = time.perf_counter()
        turn = await chat.start(await asyncio.to_thread(req.to_request))
        if req.n_predict == 0:  # warm the cache: answer now, let the prompt decode behind it
            asyncio.get_running_loop().create_task(_drain(turn))
            return JSONResponse(_final(turn.model, "", None, started, 0))
        return await respond(request, req.stream, lambda: _stream(turn, started), lambda: _collect(turn, started),
                             turn.close)

    async def props(request: Request) -> Response:
        spec = chat.models.resolve(request.query_params.get("model") or None)
        loaded = chat.models.loaded(spec.name)
        sizing = None if loaded else await chat.models.sizing(spec.name)
        stats = loaded.stats if loaded else None
        n_ctx = stats.n_ctx if stats else sizing.context if sizing else None
        slots = stats.slots if stats else sizing.slots if sizing else None
        projector = await chat.models.projector(spec.name)
        return JSONResponse({
            "default_generation_settings": {"n_ctx": n_ctx, "model": spec.name, "params": {
                **spec.sampling.model_dump(), "n_predict": spec.sampling.max_tokens or -1}},
            "total_slots": slots, "model_alias": spec.name, "model_path": str(spec.location() or ""),
            "chat_template": loaded.template if loaded else "", "modalities": {"vision": bool(projector and projector.vision),
                                                                          "audio": bool(projector and projector.audio)},
            "build_info": "localchat", "infill": bool(loaded and loaded.can_infill)})

    async def tokenize(request: Request) -> Response:
        body = await read_json(request, chat.settings.max_body_bytes)
        if isinstance(body, dict) and "messages" in body:  # vLLM's: a chat request's prompt, as the server reads it
            ask = await asyncio.to_thread(lambda: parse(ChatCompletionRequest, body))
            tokens = await chat.prompt_tokens(await asyncio.to_thread(ask.to_request))
            pieces = await chat.pieces(ask.model, tokens) if body.get("with_pieces") is True else None
        else:
            req = parse(TokenizeRequest, body)
            done = await chat.tokenize(req.model, req.content, add_special=req.add_special,
                                       parse_special=req.parse_special, pieces=req.with_pieces)
            tokens, pieces = done.tokens, done.pieces
        if pieces is None:
            return JSONResponse({"tokens": tokens})
        return JSONResponse({"tokens": [{"id": t, "piece": p} for t, p in zip(tokens, pieces)]})

    async def detokenize(request: Request) -> Response:
        req = parse(DetokenizeRequest, await read_json(request, chat.settings.max_body_bytes))
        return JSONResponse({"content": await chat.detokenize(req.model, req.tokens)})

    return [Route("/infill", infill, methods=["POST"]), Route("/props", props, methods=["GET"]),
            Route("/tokenize", tokenize, methods=["POST"]), Route("/detokenize", detokenize, methods=["POST"])]


async def _drain(turn: Turn) -> None:
    try:
        async for _ in turn.events():
            pass
    except LocalchatError:
        pass


def _final(model: str, content: str, finish: Finish | None, started: float, predicted: int) -> dict[str, Any]:
    usage = finish.usage if finish else None
    elapsed = (time.perf_counter() - started) * 1000
    stop_type = "limit" if finish and finish.reason == "length" else "eos"
    return {"content": content, "stop": True, "model": model, "stop_type": stop_type if finish else "none",
            "tokens_predicted": predicted, "tokens_evaluated": usage.prompt_tokens if usage else 0,
            "tokens_cached": usage.cached_tokens if usage else 0, "truncated": False,
            "timings": {"prompt_n": (usage.prompt_tokens - usage.cached_tokens) if usage else 0,
                        "cache_n": usage.cached_tokens if usage else 0, "predicted_n": predicted,
                        "predicted_ms": elapsed, "predicted_per_second": predicted / elapsed * 1000 if elapsed else 0}}


async def _collect(turn: Turn, started: float) -> dict[str, Any]:
    text, finish = [], None
    async for _, event in turn.events():
        if isinstance(event, Delta):
            text.append(event.content)
        elif isinstance(event, Finish):
            finish = event
    return _final(turn.model, "".join(text), finish, started, finish.usage.completion_tokens if finish else 0)


async def _stream(turn: Turn, started: float) -> AsyncIterator[bytes]:
    try:
        async for _, event in turn.events():
            if isinstance(event, Delta) and event.content:
                yield frame({"content": event.content, "stop": False})
            elif isinstance(event, Finish):
                yield frame(_final(turn.model, "", event, started, event.usage.completion_tokens))
    except Exception as exc:  # noqa: BLE001 - the stream has started: report in-band, never crash
        yield frame(errors.OPENAI.render(stream_error(exc)))
