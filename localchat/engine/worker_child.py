"""The worker's child process (worker.py starts it, one per loaded model): it loads the model with
the server's EngineConfig, takes requests from the socket, and sends back, after every scheduler
step (the step hook), every event of that step in one message; embeddings, reranking and slot
actions run in threads of their own and answer each in one message."""

from __future__ import annotations

import os
import signal
import sys
import threading
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

from ..logs import configure, escape_request_text
from . import rpc as rpc_link
from .params import EngineConfig


def _worker_main(fd: int, config: EngineConfig) -> None:
    """The child: load the model, decode until told to stop or the server goes away."""
    from . import model as model_module
    from .engine import LocalEngine

    conn = Connection(fd)
    try:
        if config.rpc:  # probed by the server just before: the endpoints answer
            rpc_link.register(list(config.rpc))
        engine = LocalEngine.from_config(replace(config, max_queue=None))  # (the server's side keeps the queue)
    except Exception as exc:  # noqa: BLE001 - reported to the server, which raises it there
        conn.send(("failed", str(exc)))
        return
    scheduler, outbox, lock = engine.scheduler, [], threading.Lock()
    jobs: dict[int, Any] = {}  # job id -> the scheduler's handle, to cancel it
    send_lock = threading.Lock()

    def flush() -> None:
        with lock:
            batch = outbox[:]
            outbox.clear()
        if batch:
            with send_lock:
                conn.send(("events", batch))

    def emitter(job_id: int):
        def emit(item: Any) -> None:
            with lock:
                outbox.append((job_id, item))
            if item is None:  # the request's last event: its handle is no longer needed
                jobs.pop(job_id, None)
        return emit

    calls = {"embed": engine.embed_blocking, "rerank": engine.rerank_blocking, "slots": engine.slots_blocking,
             "slot_action": engine.slot_action_blocking}

    def call(kind: str, job_id: int, *args: Any) -> None:
        try:
            result: Any = calls[kind](*args)
        except Exception as exc:  # noqa: BLE001 - the server raises it for that request
            result = exc
        with send_lock:
            conn.send(("embedded", (job_id, result)))

    scheduler.after_step = flush
    with send_lock:
        conn.send(("ready", os.getpid(), model_module.offloaded))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the server is gone
            break
        if message[0] == "submit":
            emit = emitter(message[1])
            try:
                jobs[message[1]] = scheduler.submit(message[2], emit)
            except Exception as exc:  # noqa: BLE001 - refused (the server checks first): that request's error
                emit(exc)
                emit(None)
                flush()
        elif message[0] == "cancel" and message[1] in jobs:
            scheduler.cancel(jobs.pop(message[1]))
        elif message[0] in calls:
            threading.Thread(target=call, args=message, daemon=True).start()
        elif message[0] == "stop":
            break
        if len(jobs) > 1024:  # a handle stored just after its request ended (a race with emit)
            for job_id in [k for k, job in jobs.items() if not scheduler.holds(job)]:
                del jobs[job_id]
    engine.close()
    flush()


def child_main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when a worker stops
    escape_request_text()  # llama.cpp's error lines and the scheduler's warnings may quote a request
    configure()  # the engine's lines (a prompt's cells moved, a saved prompt restored) as the server writes its own
    _worker_main(int(sys.argv[1]), EngineConfig.from_json(sys.argv[2]))
    os._exit(0)
