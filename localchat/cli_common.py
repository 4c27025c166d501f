"""What the `localchat` commands share: the console, failing with a message, the registry."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from .models import Registry

out = Console(highlight=False)
ConfigOpt = typer.Option(None, "--config", help="A models.toml to use instead of the shipped one.")


def fail(message: str) -> typer.Exit:
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[red]localchat:[/red] {escape(message)}", markup=True)
    return typer.Exit(1)


def load_registry(config: Optional[Path]) -> Registry:
    try:
        return Registry.load(config)
    except (ValueError, FileNotFoundError) as exc:
        raise fail(str(exc)) from None


def human_bytes(n: int) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**30 else f"{n / 2**20:.0f} MB" if n >= 2**20 else f"{n / 1024:.0f} KB"


def duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
