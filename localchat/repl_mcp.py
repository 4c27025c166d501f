"""MCP tools in the terminal chat: `/mcp add URL` (Streamable HTTP) or `/mcp add -- COMMAND`
(a program spoken to over stdio), `/mcp` to list, `/mcp remove NAME`. Their tools go with every
request; each call the model makes is shown and run once the user says yes (or `a`: always, for
that tool, this chat), and its result goes back to the model. A server that is down, slow or
broken is one line in red; the chat goes on."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from rich.console import Console

from .errors import ToolServerError
from .mcp_tools import Hub
from .models import paths

SHOWN_CHARS = 400  # of a result, on screen (the model gets all of it, up to mcp_tools.RESULT_CHARS)
DENIED = "The user did not allow this tool call."


class McpTools:
    def __init__(self, console: Console, ask: Callable[[str], str], errlog: Any = None) -> None:
        self.console, self.ask, self.errlog = console, ask, errlog
        self.hub: Hub | None = None
        self.allowed: set[str] = set()  # tools the user said "always" to

    def command(self, arg: str) -> None:
        verb, _, rest = arg.partition(" ")
        if verb == "add" and rest.strip():
            self.hub = self.hub or Hub(errlog=self.errlog)
            self.console.print(f"[dim]connecting to {rest.strip()} …[/dim]", highlight=False)
            found = self.hub.add(rest)
            names = ", ".join(t.name for t in found.tools) or "none"
            self.console.print(f"{found.server}: {len(found.tools)} tool{'' if len(found.tools) == 1 else 's'} "
                               f"({names})", markup=False, highlight=False)
            for name, why in found.skipped:
                self.console.print(f"  left out {name}: {why}", style="yellow", markup=False, highlight=False)
        elif verb == "remove" and rest.strip():
            if not self.hub or not self.hub.remove(rest.strip()):
                raise ValueError(f"no MCP server {rest.strip()!r}; /mcp lists them")
            self.console.print(f"removed {rest.strip()}", markup=False, highlight=False)
        elif verb == "":
            self.list()
        else:
            raise ValueError("usage: /mcp, /mcp add URL, /mcp add -- COMMAND ARGS, /mcp remove NAME")

    def list(self) -> None:
        links = self.hub.links if self.hub else []
        if not links:
            self.console.print("no MCP servers; /mcp add URL or /mcp add -- COMMAND", highlight=False)
        for link in links:
            state = f"stopped: {link.gone}" if link.gone else ", ".join(t.name for t in link.listing.tools) \
                if link.listing else ""
            self.console.print(f"  {link.name} ({link.target}): {state}", markup=False, highlight=False)

    def tools(self) -> list[dict[str, Any]]:
        return self.hub.tools() if self.hub else []

    def owns(self, name: str) -> bool:
        return self.hub is not None and self.hub.owner(name) is not None

    @staticmethod
    def repeats(messages: list[dict[str, Any]], calls: list[dict[str, Any]]) -> bool:
        """Whether every call repeats one already made since the user's last message (small models loop so)."""
        made = set()
        for message in reversed(messages):
            if message["role"] == "user":
                break
            made.update((c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls", []))
        return all((c["function"]["name"], c["function"]["arguments"]) in made for c in calls)

    def run_calls(self, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The tool messages answering an answer's calls, each run once approved; none when
        it made no call, or a call to a tool no MCP server here has (shown, not run)."""
        if not calls or not all(self.owns(c["function"]["name"]) for c in calls):
            for call in calls:
                self.console.print(f"tool call {call['function']['name']} {call['function']['arguments']}",
                                   markup=False, highlight=False)
            return []
        return [{"role": "tool", "tool_call_id": call["id"], "content": self.run(call)} for call in calls]

    def run(self, call: dict[str, Any]) -> str:
        """One call the model made, shown, approved and run: what goes back to the model."""
        assert self.hub is not None
        name, arguments = call["function"]["name"], call["function"]["arguments"]
        server = self.hub.owner(name)
        self.console.print(f"\n⚙ {name} {_compact(arguments)}  [dim]({server})[/dim]", highlight=False)
        if name not in self.allowed:
            answer = ""
            while answer not in ("y", "n", "a"):
                try:
                    answer = self.ask("Run it? [y]es, [n]o, [a]lways for this tool: ").strip().lower()[:1]
                except (KeyboardInterrupt, EOFError):
                    answer = "n"
            if answer == "n":
                self.console.print("not run", style="dim")
                return DENIED
            if answer == "a":
                self.allowed.add(name)
        try:
            result = self.hub.call(name, arguments)
        except (ToolServerError, ValueError) as exc:
            self.console.print(f"[red]tool failed:[/red] {exc}", highlight=False)
            return f"The tool failed: {exc}"
        shown = result.text if len(result.text) <= SHOWN_CHARS else result.text[:SHOWN_CHARS] + " …"
        self.console.print(("error: " if result.is_error else "→ ") + shown, style="red" if result.is_error else "dim",
                           markup=False, highlight=False)
        return result.text

    def close(self) -> None:
        if self.hub:
            self.hub.close()


def _compact(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), ensure_ascii=False)
    except ValueError:
        return arguments


def server_log() -> Any:
    """Where the programs started for stdio MCP servers write their stderr (not over the chat)."""
    path = paths.data_dir() / "mcp-servers.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("a", encoding="utf-8")
