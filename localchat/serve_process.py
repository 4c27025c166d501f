"""`localchat serve` as a child process on a loopback port: the one launcher of `localchat launch`
(a server for a client's lifetime), the tests and the scripts (bench, soak, acceptance, cachecheck).

Its stdout and stderr go to a log file that `output()` reads through a handle of its own: the child
holds the only writing handle, so reading never moves where the server writes its next line (a
shared handle's position is both processes': a read that seeked it made the server write over the
start of the file, and an access-log line went missing: tests/test_server_log.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    """A loopback port no one listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServeProcess:
    """`python -m localchat serve --port PORT *args`, started (not yet up: `wait()`)."""

    def __init__(self, *args: str, port: int | None = None, log: Path | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._own_log = log is None  # a temporary file, removed by stop()
        if log is None:
            handle, name = tempfile.mkstemp(prefix=f"localchat-server-{self.port}-", suffix=".log")
            os.close(handle)
            log = Path(name)
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log = log
        with open(log, "w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "localchat", "serve", "--port", str(self.port), *args],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def wait(self, seconds: float = 600) -> bool:
        """Whether it answers GET /health within `seconds` (False at once if it exits)."""
        import httpx

        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        return False

    def output(self) -> str:
        """What the server has written so far."""
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, grace: float = 10) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds; a temporary log is removed."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._own_log:
            self.log.unlink(missing_ok=True)


class Server(ServeProcess):
    """A server of `config` that is up (or RuntimeError with what it wrote): what the tests and the
    scripts start."""

    def __init__(self, config: Path, *extra: str, seconds: float = 120, port: int | None = None) -> None:
        super().__init__("--config", str(config), *extra, port=port)
        if not self.wait(seconds):
            code, out = self.proc.poll(), self.output()
            self.stop()
            raise RuntimeError(f"localchat serve exited with {code}:\n{out}" if code is not None
                               else f"localchat serve did not come up:\n{out}")
