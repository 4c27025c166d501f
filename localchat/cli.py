"""The `localchat` command."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .errors import LocalchatError
from .registry import Registry

app = typer.Typer(no_args_is_help=True, add_completion=False, help="A private, fast LLM server for your laptop.")
models_app = typer.Typer(help="List and manage the models in the registry.", invoke_without_command=True)
app.add_typer(models_app, name="models")

ConfigOpt = typer.Option(None, "--config", help="A models.toml to use instead of the shipped one.")


def _registry(config: Optional[Path]) -> Registry:
    try:
        return Registry.load(config)
    except (ValueError, FileNotFoundError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--config") from None


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Address to bind; loopback by default."),
    port: int = typer.Option(8000, help="TCP port."),
    model: Optional[str] = typer.Option(None, "--model", help="Model to load and use by default."),
    config: Optional[Path] = ConfigOpt,
    api_key: Optional[str] = typer.Option(None, envvar="LOCALCHAT_API_KEY",
                                          help="Require this key as `Authorization: Bearer KEY`."),
) -> None:
    """Serve the OpenAI chat completion routes on localhost."""
    from .server import PortInUse, serve as run

    registry = _registry(config)
    try:
        run(registry, host=host, port=port, model=model, api_key=api_key)
    except (PortInUse, LocalchatError) as exc:
        typer.echo(f"localchat: {exc}", err=True)
        raise typer.Exit(1) from None


@models_app.callback()
def models(ctx: typer.Context, config: Optional[Path] = ConfigOpt) -> None:
    """List the models in the registry."""
    if ctx.invoked_subcommand:
        return
    registry = _registry(config)
    for name, spec in registry.models.items():
        source = str(spec.path) if spec.path else f"package {spec.package}"
        mark = "*" if name == registry.default else " "
        typer.echo(f"{mark} {name:24} {spec.family or 'auto':8} {source}")


@models_app.command("pull")
def pull(config: Optional[Path] = ConfigOpt) -> None:
    """Make sure every packaged model's GGUF file is assembled on disk."""
    registry = _registry(config)
    for spec in registry.models.values():
        if spec.package:
            try:
                typer.echo(f"{spec.name}: {spec.file()}")
            except LocalchatError as exc:
                typer.echo(f"localchat: {exc}", err=True)
                raise typer.Exit(1) from None
