"""A real MCP server for the tests, built with the official SDK (`mcp`'s MCPServer, as its
examples are): `python mcp_server.py http PORT` serves Streamable HTTP at /mcp,
`python mcp_server.py` speaks stdio; `--now`: `server_time` tells the real time (scripts/screenshots). Its tools: `server_time` (a fixed time, so a test can look
for it), `add`, `huge` (a megabyte of text), `fail` (raises), `slow` (sleeps), and two a chat
cannot take: a name with a space and an invalid input schema."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools import Tool

TIME = "2026-11-26 12:34:56 UTC"
LISTED = ["server_time", "add", "huge", "fail", "slow"]  # the tools a chat can take, in order
app = MCPServer("test-clock", log_level="WARNING")


@app.tool()
def server_time() -> str:
    """The current date and time on the server."""
    now = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()) if "--now" in sys.argv else TIME
    return f"The server's clock says {now}."


@app.tool()
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


@app.tool()
def huge() -> str:
    """A very long answer."""
    return "x" * 1_000_000


@app.tool()
def fail() -> str:
    """Always fails."""
    raise ValueError("the disk is on fire")


@app.tool()
def slow(seconds: float = 30) -> str:
    """Answers after a while."""
    time.sleep(seconds)
    return "done"


@app.tool(name="bad name")
def bad_name() -> str:
    return "never listed"


def broken() -> str:
    return "never listed"


# No keys beyond its (no) parameters, as the TypeScript SDK's zod schemas say: the SDK's own leaves other
# keys allowed, and a random test model under the grammar would write them (JSON Schema allows them).
for _name in ("server_time", "huge", "fail"):
    app._tool_manager._tools[_name].parameters["additionalProperties"] = False

_tool = Tool.from_function(broken)
_tool.parameters = {"type": "object", "properties": {"x": {"type": "no-such-type"}}}
app._tool_manager._tools[_tool.name] = _tool  # the SDK builds valid schemas; this one is written by hand

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dead_url() -> str:
    """A URL where nothing listens."""
    return f"http://127.0.0.1:{_free_port()}/mcp"


class McpServer:
    """tests/mcp_server.py over Streamable HTTP, in a process of its own."""

    def __init__(self, *extra: str) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "http", str(self.port), *extra],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("the MCP test server did not start")
                time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run("stdio")
