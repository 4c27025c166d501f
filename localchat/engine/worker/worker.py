"""The process boundary: llama.cpp decodes in a child process, one per loaded model (its loop:
worker_child.py).

The server keeps only the vocabulary (to tokenize) and a `WorkerEngine` with the Engine's
interface. Requests go down a socket pair as plain data; each scheduler step comes back as one
message holding every event of that step. If the worker dies (a segfault, an abort, a kill),
requests that had started get an `engine_crashed` error, requests still queued in it run again
on a fresh worker, and a model whose worker dies 3 times within a minute is marked failed.

A model on llama.cpp RPC workers (rpc.py) always runs here: ggml aborts the process that loses its
link. Its endpoints are probed before each start; one that is down makes the model `rpc_down` (its
running and queued requests fail, new ones get a 503 saying which endpoint) until a probe every
few seconds finds it back, then a fresh worker loads the model again. That is not counted as a crash."""

from __future__ import annotations

import asyncio
import itertools
import logging
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ...errors import EngineCrashed, ModelUnavailable
from ..base import Stream, check_adapters, check_queue, deliver
from ..params import EngineConfig, EngineStats, Generate, RpcEndpoint, SlotDone, SlotInfo, Started, WorkerState
from ..remote import rpc as rpc_link

log = logging.getLogger("localchat.worker")
CRASH_LIMIT, CRASH_WINDOW = 3, 60.0  # this many deaths within this many seconds: the model is failed
RPC_RETRY = 2.0  # seconds between probes of an RPC endpoint that is down


@dataclass
class _Job:
    request: Generate
    emit: Stream
    started: bool = False


