"""A llama.cpp RPC link for tests and benchmarks: a network namespace joined to this one by a veth
pair, and `localchat rpc-worker` running inside it on its end ({THERE}:{PORT}). Needs root, `ip`
(iproute2) and an RPC-enabled llama-cpp-python (`scripts/test --rpc` and `scripts/bench --rpc` run
under `unshare -n`, so this namespace's end of the pair is never the machine's own)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from localchat.engine.remote import rpc

HERE, THERE, PORT = "10.213.77.1", "10.213.77.2", 50052
ENDPOINT = f"{THERE}:{PORT}"


def missing() -> str | None:
    """Why the link cannot be made here, or None."""
    if not rpc.supported():
        return ('llama-cpp-python is built without llama.cpp\'s RPC backend (CMAKE_ARGS="-DGGML_RPC=on"): '
                "`scripts/test --rpc` builds one and runs tests/test_rpc.py with it")
    if os.geteuid() != 0 or not shutil.which("ip"):
        return "needs root and `ip` (iproute2) for the network namespace and the veth pair"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@contextmanager
def namespace() -> Iterator[str]:
    """A network namespace holding one end of a veth pair ({THERE}); the other end ({HERE}) is here."""
    name = f"localchat-rpc-{os.getpid()}"
    _ip("netns", "add", name)
    try:
        here = f"lcr{os.getpid() % 100000}"
        _ip("link", "add", here, "type", "veth", "peer", "name", "lcrpc0", "netns", name)
        _ip("addr", "add", f"{HERE}/30", "dev", here)
        _ip("link", "set", here, "up")
        _ip("-n", name, "addr", "add", f"{THERE}/30", "dev", "lcrpc0")
        _ip("-n", name, "link", "set", "lcrpc0", "up")
        _ip("-n", name, "link", "set", "lo", "up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)  # its end of the pair goes with it


class Worker:
    """`localchat rpc-worker` inside the namespace, bound to its end of the veth pair; returns once
    it answers the probe."""

    def __init__(self, ns: str, log: Path, threads: int = 1) -> None:
        self.log = log.open("a+")
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-m", "localchat", "rpc-worker", "--host", THERE,
             "--port", str(PORT), "--threads", str(threads), "--insecure-network"],
            stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + 60
        while True:
            try:
                rpc.probe(ENDPOINT, connect_timeout=1, timeout=2)
                return
            except rpc.RpcError as exc:
                if "did not answer" in exc.message:  # up, and serving its one client already (a server's model)
                    return
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"the rpc-worker did not come up:\n{self.output()}") from None
                time.sleep(0.3)

    def output(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.kill()
