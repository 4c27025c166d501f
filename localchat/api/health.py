"""`GET /health`: the registered models (what each is and can do, loaded or not), the loaded
ones with their slots and queues, the server's version and memory, and the last requests
answered (what `localchat ps` and the web page's status panel show)."""

from __future__ import annotations

import os
from pathlib import Path
from collections.abc import Iterable
from typing import Any

from .. import __version__
from ..generation.models import LoadedView
from ..generation import Chat


async def health(chat: Chat, recent: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """`recent`: the last requests that generated, newest first (recorded by the access log)."""
    models = chat.models
    described = await models.described()  # reading GGUF headers: off the event loop
    current = models.current
    return {"status": "ok", "version": __version__, "model": current.spec.name if current else None,
            "loads": models.loads, "loaded": [_loaded_card(m) for m in models.running()],
            "models": [{"name": name, "loaded": models.loaded(name) is not None, **d.card()}
                       for name, d in described.items()],
            "memory": memory(), "recent": list(recent)}


def _loaded_card(m: LoadedView) -> dict[str, Any]:
    stats = m.stats
    size = m.sizing.need.weights if m.sizing else stats.bytes  # every part of a split model
    return {"name": m.spec.name, "family": m.family.name, "size_bytes": size, **stats.card(), "requests": m.active,
            "idle_seconds": round(m.idle_seconds, 1), "keep_alive_seconds": m.keep_alive,
            "rss_bytes": rss_bytes(stats.worker.pid) if stats.worker else None,
            "sizing": m.sizing.as_dict() if m.sizing else None}  # the context and slots it got, and why


def memory() -> dict[str, int | None]:
    """The server process's resident memory and the machine's (Linux's /proc; None elsewhere)."""
    info = _meminfo()
    return {"server_rss_bytes": rss_bytes(os.getpid()), "total_bytes": info.get("MemTotal"),
            "available_bytes": info.get("MemAvailable")}


def rss_bytes(pid: int) -> int | None:
    try:
        pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def _meminfo() -> dict[str, int]:
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        key, _, value = line.partition(":")
        parts = value.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) * 1024  # kB
    return out