class WorkerEngine:
    confirms = False  # submit refuses at once (base.py)

    def __init__(self, config: EngineConfig, name: str = "") -> None:
        from ..llama.model import Model  # the vocabulary, in this process: llama.cpp loads here, not on import

        self.name = name or Path(config.path).stem
        self.model = Model(Path(config.path), vocab_only=True)
        self.model.show_tokens(config.visible)
        self.n_ctx, self.parallel, self.max_queue, self.tokenizer = (config.n_ctx, config.parallel, config.max_queue,
                                                                    self.model)
        self._config = config
        self.rpc: dict[str, str | None] = dict.fromkeys(config.rpc)  # endpoint -> why it is down (None: up)
        self.n_adapters = len(config.loras)
        self._embeds: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future]] = {}
        self._jobs: dict[int, _Job] = {}
        self._ids = itertools.count()
        self._lock = threading.RLock()
        self._crashes: deque[float] = deque()
        self.crashes = 0
        self.state = "starting"
        self._closing = False
        try:
            self._spawn()
        except BaseException:
            self.model.close()
            raise
        self._reader = threading.Thread(target=self._read, name=f"localchat-worker-{self.name}", daemon=True)
        self._reader.start()

    # -- the Engine interface --------------------------------------------------------------

    def check_fits(self, tokens: list[int]) -> None:
        self.model.check_fits(tokens, self.n_ctx)

    def submit(self, request: Generate) -> Stream:
        self.check_fits(request.tokens)
        check_adapters(request, self.n_adapters)
        return Stream(self._submit_job, self._cancel_job, request)

    async def embed(self, inputs: list[list[int]]) -> list[list[float]]:
        return await self._call("embed", inputs)

    async def rerank(self, inputs: list[list[int]], judge: tuple[int, int] | None = None) -> list[float]:
        return await self._call("rerank", inputs, judge)

    async def slots(self) -> list[SlotInfo]:
        return await self._call("slots")

    async def slot_action(self, action: str, slot_id: int, path: str | None = None) -> SlotDone:
        return await self._call("slot_action", action, slot_id, path)

    async def _call(self, kind: str, *args: Any) -> Any:
        """A blocking call in the worker (embed, rerank, the slots' state and actions), answered by
        an `embedded` message."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._lock:
            if self.state == "failed":
                raise ModelUnavailable(self._failed_message(), param="model")
            if self.state == "rpc_down":
                raise ModelUnavailable(self._down_message(), param="model")
            job_id = next(self._ids)
            self._embeds[job_id] = (loop, future)
            if self.state == "ready":
                self._send((kind, job_id, *args))
            else:  # restarting: no embedding is in flight in a new worker
                self._embeds.pop(job_id)
                raise ModelUnavailable(f"the model {self.name} is restarting; try again shortly", param="model")
        return await future

    def probe(self) -> None:
        pass  # (nothing elsewhere to ask)

    def stats(self) -> EngineStats:
        with self._lock:
            started = [j for j in self._jobs.values() if j.started]
            return EngineStats(self.parallel, sum(j.request.n for j in started), len(self._jobs) - len(started),
                               self.n_ctx, self.model.size_bytes, WorkerState(self._proc.pid, self.state, self.crashes),
                               rpc=tuple(RpcEndpoint(e, "down" if why else "up", why or None)
                                         for e, why in self.rpc.items()),
                               rpc_layers=self.offloaded if self.rpc else None)

    def close(self) -> None:
        with self._lock:
            self._closing = True
            self.state = "stopped"
            try:
                self._conn.send(("stop",))
            except OSError:
                pass
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join(10)
        self.model.close()

    # -- what a Stream calls -----------------------------------------------------------------

    def _submit_job(self, request: Generate, emit: Stream) -> int:
        with self._lock:
            if self.state == "failed":
                raise ModelUnavailable(self._failed_message(), param="model")
            if self.state == "rpc_down":
                raise ModelUnavailable(self._down_message(), param="model")
            started = sum(j.request.n for j in self._jobs.values() if j.started)
            waiting = len(self._jobs) - sum(j.started for j in self._jobs.values())
            check_queue(waiting, self.parallel - started, self.max_queue, self.name)
            job_id = next(self._ids)
            self._jobs[job_id] = _Job(request, emit)
            if self.state == "ready":
                self._send(("submit", job_id, request))
            return job_id

    def _cancel_job(self, job_id: int) -> None:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return
            if self.state == "ready":
                self._send(("cancel", job_id))
            elif not job.started:  # not sent anywhere yet: it ends here
                del self._jobs[job_id]
                job.emit(None)

    # -- the child process -----------------------------------------------------------------

    def _spawn(self) -> None:
        if self.rpc:  # ggml would abort the worker on an endpoint that is down: say which, and why
            rpc_link.probe_all(list(self.rpc), self.name)
        parent, child = socket.socketpair()
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "from localchat.engine.worker.worker_child import child_main; child_main()",
             str(child.fileno()), self._config.to_json()],
            pass_fds=(child.fileno(),), start_new_session=True)  # Ctrl-C reaches the server, which stops it
        child.close()
        self._conn = Connection(parent.detach())
        try:
            ready = self._conn.recv() if self._conn.poll(300) else None
        except (EOFError, OSError):
            ready = None
        if not ready or ready[0] != "ready":
            self._proc.kill()
            self._proc.wait()
            detail = ready[1] if ready and ready[0] == "failed" else f"exit status {self._proc.returncode}"
            raise ModelUnavailable(f"the worker for {self.name} could not load it ({detail})", param="model")
        self.offloaded = ready[2] if len(ready) > 2 else None  # "N/M" layers on devices (an RPC model's: remote)
        self.state = "ready"

    def _send(self, message: tuple) -> None:
        try:
            self._conn.send(message)
        except OSError:
            pass  # the worker is gone; the reader notices and restarts it

    def _read(self) -> None:
        while True:
            try:
                kind, payload = self._conn.recv()
            except (EOFError, OSError):
                if not self._died():
                    return
                continue
            if kind == "events":
                self._dispatch(payload)
            elif kind == "embedded":
                self._embedded(*payload)

    def _dispatch(self, events: list[tuple[int, Any]]) -> None:
        """One step's events from the child: to their streams, the event loop woken once."""
        batch: dict[int, tuple[Stream, list]] = {}
        with self._lock:
            for job_id, item in events:
                job = self._jobs.get(job_id)
                if job is None:
                    continue
                if isinstance(item, Started):
                    job.started = True
                if item is None:
                    del self._jobs[job_id]
                batch.setdefault(job_id, (job.emit, []))[1].append(item)
            deliver(batch.values())

    def _embedded(self, job_id: int, result: Any) -> None:
        with self._lock:
            loop, future = self._embeds.pop(job_id, (None, None))
        if loop is not None and not loop.is_closed():
            setter = future.set_exception if isinstance(result, BaseException) else future.set_result
            loop.call_soon_threadsafe(lambda: None if future.done() else setter(result))

    def _died(self) -> bool:
        """The worker is gone. Fail what had started, restart, re-send what had not. Returns
        whether a worker runs again. An RPC model whose link is down waits for it first."""
        code = self._proc.wait()
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        lost = self._probe_links() if self.rpc and not self._closing else False
        with self._lock:
            if self._closing:
                return False
            if lost:
                self._link_lost(how)
            else:
                self.state = "restarting"
                self.crashes += 1
                now = time.monotonic()
                self._crashes.append(now)
                while self._crashes and now - self._crashes[0] > CRASH_WINDOW:
                    self._crashes.popleft()
                log.error("the worker for %s died (%s); %d request(s) in it failed", self.name, how,
                          sum(j.started for j in self._jobs.values()))
                for job_id, job in list(self._jobs.items()):
                    if job.started:
                        del self._jobs[job_id]
                        job.emit(EngineCrashed(f"the model {self.name} crashed ({how}) while generating; "
                                               "it is being restarted: send the request again", code="engine_crashed"))
                        job.emit(None)
                for job_id in list(self._embeds):
                    self._embedded(job_id, EngineCrashed(f"the model {self.name} crashed ({how}) while it embedded, "
                                                         "reranked or ran a slot action; send the request again", code="engine_crashed"))
                if len(self._crashes) >= CRASH_LIMIT:
                    return self._fail(how)
        while True:
            if lost and not self._wait_for_links():
                return False
            try:
                self._spawn()
                break
            except ModelUnavailable as exc:
                lost = bool(self.rpc) and self._probe_links()
                with self._lock:
                    if not lost:
                        return self._fail(exc.message)
                    self._link_lost(exc.message)  # down again while it loaded: wait again
        with self._lock:
            log.warning("the worker for %s restarted (pid %d); re-running %d queued request(s)",
                        self.name, self._proc.pid, len(self._jobs))
            for job_id, job in self._jobs.items():
                self._send(("submit", job_id, job.request))
        return True

    def _link_lost(self, how: str) -> None:
        """With the lock held: an RPC endpoint is down. Every request in the engine fails, queued ones
        too (the link may stay down for long); new ones are refused until it is back."""
        self.state = "rpc_down"
        log.error("the worker for %s lost its RPC link (%s; %s); %d request(s) in it failed", self.name,
                  how, self._down_message(), len(self._jobs))
        for job_id, job in list(self._jobs.items()):
            del self._jobs[job_id]
            job.emit(EngineCrashed(f"the model {self.name} lost its RPC link while generating: "
                                   f"{self._down_message()}", code="engine_crashed") if job.started
                     else ModelUnavailable(self._down_message(), param="model"))
            job.emit(None)
        for job_id in list(self._embeds):
            self._embedded(job_id, ModelUnavailable(self._down_message(), param="model"))

    def _probe_links(self) -> bool:
        """Probe each RPC endpoint, noting why each that is down is; returns whether any is."""
        for endpoint in self.rpc:
            try:
                rpc_link.probe(endpoint)
                self.rpc[endpoint] = None
            except ModelUnavailable as exc:
                self.rpc[endpoint] = exc.message
        return any(self.rpc.values())

    def _wait_for_links(self) -> bool:
        """Probe every RPC_RETRY seconds until every endpoint answers (True) or the engine closes."""
        while not self._closing:
            deadline = time.monotonic() + RPC_RETRY
            while time.monotonic() < deadline and not self._closing:
                time.sleep(0.1)
            if not self._closing and not self._probe_links():
                log.warning("the RPC link of %s is back: loading it again", self.name)
                with self._lock:
                    self.state = "restarting"
                return True
        return False

    def _down_message(self) -> str:
        down = "; ".join(why for why in self.rpc.values() if why)
        return (f"the model {self.name} is waiting for its RPC worker ({down}); it is loaded again when the "
                "worker answers")

    def _fail(self, how: str) -> bool:
        self.state = "failed"
        self._why = how
        log.error("the model %s is marked failed: %s", self.name, self._failed_message())
        for job in self._jobs.values():
            job.emit(ModelUnavailable(self._failed_message(), param="model"))
            job.emit(None)
        self._jobs.clear()
        return False

    def _failed_message(self) -> str:
        return (f"the model {self.name} is marked failed: its worker crashed {CRASH_LIMIT} times within "
                f"{CRASH_WINDOW:.0f} s (last: {getattr(self, '_why', '?')}); see the server log, then restart the server")
