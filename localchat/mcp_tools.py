"""MCP servers' tools for the chat page and the terminal chat, through the official `mcp` SDK.

A server is a Streamable HTTP URL, or a command spoken to over stdio (the REPL's `/mcp add --
npx some-server`; the page's bridge, api/mcp_bridge.py, reaches URLs only and never starts a
program). Its tools become OpenAI function tools, each checked as this server checks a request's
tools (a name the protocols take, a valid schema): one that would be refused is left out, with
the reason, so a bad tool never breaks the chat. A call's result becomes the text sent back to
the model, cut at RESULT_CHARS. Every failure (down, slow, not an MCP server, a program that
will not start) is one ToolServerError whose message a person can act on.

`tools_at` and `call_at` open a connection for one operation (the bridge: stateless, like HTTP);
`Hub` keeps each server open for a whole chat (a stdio server is one process, not one per call)
on an event loop of its own, for a caller that is not async (the REPL)."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO, TypeVar

from .errors import ToolServerError, ToolServerTimeout
from .grammars.metaschema import schema_problem
from .neutral import ToolSpec

RESULT_CHARS = 20_000  # a tool's answer beyond this is cut (a file dump must not fill the context)
OPEN_SECONDS = 20.0  # to connect (or start the program) and list the tools
CALL_SECONDS = 120.0  # for one call
NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # a tool name every protocol's clients take
T = TypeVar("T")


@dataclass(frozen=True)
class Target:
    """Where an MCP server is: a Streamable HTTP URL, or a command to run and speak to over stdio."""

    url: str | None = None
    command: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Target:
        """`http(s)://…` is a URL; anything else (after an optional `--`) a command line."""
        text = text.strip()
        if re.match(r"https?://\S+$", text):
            return cls(url=text)
        try:
            argv = shlex.split(text[2:] if text.startswith("--") else text)
        except ValueError as exc:
            raise ToolServerError(f"cannot read the command {text!r}: {exc}") from None
        if not argv:
            raise ToolServerError("give an MCP server's URL (http://…) or a command to start one (-- npx some-server)")
        return cls(command=tuple(argv))

    def __str__(self) -> str:
        return self.url or shlex.join(self.command)


@dataclass(frozen=True)
class Listing:
    server: str  # the name the server gives itself
    tools: list[ToolSpec]
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (tool, why it was left out)


@dataclass(frozen=True)
class Result:
    text: str
    is_error: bool = False
    cut: int = 0  # characters left out (RESULT_CHARS)


# -- what a server said, as the chat needs it --------------------------------------------------

def listing(server: str, tools: list[Any]) -> Listing:
    """The tools of a `tools/list` answer that this server's protocols would take."""
    kept, skipped, seen = [], [], set()
    for tool in tools:
        schema = tool.input_schema if tool.input_schema is not None else {"type": "object"}
        if not NAME.fullmatch(tool.name):
            skipped.append((tool.name, "its name has characters tool names cannot have (A-Z, a-z, 0-9, _ . -)"))
        elif tool.name in seen:
            skipped.append((tool.name, "the server lists it twice"))
        elif problem := schema_problem(schema):
            skipped.append((tool.name, f"its input schema is refused: {problem}"))
        else:
            seen.add(tool.name)
            kept.append(ToolSpec(tool.name, tool.description or tool.title or "", schema))
    return Listing(server, kept, skipped)


