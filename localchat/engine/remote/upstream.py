"""A model that runs in another localchat (an `upstream` entry of models.toml, token mode).

This server renders the prompt and builds the grammar as for a model of its own; the peer
(`localchat serve --peer`) tokenizes with its model's vocabulary and decodes: its routes under
/internal/engine (localchat/peer.py) take the requests of this module as JSON (wire.py). The link's
failures are mapped to localchat's errors once, in `mapped`: refused → 503, a timeout → 504,
anything else (an answer broken off, a peer that is not one) → 502."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpx

from ...errors import LocalchatError, UpstreamError, UpstreamTimeout, UpstreamUnavailable
from .. import wire
from ..base import Emit, Stream, check_adapters, check_fits, no_slot_actions
from ..params import EngineStats, Generate, SlotDone, SlotInfo, UpstreamState

PREFIX = "/internal/engine"
# a request that failed on a kept-alive connection before any answer: the peer had dropped it
STALE = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)
LOAD_TIMEOUT = 600.0  # seconds the peer may take to load the model (a large one, from a slow disk)
DESCRIBE_TIMEOUT = 10.0  # seconds for what a model is and can do (read without loading it)


@dataclass(frozen=True)
class Peer:
    """Where a model runs: `url` as the entry gives it (http://host:port or …/v1), the model's name
    there, the key it wants, how long it may stay silent (`timeout`; it sends a keepalive every
    10 s while a prompt is read) and how long a connection may take."""

    url: str
    model: str
    api_key: str | None = None
    timeout: float = 60.0
    connect_timeout: float = 5.0

    def route(self, name: str) -> str:
        return self.url.rstrip("/").removesuffix("/v1") + f"{PREFIX}/{name}"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def timeouts(self, read: float | None = None) -> httpx.Timeout:
        return httpx.Timeout(read or self.timeout, connect=self.connect_timeout)


def mapped(peer: Peer, exc: BaseException) -> LocalchatError:
    """The one translation of the link's failures into localchat's errors."""
    where = f"the upstream {peer.url} (model {peer.model})"
    if isinstance(exc, LocalchatError):
        return exc
    if isinstance(exc, httpx.ConnectTimeout):
        return UpstreamTimeout(f"{where} did not accept a connection within {peer.connect_timeout:g} s", param="model")
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeout(f"{where} did not answer within {peer.timeout:g} s (upstream_timeout)", param="model")
    if isinstance(exc, httpx.ConnectError):
        return UpstreamUnavailable(f"{where} cannot be reached ({exc or type(exc).__name__}); is it running "
                                   "(localchat serve --peer)?", param="model")
    if isinstance(exc, httpx.HTTPError):
        return UpstreamError(f"the connection to {where} broke ({exc or type(exc).__name__})", param="model")
    if isinstance(exc, ValueError):  # not JSON, or not what the wire carries
        return UpstreamError(f"{where} sent what localchat cannot read ({exc}); is it another version?", param="model")
    return UpstreamError(f"{where} failed: {type(exc).__name__}: {exc}", param="model")


def refusal(peer: Peer, status: int, body: bytes) -> LocalchatError:
    """An answer other than 200: the peer's own error as it raised it, or what the status says."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and "class" in error:
        return wire.decode_error(error)
    text = error.get("message") if isinstance(error, dict) else body[:200].decode("utf-8", "replace")
    where = f"the upstream {peer.url} (model {peer.model})"
    if status == 404:
        return UpstreamError(f"{where} is not a localchat peer: start it with `localchat serve --peer`", param="model")
    if status in (401, 403):
        return UpstreamError(f"{where} refused this server ({status}: {text}); check the entry's api_key", param="model")
    return UpstreamError(f"{where} answered {status}: {text}", param="model")


def describe(peer: Peer) -> dict[str, Any]:
    """What the model is and can do, as the peer says, without loading it. Blocking."""
    try:
        r = httpx.post(peer.route("describe"), json={"model": peer.model}, headers=peer.headers(),
                       timeout=peer.timeouts(min(peer.timeout, DESCRIBE_TIMEOUT)))
    except httpx.HTTPError as exc:
        raise mapped(peer, exc) from None
    if r.status_code != 200:
        raise refusal(peer, r.status_code, r.content)
    return r.json()


class UpstreamTokenizer:
    """The peer's vocabulary: each call a request to it (blocking: the callers run in threads),
    pieces and control tokens' ids kept once asked."""

    def __init__(self, call: Any, facts: dict[str, Any]) -> None:
        self._call = call
        self.n_vocab: int = facts["n_vocab"]
        self.bos: int | None = facts["bos"]
        self.fim: dict[str, int] = dict(facts["fim"])
        self._pieces: dict[int, bytes] = {}
        self._ids: dict[str, int | None] = {}
        self._lock = threading.Lock()

    def tokenize(self, segments: Iterable[tuple[str, bool]]) -> list[int]:
        return self._call("tokenize", {"segments": [[text, bool(plain)] for text, plain in segments]})["tokens"]

    def tokenize_at(self, segments: list[tuple[str, bool]], at: int) -> tuple[list[int], int]:
        """One round trip: the peer says where segment `at` starts (a peer before it did not: then a
        second one for the segments before it)."""
        body = self._call("tokenize", {"segments": [[text, bool(plain)] for text, plain in segments], "at": at})
        if "at" in body:
            return body["tokens"], body["at"]
        return body["tokens"], len(self.tokenize(segments[:at]))

    def tokenize_bytes(self, data: bytes, parse_special: bool) -> list[int]:
        body = {"data": base64.b64encode(data).decode("ascii"), "parse_special": parse_special}
        return self._call("tokenize", body)["tokens"]

    def token_id(self, text: str) -> int | None:
        if text not in self._ids:
            ids = self.tokenize_bytes(text.encode(), parse_special=True)
            with self._lock:
                self._ids[text] = ids[0] if len(ids) == 1 else None
        return self._ids[text]

    def piece(self, token: int) -> bytes:
        if token not in self._pieces:
            self.pieces([token])
        return self._pieces[token]

    def pieces(self, tokens: Iterable[int]) -> list[bytes]:
        """Many tokens' pieces with one request for those not kept yet."""
        tokens = list(tokens)
        missing = sorted({t for t in tokens if t not in self._pieces})
        if missing:
            got = self._call("pieces", {"tokens": missing})["pieces"]
            with self._lock:
                self._pieces.update(zip(missing, (base64.b64decode(p) for p in got)))
        return [self._pieces[t] for t in tokens]


class Link:
    """What both remote engines (this one and upstream_chat.py's ChatEngine) keep of their link:
    its state ("starting", "ok", "failing": the last exchange failed, and why), the requests in
    flight (each a task on the event loop, cancelled by closing its stream) and closing it all."""

    def __init__(self, peer: Peer, name: str, http: httpx.Client) -> None:
        self.peer, self.name = peer, name or peer.model
        self.state, self.error = "starting", None
        self._http = http
        self._async: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._jobs: dict[int, tuple[asyncio.Task[None], int]] = {}  # in flight: the task, its n
        self._ids = itertools.count()

    def close(self) -> None:
        """From any thread (the host unloads an idle model in one): requests still in flight are
        cancelled, the connections closed."""
        self._http.close()
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        for task, _ in list(self._jobs.values()):
            loop.call_soon_threadsafe(task.cancel)
        if self._async is not None:
            try:
                asyncio.run_coroutine_threadsafe(self._async.aclose(), loop)
            except RuntimeError:  # the loop has stopped
                pass

    async def slots(self) -> list[SlotInfo]:
        raise no_slot_actions(self.name, f"runs upstream, at {self.peer.url}")

    async def slot_action(self, action: str, slot_id: int, path: str | None = None) -> SlotDone:
        raise no_slot_actions(self.name, f"runs upstream, at {self.peer.url}")

    def _ok(self) -> None:
        self.state, self.error = "ok", None

    def _failed(self, exc: BaseException) -> LocalchatError:
        error = mapped(self.peer, exc)
        if isinstance(error, UpstreamError):  # the link failed, not the request
            self.state, self.error = "failing", error.message
        return error

    def _start(self, request: Any, emit: Emit) -> int:
        """On the event loop (Stream): the request goes out in a task; its handle, to cancel it."""
        self._loop = asyncio.get_running_loop()
        if self._async is None:
            self._async = httpx.AsyncClient(headers=self.peer.headers(), timeout=self.peer.timeouts())
        job = next(self._ids)
        self._jobs[job] = (asyncio.ensure_future(self._run(job, request, emit)), request.n)
        return job

    def _cancel(self, job: int) -> None:
        """Closing the stream: the request is closed, which ends it on the other side."""
        entry = self._jobs.get(job)
        if entry is not None:
            entry[0].cancel()

    async def _run(self, job: int, request: Any, emit: Emit) -> None:
        raise NotImplementedError


class UpstreamEngine(Link):
    """The Engine interface over a peer. Building it opens the model there (the peer loads it, if
    it has not: blocking) and learns its vocabulary's facts, context, slots and sizing."""

    confirms = True  # the peer takes or refuses each request: its stream starts with that (base.py)

    def __init__(self, peer: Peer, name: str = "") -> None:
        super().__init__(peer, name, httpx.Client(headers=peer.headers(), timeout=peer.timeouts()))
        self._probed: dict[str, Any] = {}  # the peer's stats of the model, as last asked
        try:
            self.facts: dict[str, Any] = self._call("open", {}, read=LOAD_TIMEOUT)
        except BaseException:
            self._http.close()
            raise
        self.n_ctx: int = self.facts["n_ctx"]
        self.parallel: int = self.facts["parallel"]
        self.n_adapters = 0  # adapters are the peer's to apply (not forwarded yet)
        self.tokenizer = UpstreamTokenizer(self._call, self.facts)

    # -- the Engine interface --------------------------------------------------------------

    def check_fits(self, tokens: list[int]) -> None:
        check_fits(tokens, self.n_ctx)

    def submit(self, request: Generate) -> Stream:
        self.check_fits(request.tokens)
        check_adapters(request, self.n_adapters)
        return Stream(self._start, self._cancel, request)

    async def embed(self, inputs: list[list[int]]) -> list[list[float]]:
        return (await asyncio.to_thread(self._call, "embed", {"inputs": inputs}))["vectors"]

    async def rerank(self, prompts: list[list[int]], judge: tuple[int, int] | None = None) -> list[float]:
        body = {"prompts": prompts, "judge": list(judge) if judge else None}
        return (await asyncio.to_thread(self._call, "rerank", body))["scores"]

    def stats(self) -> EngineStats:
        """The peer's slots as last probed (`probe`: its EngineStats.as_dict()), else this server's requests to it."""
        mine = sum(n for _, n in self._jobs.values())
        probed = self._probed
        return EngineStats(self.parallel, probed.get("busy", mine), probed.get("queued", 0), self.n_ctx,
                           self.facts.get("bytes", 0),
                           upstream=UpstreamState(self.peer.url, self.peer.model, self.state, self.error, mine))

    def probe(self) -> None:
        """Ask the peer how the model fares (its slots), so that stats() tells; a failure is the
        state. Blocking, with short timeouts."""
        try:
            self._probed = self._call("stats", {}, read=min(self.peer.timeout, DESCRIBE_TIMEOUT)).get("stats") or {}
        except LocalchatError:
            self._probed = {}

    # -- the link ----------------------------------------------------------------------------

    def _call(self, route: str, body: dict[str, Any], read: float | None = None) -> Any:
        """One blocking request to the peer; its failures mapped. A kept-alive connection the peer
        dropped (it restarted, or died: then the new connection is refused, a 503) is tried once
        more on a new one."""
        try:
            for attempt in (0, 1):
                try:
                    r = self._http.post(self.peer.route(route), json={"model": self.peer.model, **body},
                                        timeout=self.peer.timeouts(read))
                    break
                except STALE:
                    if attempt:
                        raise
            if r.status_code != 200:
                raise refusal(self.peer, r.status_code, r.content)
            answer = r.json()
        except Exception as exc:
            raise self._failed(exc) from None
        self._ok()
        return answer

    async def _run(self, job: int, request: Generate, emit: Emit) -> None:
        assert self._async is not None
        try:
            body = await asyncio.to_thread(lambda: json.dumps({"model": self.peer.model,
                                                               "request": wire.encode(request)}).encode())
            for attempt in (0, 1):  # (a dropped kept-alive connection: once more on a new one, as _call)
                try:
                    r = await self._async.send(self._async.build_request(
                        "POST", self.peer.route("generate"), content=body,
                        headers={"Content-Type": "application/json"}), stream=True)
                    break
                except STALE:
                    if attempt:
                        raise
            try:
                if r.status_code != 200:
                    raise refusal(self.peer, r.status_code, await r.aread())
                async for line in r.aiter_lines():
                    if not line.startswith("data: "):
                        continue  # a keepalive while the peer reads the prompt
                    data = json.loads(line[6:])
                    if "error" in data:
                        emit(wire.decode_error(data["error"]))
                        break
                    if data.get("end"):
                        break
                    emit(wire.decode_item(data))
                else:
                    raise UpstreamError(f"the upstream {self.peer.url} (model {self.peer.model}) ended its answer "
                                        "before the last event")
            finally:
                await r.aclose()  # (closing the request ends it on the peer's side: a cancel too)
            self._ok()
        except Exception as exc:  # noqa: BLE001 - mapped, and that request's error
            emit(self._failed(exc))
        finally:
            self._jobs.pop(job, None)
            emit(None)  # cancelled too (the client left): leaving `async with` closed the request; the peer stops
