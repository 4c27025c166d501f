"""The peer's side of token mode (engine/remote/upstream.py is the other), an engine served over HTTP
(not a protocol: server.py mounts it beside them, api/ knows nothing of it): the routes under
/internal/engine that another localchat calls for a model its models.toml names with
`upstream = "http://this-server"`. That server renders the prompt and builds the grammar; this
one tokenizes with the model's vocabulary and decodes. Served only with `localchat serve --peer`
(the `peer` setting), behind the same guard as every route (loopback Host, the API key).

Every route takes a JSON body naming the `model`. Data crosses as engine/wire.py encodes it;
an error is answered as the engine raised it (its class by name), so the other side raises the
same one. `generate` streams SSE: a Prepared once the request is taken, its events, then
`{"end": true}` (or `{"error": …}`), with a keepalive comment every 10 s while nothing comes."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .api.body import read_json
from .api.common import stream_error
from .api.sse import EventStream, frame
from .engine import wire
from .engine.params import KNOBS, Generate, Prepared
from .engine.remote.upstream import PREFIX
from .errors import InvalidRequest, LocalchatError
from .generation import Chat, constraints, limits
from .generation.prepare import logit_bias
from .generation.runners import submitted
from .models import Settings
from .models.host import LoadedModel
from .models.upstream import info_dict

Work = Callable[[dict[str, Any], str], Awaitable[Response]]


def _json(data: Any, status: int = 200) -> Response:
    """JSON as the wire writes it (a log-probability may be -Infinity, which Python's JSON reads back)."""
    return Response(json.dumps(data, separators=(",", ":")), status_code=status, media_type="application/json")


def _route(settings: Settings, name: str, work: Work) -> Route:
    async def endpoint(request: Request) -> Response:
        try:
            body = await read_json(request, settings.max_body_bytes)
            model = body.get("model")
            if not isinstance(model, str):
                raise InvalidRequest("model: the model's name, a string", param="model")
            return await work(body, model)
        except LocalchatError as exc:
            return _json({"error": wire.encode_error(exc)}, exc.status)
    return Route(f"{PREFIX}/{name}", endpoint, methods=["POST"])


def routes(chat: Chat) -> list[Route]:
    models, settings = chat.models, chat.settings
    if not settings.peer:
        return []

    async def describe(body: dict[str, Any], name: str) -> Response:  # without loading it
        described = await models.describe(name)
        return _json({"name": models.resolve(name).name, **described.card()})

    async def open_(body: dict[str, Any], name: str) -> Response:
        async with models.hold(name) as loaded:
            return _json(facts(loaded))

    async def stats(body: dict[str, Any], name: str) -> Response:  # without loading it
        stats = models.stats(models.resolve(name).name)
        return _json({"stats": stats.as_dict() if stats else None})

    async def tokenize(body: dict[str, Any], name: str) -> Response:
        async with models.hold(name) as loaded:
            vocab = loaded.engine.tokenizer
            if "segments" in body and "at" in body:  # the tokens, and where segment `at` starts
                at = body["at"]
                if not isinstance(at, int) or isinstance(at, bool) or at < 0:
                    raise InvalidRequest("at: a segment's index", param="at")
                tokens, start = await asyncio.to_thread(vocab.tokenize_at, _segments(body["segments"]), at)
                return _json({"tokens": tokens, "at": start})
            if "segments" in body:
                segments = _segments(body["segments"])
                tokens = await asyncio.to_thread(vocab.tokenize, segments)
            else:
                data, special = _bytes(body.get("data")), body.get("parse_special")
                if not isinstance(special, bool):
                    raise InvalidRequest("parse_special: true or false", param="parse_special")
                tokens = await asyncio.to_thread(vocab.tokenize_bytes, data, special)
            return _json({"tokens": tokens})

    async def pieces(body: dict[str, Any], name: str) -> Response:
        async with models.hold(name) as loaded:
            vocab = loaded.engine.tokenizer
            tokens = _tokens(body.get("tokens"), vocab.n_vocab, "tokens")
            got = await asyncio.to_thread(lambda: [base64.b64encode(vocab.piece(t)).decode() for t in tokens])
            return _json({"pieces": got})

    async def embed(body: dict[str, Any], name: str) -> Response:
        async with models.hold(name) as loaded:
            inputs = _inputs(body.get("inputs"), loaded.engine.tokenizer.n_vocab, "inputs")
            return _json({"vectors": await loaded.engine.embed(inputs)})

    async def rerank(body: dict[str, Any], name: str) -> Response:
        async with models.hold(name) as loaded:
            n_vocab = loaded.engine.tokenizer.n_vocab
            judge = body.get("judge")
            judge = tuple(_tokens(judge, n_vocab, "judge")) if judge is not None else None
            if judge is not None and len(judge) != 2:
                raise InvalidRequest("judge: the yes and no tokens", param="judge")
            prompts = _inputs(body.get("prompts"), n_vocab, "prompts")
            return _json({"scores": await loaded.engine.rerank(prompts, judge)})  # type: ignore[arg-type]

    async def generate(body: dict[str, Any], name: str) -> Response:
        ask = await asyncio.to_thread(wire.decode, body.get("request"), Generate)  # a long prompt: off the loop
        lease = await models.lease(name)
        try:
            ask = await asyncio.to_thread(checked, ask, lease.model, settings)
            stream, n_prompt = await submitted(lease.model, ask)  # taken or refused, as this server's own
        except BaseException:
            lease.release()
            raise

        async def chunks() -> AsyncIterator[bytes]:
            yield frame(wire.encode(Prepared(n_prompt)))
            try:
                async for event in stream:
                    yield frame(wire.encode(event))
            except Exception as exc:  # noqa: BLE001 - the request's error, in the stream
                yield frame({"error": wire.encode_error(stream_error(exc))})
                return
            yield frame({"end": True})

        def close() -> None:
            stream.close()
            lease.release()

        return EventStream(chunks(), on_close=close)

    work: dict[str, Work] = {"describe": describe, "open": open_, "stats": stats, "tokenize": tokenize,
                             "pieces": pieces, "embed": embed, "rerank": rerank, "generate": generate}
    return [_route(settings, name, fn) for name, fn in work.items()]


def facts(loaded: LoadedModel) -> dict[str, Any]:
    """What the other side needs to render, constrain and size for the model (models/upstream.py reads it)."""
    engine, vocab, spec = loaded.engine, loaded.engine.tokenizer, loaded.spec
    return {"name": spec.name, "family": loaded.family.name, "template": loaded.template, "info": info_dict(loaded.info),
            "n_ctx": engine.n_ctx, "parallel": engine.parallel, "n_vocab": vocab.n_vocab, "bos": vocab.bos,
            "fim": vocab.fim, "stop_ids": sorted(loaded.stop_ids), "bytes": engine.stats().bytes,
            "projector": asdict(loaded.projector) if loaded.projector else None,
            "sizing": loaded.sizing.as_dict() if loaded.sizing else None,
            "sampling": spec.sampling.model_dump(), "system_prompt_strip": spec.system_prompt_strip}


# -- what comes from the network is checked before the engine sees it -----------------------

def checked(ask: Generate, loaded: LoadedModel, settings: Settings) -> Generate:
    """A request as the other side built it, checked as this server's own generation would have
    made it: tokens of this vocabulary, sampling within bounds, a grammar llama.cpp accepts, media
    of the size they say; max_tokens within this server's cap. Blocking (a grammar's check).
    What generation checks of a request, its functions check here too (limits, the logit bias,
    the constraint); only what it never has to check (tokens it made, bounds the protocols'
    models hold, media it decoded) is checked in this module."""
    n_vocab = loaded.engine.tokenizer.n_vocab
    limits.check_n(ask.n, loaded.engine.parallel)
    if ask.n < 1:
        raise InvalidRequest("n: at least 1", param="n")
    for where, tokens in (("tokens", ask.tokens), ("stop_tokens", ask.stop_tokens)):
        _tokens(list(tokens), n_vocab, where)
    logit_bias(ask.params.logit_bias, n_vocab)
    limits.check_stops(ask.params.stop, settings)
    knobs = {**asdict(ask.params), **asdict(ask.speed)}
    for key, bounds in KNOBS.items():
        value = knobs[key]
        if value is not None and not all(_within(value, op, limit) for op, limit in bounds.items()):
            raise InvalidRequest(f"{key}: {value} is outside {bounds}", param=key)
    for k, where in ((ask.logprobs, "logprobs"), (ask.prompt_logprobs, "prompt_logprobs")):
        if k is not None and not 0 <= k <= 20:
            raise InvalidRequest(f"{where}: 0 to 20", param=where)
    if ask.constraint is not None:
        constraints.check_given(ask.constraint, settings)
    for media in ask.media:
        if media.kind not in ("image", "audio") or not 0 <= media.at <= len(ask.tokens) or (
                media.kind == "image" and len(media.data) != media.width * media.height * 3):
            raise InvalidRequest(f"{media.param}: an {media.kind} that is not what it says", param=media.param)
    return replace(ask, params=replace(ask.params, max_tokens=limits.max_tokens(ask.params.max_tokens, settings)))


def _within(value: float, op: str, limit: float) -> bool:
    return {"ge": value >= limit, "gt": value > limit, "le": value <= limit, "lt": value < limit}[op]


def _tokens(data: Any, n_vocab: int, where: str) -> list[int]:
    if not isinstance(data, (list, dict)) or not all(type(t) is int and 0 <= t < n_vocab for t in data):
        raise InvalidRequest(f"{where}: token ids of this model's vocabulary (0..{n_vocab - 1})", param=where)
    return list(data)


def _inputs(data: Any, n_vocab: int, where: str) -> list[list[int]]:
    if not isinstance(data, list):
        raise InvalidRequest(f"{where}: lists of token ids", param=where)
    return [_tokens(item, n_vocab, f"{where}.{i}") for i, item in enumerate(data)]


def _bytes(data: Any) -> bytes:
    if isinstance(data, str):
        try:
            return base64.b64decode(data, validate=True)
        except ValueError:
            pass
    raise InvalidRequest("data: bytes in base64", param="data")


def _segments(data: Any) -> list[tuple[str, bool]]:
    if not isinstance(data, list) or not all(isinstance(s, list) and len(s) == 2 and isinstance(s[0], str)
                                             and isinstance(s[1], bool) for s in data):
        raise InvalidRequest("segments: [text, plain] pairs", param="segments")
    return [(text, plain) for text, plain in data]
