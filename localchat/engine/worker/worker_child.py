"""The worker's child process (worker.py starts it, one per loaded model): it loads the model with
the server's EngineConfig, takes requests from the socket, and sends back every scheduler step's
events in one message (the step's outputs, delivered on the step's thread); embeddings, reranking and slot
actions run in threads of their own and answer each in one message."""

from __future__ import annotations

import os
import signal
import sys
import threading
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

from ...logs import configure, escape_request_text
from ..outputs import StepOutput
from ..params import EngineConfig
from ..remote import rpc as rpc_link


def _worker_main(fd: int, config: EngineConfig) -> None:
    """The child: load the model, decode until told to stop or the server goes away."""
    from ..engine import LocalEngine
    from ..llama import model as model_module

    conn = Connection(fd)
    send_lock = threading.Lock()  # (the step's thread, the calls' threads and this one all send)
    jobs: dict[int, Any] = {}  # job id -> the scheduler's handle, to cancel it; gone with its last event
    jobs_lock = threading.Lock()

    def send(message: tuple) -> None:
        with send_lock:
            conn.send(message)

    def ship(output: StepOutput) -> None:
        """A step's events, in one message (each sink is the server's job id)."""
        if not output.events:
            return
        with jobs_lock:
            for job_id, items in output.events:
                if items[-1] is None:  # the request's last event: its handle is no longer needed
                    jobs.pop(job_id, None)
        send(("events", [(job_id, item) for job_id, items in output.events for item in items]))

    try:
        if config.rpc:  # probed by the server just before: the endpoints answer
            rpc_link.register(list(config.rpc))
        engine = LocalEngine.from_config(replace(config, max_queue=None), deliver=ship)  # (the server's side keeps the queue)
    except Exception as exc:  # noqa: BLE001 - reported to the server, which raises it there
        conn.send(("failed", str(exc)))
        return
    scheduler = engine.scheduler
    calls = {"embed": engine.embed_blocking, "rerank": engine.rerank_blocking, "slots": engine.slots_blocking,
             "slot_action": engine.slot_action_blocking}

    def call(kind: str, job_id: int, *args: Any) -> None:
        try:
            result: Any = calls[kind](*args)
        except Exception as exc:  # noqa: BLE001 - the server raises it for that request
            result = exc
        send(("embedded", (job_id, result)))

    send(("ready", os.getpid(), model_module.offloaded))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the server is gone
            break
        if message[0] == "submit":
            job_id = message[1]
            try:
                with jobs_lock:  # (stored before the step can ship its last event, which removes it)
                    jobs[job_id] = scheduler.submit(message[2], job_id)
            except Exception as exc:  # noqa: BLE001 - refused (the server checks first): that request's error
                send(("events", [(job_id, exc), (job_id, None)]))
        elif message[0] == "cancel":
            with jobs_lock:
                job = jobs.pop(message[1], None)
            if job is not None:
                scheduler.cancel(job)
        elif message[0] in calls:
            threading.Thread(target=call, args=message, daemon=True).start()
        elif message[0] == "stop":
            break
    engine.close()  # (what is still running ends with an error, shipped)


def child_main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when a worker stops
    escape_request_text()  # llama.cpp's error lines and the scheduler's warnings may quote a request
    configure()  # the engine's lines (a prompt's cells moved, a saved prompt restored) as the server writes its own
    _worker_main(int(sys.argv[1]), EngineConfig.from_json(sys.argv[2]))
    os._exit(0)
