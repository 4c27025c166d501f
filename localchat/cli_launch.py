"""`localchat launch CLIENT [--model NAME] [-- CLIENT ARGS…]`: the command; launch.py sets each client up."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape

from . import launch as L
from .cli_common import ConfigOpt, fail, load_registry, out

# What launch says while it starts a client goes to stderr: the client's stdout stays its own
# (`localchat launch claude -- -p "…" --output-format json | jq` reads only Claude Code's JSON).
say = Console(stderr=True, highlight=False, soft_wrap=True)


def launch(
    client: Optional[str] = typer.Argument(None, help=f"The agent: {', '.join(L.CLIENTS)}."),
    args: Optional[List[str]] = typer.Argument(None, help="After `--`: the client's own arguments."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="The model (default: the largest chat model on "
                                        "disk, else qwen2.5-coder-1.5b, offered for download)."),
    port: int = typer.Option(8000, help="The server's port: a server running there is used, else one is started "
                             "for the client's lifetime."),
    api_key: Optional[str] = typer.Option(None, envvar="LOCALCHAT_API_KEY", help="The running server's API key."),
    config: Optional[Path] = ConfigOpt,
    list_: bool = typer.Option(False, "--list", help="Each client: installed or not, and what launch sets."),
    print_: bool = typer.Option(False, "--print", help="Print the environment, files and command instead of "
                                "starting anything."),
) -> None:
    """Start a coding agent set up for localchat: Claude Code, Codex, opencode, Qwen Code, pi, Cline, Continue's cn
    or aider. Your own config files are never written: launch's own live in its folder."""
    if list_:
        return _list()
    if client not in L.CLIENTS:
        raise fail(f"which client? one of {', '.join(L.CLIENTS)} (localchat launch --list)" if client is None
                   else f"no client {client!r}: one of {', '.join(L.CLIENTS)}")
    spec = L.CLIENTS[client]
    url = f"http://127.0.0.1:{port}"
    health = L.running(url)
    registry = load_registry(config)
    name = _model(registry, model, health, url, api_key, interactive=not print_)
    context = _context(registry, name, health, url, api_key)
    setup = L.setup(client, L.Target(url, name, context or L.PRINT_CONTEXT, api_key))
    if print_:
        if health is None:
            out.print(f"# no server answers at {url}: launch would start `localchat serve --port {port} --model "
                      f"{name}`" + ("" if context else f"; its context is fitted at start ({L.PRINT_CONTEXT} shown)"),
                      markup=False, soft_wrap=True)
        out.print(L.shown(setup), markup=False, soft_wrap=True, highlight=False)
        return
    program = spec.find()
    if program is None:
        say.print(f"{spec.title} is not installed. Install it with:\n  {spec.install}", markup=False)
        raise typer.Exit(2)
    served = None
    try:
        if health is None:
            say.print(f"[dim]starting localchat serve --port {port} --model {escape(name)} (log: "
                      f"{escape(str(L.launch_dir() / 'server.log'))})[/dim]")
            served = L.serve(port, name, config)
            if not served.wait():
                raise fail(f"the server did not start: see {served.log}")
            context = _context(registry, name, L.running(url), url, api_key)
            setup = L.setup(client, L.Target(url, name, context or L.PRINT_CONTEXT, api_key))
        if context and context < spec.needs():
            say.print(f"[yellow]{escape(name)} has a context of {context:,} tokens; {spec.title}'s first request "
                      f"needs about {spec.needs():,} (its prompt, ~{spec.first_prompt:,}, and room for the answer). "
                      f"Give the model context_length = {_round_up(spec.needs()):,} or more in models.toml "
                      f"(localchat models show {escape(name)}).[/yellow]")
        for note in setup.notes:
            say.print(f"[dim]{escape(note)}[/dim]")
        setup.write()
        for step in setup.before:  # the client's own set-up (Cline's `auth`), into launch's folder
            done = subprocess.run([program, *step[1:]], env=L.environment(setup), capture_output=True, text=True)
            if done.returncode != 0:
                raise fail(f"`{' '.join(step[:2])}` failed ({done.returncode}): {(done.stderr or done.stdout).strip()}")
        argv = [program, *setup.argv[1:], *(args or [])]
        try:
            code = subprocess.call(argv, env=L.environment(setup))
        except KeyboardInterrupt:
            code = 130
    finally:
        if served is not None:
            served.stop(30)
    raise typer.Exit(code)