def result_of(result: Any) -> Result:
    """A `tools/call` answer as text: its text blocks, a line for anything else, cut at RESULT_CHARS."""
    parts = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and getattr(block.resource, "text", None) is not None:
            parts.append(block.resource.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} ({block.mime_type}), not shown to the model]")
        else:
            parts.append(f"[{kind or 'content'}: {getattr(block, 'uri', '') or 'not shown to the model'}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts)
    cut = max(0, len(text) - RESULT_CHARS)
    if cut:
        text = text[:RESULT_CHARS] + f"\n[… {cut:,} more characters cut: the result was too long]"
    return Result(text, bool(result.is_error), cut)


def arguments_of(text: str | dict[str, Any] | None) -> dict[str, Any]:
    """A call's arguments (JSON text as the model wrote them) as the object MCP wants; ValueError if they are not one."""
    if isinstance(text, dict):
        return text
    try:
        value = json.loads(text or "{}")
    except ValueError as exc:
        raise ValueError(f"the call's arguments are not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError("the call's arguments are not a JSON object")
    return value


# -- one operation on one connection -----------------------------------------------------------

async def tools_at(target: Target, *, seconds: float = OPEN_SECONDS) -> Listing:
    async with _connected(target, seconds) as (client, name):
        found = await _timed(client.list_tools(), seconds, target, "list its tools")
        return await asyncio.to_thread(listing, name, found.tools)  # schema checks cost: off the event loop


async def call_at(target: Target, tool: str, arguments: dict[str, Any], *, seconds: float = CALL_SECONDS) -> Result:
    async with _connected(target, OPEN_SECONDS) as (client, _):
        return result_of(await _timed(client.call_tool(tool, arguments), seconds, target, f"run {tool}"))


@asynccontextmanager
async def _connected(target: Target, seconds: float, errlog: TextIO | None = None) -> AsyncIterator[tuple[Any, str]]:
    """An open MCP client and the server's name; every failure, here or in the body, a ToolServerError.
    errlog: where a started program's stderr goes (this process's, by default)."""
    from mcp import Client, StdioServerParameters, stdio_client  # the SDK loads only when MCP is used

    where = target.url or stdio_client(StdioServerParameters(command=target.command[0], args=list(target.command[1:])),
                                       errlog=errlog or sys.stderr)
    try:
        async with asyncio.timeout(seconds):
            client = Client(where, read_timeout_seconds=seconds)
            await client.__aenter__()
        try:
            info = client.server_info
            yield client, (info.name if info and info.name else str(target))
        finally:
            await client.__aexit__(None, None, None)
    except (ToolServerError, asyncio.CancelledError, KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - every transport failure becomes one clear message
        raise _failure(exc, target, "connect") from None


async def _timed(work: Awaitable[T], seconds: float, target: Target, what: str) -> T:
    try:
        async with asyncio.timeout(seconds):
            return await work
    except ToolServerError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise _failure(exc, target, what) from None


def _failure(exc: BaseException, target: Target, what: str) -> ToolServerError:
    """What went wrong, said once for every transport."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:  # anyio's task groups wrap the cause
        exc = exc.exceptions[0]
    name = type(exc).__name__
    where = f"the MCP server at {target.url}" if target.url else f"the MCP server `{target}`"
    if isinstance(exc, TimeoutError):
        return ToolServerTimeout(f"{where} did not {what} in time")
    if isinstance(exc, FileNotFoundError) and not target.url:
        return ToolServerError(f"cannot start {where}: no program {target.command[0]!r} (is it installed, on PATH?)")
    if name in ("ConnectError", "ConnectTimeout") or isinstance(exc, ConnectionError):
        return ToolServerError(f"cannot reach {where}: is it running?")
    if name == "HTTPStatusError":
        status = getattr(getattr(exc, "response", None), "status_code", "an error")
        return ToolServerError(f"{where} answered HTTP {status}: is the URL its MCP endpoint (often …/mcp)?")
    if name == "MCPError" and what == "connect":
        hint = "is the URL its MCP endpoint (often …/mcp)?" if target.url else "did the program exit?"
        return ToolServerError(f"{where} did not answer as an MCP server ({exc}): {hint}")
    if name == "MCPError":
        return ToolServerError(f"{where} refused to {what}: {exc}")
    detail = str(exc) or name
    if name in ("ClosedResourceError", "EndOfStream", "BrokenResourceError"):
        detail = "the connection closed (did the program exit?)"
    return ToolServerError(f"{where} failed to {what}: {detail}")


# -- servers kept open for a whole chat ----------------------------------------------------------

class _Link:
    """One server, open in one task of the hub's loop (the SDK's client must close in the task that opened it)."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.jobs: asyncio.Queue[tuple[Callable[[Any], Awaitable[Any]], asyncio.Future[Any]] | None] = asyncio.Queue()
        self.listing: Listing | None = None
        self.gone: str | None = None  # why it stopped, once it has

    @property
    def name(self) -> str:
        return self.listing.server if self.listing else str(self.target)

    async def run(self, ready: asyncio.Future[Listing], open_seconds: float, errlog: TextIO | None) -> None:
        try:
            async with _connected(self.target, open_seconds, errlog) as (client, name):
                found = await _timed(client.list_tools(), open_seconds, self.target, "list its tools")
                self.listing = await asyncio.to_thread(listing, name, found.tools)
                ready.set_result(self.listing)
                while (job := await self.jobs.get()) is not None:
                    work, done = job
                    try:
                        done.set_result(await work(client))
                    except ToolServerError as exc:
                        done.set_exception(exc)
                    except Exception as exc:  # noqa: BLE001
                        done.set_exception(_failure(exc, self.target, "answer"))
            self.gone = "it was removed"
        except BaseException as exc:  # noqa: BLE001 - the link ends; whoever waits hears why
            error = exc if isinstance(exc, ToolServerError) else _failure(exc, self.target, "answer")
            self.gone = error.message
            if not ready.done():
                ready.set_exception(error)
        finally:
            while not self.jobs.empty():
                if (job := self.jobs.get_nowait()) is not None and not job[1].done():
                    job[1].set_exception(ToolServerError(f"the MCP server `{self.name}` has stopped: {self.gone}"))


class Hub:
    """The MCP servers of one chat, each kept open, on an event loop in a thread of its own."""

    def __init__(self, *, open_seconds: float = OPEN_SECONDS, call_seconds: float = CALL_SECONDS,
                 errlog: TextIO | None = None) -> None:
        """errlog: where the programs started for stdio servers write their stderr."""
        self.open_seconds, self.call_seconds, self.errlog = open_seconds, call_seconds, errlog
        self.links: list[_Link] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def _run(self, make: Callable[[], Awaitable[T]], seconds: float) -> T:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, name="mcp", daemon=True).start()
        future = asyncio.run_coroutine_threadsafe(make(), self._loop)  # type: ignore[arg-type]
        return future.result(seconds + 5)

    def add(self, text: str) -> Listing:
        """Connect (or start) a server and list its tools; raises ToolServerError."""
        link = _Link(Target.parse(text))

        async def start() -> Listing:
            ready: asyncio.Future[Listing] = asyncio.get_running_loop().create_future()
            asyncio.ensure_future(link.run(ready, self.open_seconds, self.errlog))
            return await ready

        found = self._run(start, self.open_seconds)
        self.links.append(link)
        return found

    def remove(self, name: str) -> bool:
        for link in self.links:
            if name in (link.name, str(link.target)):
                self.links.remove(link)
                assert self._loop is not None
                self._loop.call_soon_threadsafe(link.jobs.put_nowait, None)
                return True
        return False

    def tools(self) -> list[dict[str, Any]]:
        """Every open server's tools, OpenAI's shape; a name two servers share goes to the first."""
        seen: set[str] = set()
        out = []
        for link in self.links:
            for tool in link.listing.tools if link.listing and not link.gone else []:
                if tool.name not in seen:
                    seen.add(tool.name)
                    out.append(tool.openai())
        return out

    def owner(self, tool: str) -> str | None:
        """The server whose tool this is (its name), or None: not an MCP tool."""
        return link.name if (link := self._link(tool)) else None

    def _link(self, tool: str) -> _Link | None:
        return next((link for link in self.links
                     if link.listing and not link.gone and any(t.name == tool for t in link.listing.tools)), None)

    def call(self, tool: str, arguments: str | dict[str, Any] | None) -> Result:
        link = self._link(tool)
        if link is None:
            raise ToolServerError(f"no MCP server open here has a tool {tool!r}")
        args = arguments_of(arguments)

        async def work(client: Any) -> Result:
            return result_of(await _timed(client.call_tool(tool, args), self.call_seconds, link.target, f"run {tool}"))

        async def ask() -> Result:
            if link.gone:
                raise ToolServerError(f"the MCP server `{link.name}` has stopped: {link.gone}")
            done: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
            link.jobs.put_nowait((work, done))
            return await done

        return self._run(ask, self.call_seconds)

    def close(self) -> None:
        for link in list(self.links):
            self.remove(link.name)
        if self._loop is not None:
            loop, self._loop = self._loop, None

            async def settle() -> None:  # let each link close its client (a stdio program exits)
                if tasks := [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
                    await asyncio.wait(tasks, timeout=5)

            asyncio.run_coroutine_threadsafe(settle(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
