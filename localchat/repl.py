"""The terminal chat. It speaks the OpenAI API to a URL, or to the in-process server that
`localchat chat` starts, through one client code path; it knows no llama types."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import openai
from rich.console import Console

from .engine.params import KNOBS
from .errors import LocalchatError
from .models import Registry
from .repl_mcp import McpTools, server_log
from .repl_prompt import prompt_session
from .repl_files import Attachment, attach, load_conversation, pasted_image, save_conversation, with_images

HELP = {
    "/help": "this list",
    "/models": "the models the server offers",
    "/model NAME": "switch to another model",
    "/system TEXT": "set the system prompt (empty: none)",
    "/set KEY VALUE": "temperature, top_p, top_k, min_p, max_tokens, seed, repetition_stop or tool_choice "
                      "(auto, required, none or a tool's name: until a tool has run) (VALUE 'default' resets)",
    "/show": "the model and settings",
    "/clear": "start a new conversation",
    "/retry": "answer the last message again",
    "/image PATH": "attach an image to the next message (or paste its path alone on a line)",
    "/mcp": "the MCP servers and their tools",
    "/mcp add URL": "connect an MCP server (Streamable HTTP); its tools go with every message",
    "/mcp add -- CMD": "start an MCP server and speak to it over stdio (e.g. -- npx some-server)",
    "/mcp remove NAME": "disconnect an MCP server",
    "/save FILE": "save the conversation as OpenAI-style JSON messages",
    "/load FILE": "load a conversation saved with /save",
    "/exit": "leave (or Ctrl-D)",
}
SETTINGS: dict[str, tuple[type, float, float]] = {  # bounds from the one declaration, SamplingParams
    key: (int if key in ("top_k", "max_tokens", "seed", "repetition_stop") else float,
          KNOBS[key].get("ge", KNOBS[key].get("gt", -(1 << 63))), KNOBS[key].get("le", (1 << 63) - 1))
    for key in ("temperature", "top_p", "top_k", "min_p", "max_tokens", "seed", "repetition_stop")
}
EXTRA_BODY = ("top_k", "min_p", "repetition_stop")  # not OpenAI parameters: sent in the body as extensions
MAX_TOOL_ROUNDS = 10  # answers in a row that call tools before the REPL stops asking the model again


@dataclass
class Backend:
    client: openai.OpenAI
    model: str
    where: str
    close: Callable[[], None] = lambda: None


def connect(*, url: str | None, registry: Registry | None, model: str | None, api_key: str | None) -> Backend:
    if url:
        base = url.rstrip("/") if url.rstrip("/").endswith("/v1") else url.rstrip("/") + "/v1"
        client = openai.OpenAI(base_url=base, api_key=api_key or "unused", max_retries=0)
        return Backend(client, model or "", base)
    from .server import BackgroundServer

    assert registry is not None
    Console(stderr=True, highlight=False).print(f"[dim]loading {registry.resolve(model).name} …[/dim]")
    server = BackgroundServer(registry, model)
    client = openai.OpenAI(base_url=server.url, api_key="in-process", max_retries=0)
    return Backend(client, server.model, "in-process", server.stop)


@dataclass
class Repl:
    backend: Backend
    console: Console
    system: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    attached: list[Attachment] = field(default_factory=list)  # images for the next message
    mcp: McpTools | None = None  # MCP servers' tools (made in run(): it asks for approval with the same prompt)
    tool_choice: str | None = None  # sent until a tool has run in this turn, then `auto` (no loop of forced calls)

    # -- the loop -------------------------------------------------------------------------

    def run(self, read: Callable[[str], str], mcp: Iterable[str] = ()) -> None:
        self.mcp = self.mcp or McpTools(self.console, read, errlog=server_log())
        for target in mcp:
            self.command(f"/mcp add {target}")
        self.console.print(f"localchat · [bold]{self.backend.model or 'default model'}[/bold] "
                           f"({self.backend.where}) · /help for commands, Ctrl-D to leave")
        while True:
            try:
                line = read(">>> ")
                if line.lstrip().startswith('"""'):
                    line = self._block(line.lstrip()[3:], read)
            except KeyboardInterrupt:
                self.console.print("[dim](Ctrl-D or /exit to leave)[/dim]")
                continue
            except EOFError:
                break
            if (image := pasted_image(line)) is not None:
                self.cmd_image(image)
            elif line.startswith("/"):
                if not self.command(line.strip()):
                    break
            elif line.strip():
                images, self.attached = self.attached, []
                self.messages.append({"role": "user", "content": with_images(line, images)})
                if not self.answer():
                    self.attached = images  # not sent: they go with the next message
        self.mcp.close()
        self.console.print("bye")

    @staticmethod
    def _block(first: str, read: Callable[[str], str]) -> str:
        lines = [first]
        while not lines[-1].rstrip().endswith('"""'):
            lines.append(read("... "))
        lines[-1] = lines[-1].rstrip()[:-3]
        return "\n".join(lines).strip("\n")

    def answer(self, round: int = 0, answer_now: bool = False) -> bool:
        """Stream the answer to the last message; False (and the message dropped) on an error. An
        answer that calls MCP tools runs them (each approved) and asks again with their results; one
        that only repeats calls run in this turn is dropped and the model asked to answer (no tools)."""
        start, first, parts, chunks, usage, thinking = time.perf_counter(), None, [], 0, None, False
        stream, interrupted, calls = None, False, {}
        try:
            stream = self.backend.client.chat.completions.create(**self._request(round, answer_now))
            for chunk in stream:
                usage = chunk.usage or usage
                for choice in chunk.choices:
                    for delta in choice.delta.tool_calls or []:
                        call = calls.setdefault(delta.index, {"id": "", "type": "function",
                                                              "function": {"name": "", "arguments": ""}})
                        call["id"] = delta.id or call["id"]
                        if delta.function:
                            call["function"]["name"] += delta.function.name or ""
                            call["function"]["arguments"] += delta.function.arguments or ""
                    thought = (choice.delta.model_extra or {}).get("reasoning_content")
                    if thought:
                        first, thinking = first or time.perf_counter(), True
                        self.console.print(thought, style="dim", end="", markup=False, highlight=False)
                    if choice.delta.content:
                        first, chunks = first or time.perf_counter(), chunks + 1
                        if thinking:
                            self.console.print("\n")
                            thinking = False
                        parts.append(choice.delta.content)
                        self.console.print(choice.delta.content, end="", markup=False, highlight=False, soft_wrap=True)
        except KeyboardInterrupt:
            interrupted = True
        except openai.APIError as exc:
            if round == 0:
                self.messages.pop()
            self.console.print(f"\n[red]error:[/red] {_message(exc)}", highlight=False)
            return round > 0  # after a tool ran, the turn so far stays
        finally:
            if stream is not None:
                stream.close()  # on Ctrl-C this disconnects, and the server stops decoding at once
        message: dict[str, Any] = {"role": "assistant", "content": "".join(parts)}
        if calls:
            message["tool_calls"] = [calls[i] for i in sorted(calls)]
        assert self.mcp is not None
        if round and calls and self.mcp.repeats(self.messages, message["tool_calls"]):
            self.console.print("\n(the same call as before: not run again; the model is asked to answer from its result)",
                               style="dim", highlight=False)
            return self.answer(round + 1, answer_now=True)
        self.messages.append(message)
        self.console.print()
        self._stats(start, first, usage.completion_tokens if usage else chunks, interrupted)
        results = None if interrupted else self.mcp.run_calls(message.get("tool_calls", []))
        if not results:
            return True
        self.messages.extend(results)
        if round + 1 >= MAX_TOOL_ROUNDS:
            self.console.print(f"[yellow]stopped: {MAX_TOOL_ROUNDS} answers in a row called tools[/yellow]")
            return True
        return self.answer(round + 1)

    def _request(self, round: int = 0, answer_now: bool = False) -> dict[str, Any]:
        conversation = ([{"role": "system", "content": self.system}] if self.system else []) + self.messages
        body = {k: v for k, v in self.settings.items() if k not in EXTRA_BODY}
        extra = {k: v for k, v in self.settings.items() if k in EXTRA_BODY}
        tools = self.mcp.tools() if self.mcp and not answer_now else []
        if tools:
            body["tools"] = tools
            if self.tool_choice and round == 0:
                named = self.tool_choice not in ("auto", "required", "none")
                body["tool_choice"] = {"type": "function", "function": {"name": self.tool_choice}} if named \
                    else self.tool_choice
        return dict(model=self.backend.model, messages=conversation, stream=True,
                    stream_options={"include_usage": True}, extra_body=extra or None, **body)

    def _stats(self, start: float, first: float | None, tokens: int, interrupted: bool) -> None:
        end = time.perf_counter()
        bits = ["interrupted"] if interrupted else []
        bits.append(f"{tokens} token" + ("" if tokens == 1 else "s"))
        if first is not None:
            if tokens > 1 and end > first:
                bits.append(f"{(tokens - 1) / (end - first):.1f} tok/s")
            bits.append(f"first token {first - start:.2f} s")
        self.console.print(" · ".join(bits), style="dim", highlight=False)

    # -- slash commands -------------------------------------------------------------------

    def command(self, line: str) -> bool:
        """Run one slash command; False means leave."""
        name, _, arg = line.partition(" ")
        arg = arg.strip()
        handler = getattr(self, "cmd_" + name[1:].replace("-", "_"), None) if name[1:].isidentifier() else None
        if name == "/exit":
            return False
        if handler is None:
            self.console.print(f"unknown command {name}; /help lists them", highlight=False, markup=False)
            return True
        try:
            handler(arg)
        except (OSError, ValueError, openai.APIError, LocalchatError) as exc:
            self.console.print(f"[red]error:[/red] {_message(exc)}", highlight=False)
        return True

    def cmd_help(self, _: str) -> None:
        for usage, text in HELP.items():
            self.console.print(f"  {usage:16} {text}", markup=False, highlight=False)
        self.console.print('  """ … """         a message over several lines (or Alt-Enter for a new line)',
                           markup=False, highlight=False)

    def cmd_models(self, _: str) -> None:
        for m in self.backend.client.models.list():
            mark = "*" if m.id == self.backend.model else " "
            self.console.print(f" {mark} {m.id}", markup=False, highlight=False)

    def cmd_model(self, arg: str) -> None:
        if not arg:
            raise ValueError("usage: /model NAME")
        known = [m.id for m in self.backend.client.models.list()]
        if arg not in known:
            raise ValueError(f"no model {arg!r}; /models lists them")
        self.backend.model = arg
        self.console.print(f"now chatting with {arg}", markup=False, highlight=False)

    def cmd_system(self, arg: str) -> None:
        self.system = arg or None
        self.console.print("system prompt set" if arg else "system prompt cleared")

    def cmd_mcp(self, arg: str) -> None:
        assert self.mcp is not None
        self.mcp.command(arg)

    def cmd_set(self, arg: str) -> None:
        key, _, value = arg.partition(" ")
        if key == "tool_choice" and value.strip():
            self.tool_choice = None if value.strip() in ("default", "auto") else value.strip()
            self.console.print(f"tool_choice = {self.tool_choice or 'auto'}", highlight=False)
            return
        if key not in SETTINGS or not value.strip():
            raise ValueError(f"usage: /set KEY VALUE with KEY one of {', '.join(SETTINGS)}, tool_choice")
        if value.strip() == "default":
            self.settings.pop(key, None)
            self.console.print(f"{key} = server default", highlight=False)
            return
        kind, low, high = SETTINGS[key]
        try:
            parsed = kind(value.strip())
        except ValueError:
            raise ValueError(f"{key} takes {'a whole number' if kind is int else 'a number'}, not {value.strip()!r}") from None
        if not low <= parsed <= high:
            raise ValueError(f"{key} must be between {low:g} and {high:g}")
        self.settings[key] = parsed
        self.console.print(f"{key} = {parsed}", highlight=False)

    def cmd_show(self, _: str) -> None:
        self.console.print(f"model       {self.backend.model or 'default'} ({self.backend.where})", markup=False)
        self.console.print(f"system      {self.system or '(none)'}", markup=False, highlight=False)
        for key in SETTINGS:
            self.console.print(f"{key:11} {self.settings.get(key, 'server default')}", markup=False, highlight=False)
        self.console.print(f"tool_choice {self.tool_choice or 'auto'}", markup=False, highlight=False)
        self.console.print(f"messages    {len(self.messages)}", markup=False, highlight=False)
        if self.attached:
            self.console.print(f"attached    {', '.join(map(str, self.attached))}", markup=False, highlight=False)

    def cmd_clear(self, _: str) -> None:
        self.messages.clear()
        self.attached.clear()
        self.console.print("new conversation")

    def cmd_image(self, arg: str) -> None:
        if not arg:
            raise ValueError("usage: /image PATH")
        self.attached.append(attach(arg))
        self.console.print(f"attached {self.attached[-1]}: it goes with your next message", markup=False,
                           highlight=False)

    def cmd_retry(self, _: str) -> None:
        if self.messages and self.messages[-1]["role"] == "assistant":
            self.messages.pop()
        if not self.messages or self.messages[-1]["role"] != "user":
            raise ValueError("nothing to retry yet")
        self.answer()

    def cmd_save(self, arg: str) -> None:
        if not arg:
            raise ValueError("usage: /save FILE")
        conversation = ([{"role": "system", "content": self.system}] if self.system else []) + self.messages
        save_conversation(arg, conversation)
        self.console.print(f"saved {len(conversation)} messages to {arg}", markup=False, highlight=False)

    def cmd_load(self, arg: str) -> None:
        if not arg:
            raise ValueError("usage: /load FILE")
        data = load_conversation(arg)
        self.system = data[0].get("content") if data and data[0]["role"] == "system" else None
        self.messages = data[1:] if self.system is not None else data
        self.console.print(f"loaded {len(data)} messages from {arg}", markup=False, highlight=False)


def _message(exc: Exception) -> str:
    if isinstance(exc, openai.APIStatusError):
        body = exc.body if isinstance(exc.body, dict) else {}
        return str(body.get("message") or exc.message)
    if isinstance(exc, openai.APIConnectionError):
        return f"cannot reach the server ({exc.__cause__ or exc})"
    return str(exc)


def run_repl(backend: Backend, *, system: str | None = None, mcp: Iterable[str] = ()) -> None:
    repl = Repl(backend, Console(highlight=False), system=system)
    commands = [usage.split()[0] for usage in (*HELP, "/exit")]
    repl.run(prompt_session(commands, [*SETTINGS, "tool_choice"]).prompt, mcp)