def _model(registry, wanted: Optional[str], health: Optional[dict], url: str, api_key: Optional[str],
           interactive: bool) -> str:
    """The model: the one asked for; else the largest chat model on disk (that the running server lists);
    else the server's default; else qwen2.5-coder-1.5b, offered for download."""
    names = _listed(url, api_key) if health is not None else None
    if wanted:
        if names is not None and wanted not in names:
            raise fail(f"the server at {url} has no model {wanted!r}: {', '.join(sorted(names))}")
        if names is None:
            try:
                registry.resolve(wanted)
            except Exception as exc:  # noqa: BLE001 - the registry's own message
                raise fail(str(exc)) from None
        return wanted
    for spec in L.on_disk(registry):
        if names is None or spec.name in names:
            return spec.name
    if health is not None and health.get("model"):
        return health["model"]
    agent = registry.resolve(L.AGENT_MODEL)
    if not interactive:
        return agent.name
    if not sys.stdin.isatty():
        raise fail(f"no chat model is on disk: get one with `localchat models pull {L.AGENT_MODEL}`")
    if not typer.confirm(f"No chat model is on disk. Download {L.AGENT_MODEL} (about 1 GB) now?", default=True):
        raise typer.Exit(2)
    try:
        say.print(f"{agent.name}: {agent.file()}", markup=False)
    except KeyboardInterrupt:
        raise fail(f"interrupted: pull it again with `localchat models pull {L.AGENT_MODEL}`") from None
    return agent.name


def _context(registry, name: str, health: Optional[dict], url: str, api_key: Optional[str]) -> Optional[int]:
    """The model's context: as the running server lists it, else its context_length in the registry."""
    if health is not None:
        return (_listed(url, api_key).get(name) or {}).get("context_length")
    try:
        return registry.resolve(name).context_length
    except Exception:  # noqa: BLE001 - an unknown name was refused before
        return None


def _listed(url: str, api_key: Optional[str]) -> dict[str, dict]:
    import httpx

    try:
        return L.listed(url, api_key)
    except (ValueError, httpx.HTTPError) as exc:
        raise fail(str(exc)) from None


def _round_up(n: int) -> int:
    return -(-n // 4096) * 4096


def _list() -> None:
    """Each client: installed (where) or the command that installs it, its first prompt, what launch sets."""
    target = L.Target("http://127.0.0.1:8000", "MODEL", L.PRINT_CONTEXT)
    for name, spec in L.CLIENTS.items():
        s = L.setup(name, target)
        where = spec.find()
        out.print(f"[bold]{name}[/bold] ({escape(spec.title)}): "
                  + (f"installed, {escape(where)}" if where else f"[yellow]not installed[/yellow]: {escape(spec.install)}"),
                  soft_wrap=True)
        flags = [f"-c {s.argv[i + 1].split('=')[0]}" if a == "-c" else a
                 for i, a in enumerate(s.argv[1:], 1) if a.startswith("-")]
        sets = ([f"environment {', '.join(s.env)}"] if s.env else []) \
            + ([f"files {', '.join(p.name for p in s.files)}"] if s.files else []) \
            + ([f"flags {' '.join(dict.fromkeys(flags))}"] if flags else [])
        out.print(f"  first prompt ~{spec.first_prompt:,} tokens; launch sets {escape('; '.join(sets))}", soft_wrap=True)
    out.print(f"[dim]launch's files: {escape(str(L.launch_dir()))}/CLIENT (your own config files are never "
              "written); `localchat launch CLIENT --print` shows them in full[/dim]")
