"""The models as the protocols see them (`Chat.models`): what is registered, what each is and can
do, which are loaded; loading and unloading one, pulling and deleting one (Ollama's routes), its
LoRA adapters' default scales, its slots (llama-server's /slots: listed, saved, restored, erased).
The only way the API reaches the host (models/host.py).

Every read that may open a model's file (its GGUF header, its projector) runs off the event loop;
`hold` is the lease the use-cases that run on a model take (embed.py, rerank.py, tokens.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from ..engine.params import EngineStats, SlotDone, SlotInfo
from ..errors import InvalidRequest, LocalchatError, NotSupported
from ..logs import current_request
from ..models import ModelSpec, user
from ..models.describe import Description
from ..models.fit import Sizing
from ..models.gguf import ProjectorInfo
from ..families import Family
from ..models.host import Lease, LoadedModel, ModelHost
from ..models.pull import Progress, pull
from ..neutral import LoraChoice
from .adapters import resolve_adapters


@dataclass(frozen=True)
class LoadedView:
    """What the API may read of a loaded model: a snapshot taken when asked (`Models.loaded`,
    `running`, `current`), not the model; its engine stays behind generation."""

    spec: ModelSpec
    family: Family
    template: str
    active: int  # leases held: running and queued requests
    idle_seconds: float
    keep_alive: float | None  # seconds idle before unloading; None: forever
    sizing: Sizing | None
    projector: ProjectorInfo | None
    can_infill: bool
    stats: EngineStats  # what its engine says of itself: context, slots, busy, queued, bytes, where it runs

    @classmethod
    def of(cls, m: LoadedModel) -> LoadedView:
        return cls(m.spec, m.family, m.template, m.active, m.idle_for(), m.keep_alive, m.sizing, m.projector,
                   m.can_infill, m.engine.stats())


_FORBIDDEN = set('/\\:*?"<>|') | {chr(c) for c in range(32)} | {"\x7f", "\ufeff", "\u2028", "\u2029"}


def slot_file(folder: Path, filename: str) -> Path:
    """The file a slot action names, in the slot save folder: a plain file name, checked as
    llama-server checks it (no path separator, no `..`, no control character, no leading or
    trailing space, no trailing dot, at most 255 bytes), else a 400 naming `filename`."""
    bad = (not filename or len(filename.encode("utf-8", "surrogatepass")) > 255 or any(c in _FORBIDDEN for c in filename)
           or ".." in filename or filename == "." or filename[0] == " " or filename[-1] in " .")
    if bad:
        raise InvalidRequest(f"filename: {filename!r} is not a file name the slot save folder takes: a plain name, "
                             "without a path separator, '..', control characters, or a leading or trailing space "
                             "or a trailing dot", param="filename")
    return Path(folder).expanduser().resolve() / filename


@dataclass(frozen=True)
class Load:
    """What a loaded model is doing now (GET /metrics): its slots and how many are busy, requests
    running (held: decoding or waiting in it) and queued in its engine, its K/V cells (every
    slot's) and how many hold tokens (None where they are not ours: an upstream), its worker's
    restarts since it loaded."""

    name: str
    slots: int
    busy: int
    requests: int
    queued: int
    cells: int
    cells_used: int | None
    restarts: int


@dataclass(frozen=True)
class Adapter:
    """A LoRA adapter of a model and the scale requests that name none get."""

    id: int  # its place in the model's `loras`
    name: str
    path: Path
    scale: float


class Models:
    """Reads and changes what the host holds, for the protocols; they never hold the host."""

    def __init__(self, host: ModelHost) -> None:
        self._host = host

    # -- what is registered ------------------------------------------------------------------------

    @property
    def default(self) -> str:
        return self._host.registry.default

    def registered(self) -> dict[str, ModelSpec]:
        """Every registered model by name (a copy: a pull may change the registry meanwhile)."""
        return dict(self._host.registry.models)

    def resolve(self, name: str | None) -> ModelSpec:
        """A model by name or alias; no name: the default model (ModelNotFound, a 404, if none)."""
        return self._host.registry.resolve(name)

    async def describe(self, name: str) -> Description:
        """What a model is and can do: the loaded model's answer, else its file's (nothing is fetched)."""
        return await asyncio.to_thread(self._host.describe, name)

    async def described(self) -> dict[str, Description]:
        """Every registered model's description (in one thread: a header each), and the loaded
        upstream models' peers probed."""
        host = self._host

        def run() -> dict[str, Description]:
            host.probe()
            return {name: host.describe(name) for name in list(host.registry.models)}

        return await asyncio.to_thread(run)

    async def sizing(self, name: str) -> Sizing | None:
        """The context and slots a model has, or would get if loaded now; None if its file is not
        on disk, cannot be read or does not fit."""
        return await asyncio.to_thread(self._host.sizing, name)

    async def context_length(self, name: str) -> int | None:
        """The context a model has or would get (models.toml's while its file is not on disk yet)."""
        return await asyncio.to_thread(self._host.context_length, name)

    async def projector(self, name: str) -> ProjectorInfo | None:
        """What a model's projector reads, without loading the model; None: text only."""
        return await asyncio.to_thread(self._host.projector, name)

    # -- what is loaded ----------------------------------------------------------------------------

    def loaded(self, name: str) -> LoadedView | None:
        """The model (a registered name, not an alias) if it is loaded: what may be read of it now."""
        m = self._host.loaded.get(name)
        return LoadedView.of(m) if m is not None else None

    def running(self) -> list[LoadedView]:
        """Every loaded model, as it is now."""
        return [LoadedView.of(m) for m in list(self._host.loaded.values())]

    @property
    def current(self) -> LoadedView | None:
        """The most recently used loaded model."""
        m = self._host.current
        return LoadedView.of(m) if m is not None else None

    def stats(self, name: str) -> EngineStats | None:
        """What a loaded model's engine says of itself now (None: not loaded; nothing is loaded for it)."""
        m = self._host.loaded.get(name)
        return m.engine.stats() if m is not None else None

    async def load_now(self) -> list[Load]:
        """Each loaded model's slots, requests and cells now."""
        out = []
        for m in list(self._host.loaded.values()):
            stats = m.engine.stats()
            try:
                used: int | None = sum(slot.n_cells for slot in await asyncio.wait_for(m.engine.slots(), 5))
            except (LocalchatError, TimeoutError):  # not ours to list (an upstream), a worker restarting
                used = None
            out.append(Load(m.spec.name, stats.slots, stats.busy, m.active, stats.queued,
                            stats.n_ctx * stats.slots, used, stats.worker.crashes if stats.worker else 0))
        return out

    @property
    def loads(self) -> int:
        """Models loaded since start."""
        return self._host.loads

    @asynccontextmanager
    async def hold(self, name: str | None, keep_alive: float | None = None) -> AsyncIterator[LoadedModel]:
        """`async with models.hold(name) as loaded`: the model, loaded (or waited for) and held for
        the block. keep_alive (seconds, negative: forever) replaces its keep-alive afterwards."""
        lease = await self._host.lease(name, keep_alive)
        try:
            yield lease.model
        finally:
            lease.release()

    async def lease(self, name: str | None) -> Lease:
        """The model, loaded and held until the caller releases the lease (a stream that outlives
        its handler: the peer's generate route)."""
        return await self._host.lease(name)

    async def load(self, name: str | None, keep_alive: float | None = None) -> str:
        """Load the model unless it is loaded, and let it go: it stays for `keep_alive`. keep_alive 0
        unloads it once idle, and loads nothing that is not loaded. The model's name."""
        spec = self.resolve(name)
        if not (keep_alive == 0 and spec.name not in self._host.loaded):
            async with self.hold(spec.name, keep_alive):
                pass
        return spec.name

    # -- pulled and deleted ------------------------------------------------------------------------

    def pull(self, source: str, progress: Progress) -> None:
        """Blocking: fetch a GGUF into the user's registry (models/pull.py), then read the registry
        and the model files afresh."""
        registry = self._host.registry
        pull(source, progress=progress, base=registry.sources[0])
        registry.reload()
        self._host.forget()

    async def delete(self, name: str | None) -> None:
        """Forget a model of the user's registry (its files stay); it is unloaded once idle."""
        registry = self._host.registry
        spec = registry.resolve(name)
        if spec.name not in registry.user_models:
            raise InvalidRequest(f"{spec.name} is a shipped model (models.toml) and cannot be deleted", param="model")
        try:
            await asyncio.to_thread(user.remove, spec.name, base=registry.sources[0])
        except user.RegistryEditError as exc:
            raise InvalidRequest(str(exc), param="model") from None
        await asyncio.to_thread(registry.reload)
        self._host.forget()
        await self._host.drop(spec.name)

    # -- LoRA adapters -----------------------------------------------------------------------------

    def adapters(self, name: str | None) -> list[Adapter]:
        """A model's adapters with their default scales: the loaded model's, else models.toml's."""
        spec = self.resolve(name)
        loaded = self._host.loaded.get(spec.name)
        scales = loaded.lora_scales if loaded else [lora.scale for lora in spec.loras]
        return [Adapter(i, lora.name, lora.path, scale) for i, (lora, scale) in enumerate(zip(spec.loras, scales))]

    async def set_adapters(self, name: str | None, choice: LoraChoice, param: str) -> None:
        """Set the default scales of a model's adapters (loading it); an adapter not chosen gets 0."""
        async with self.hold(name) as loaded:
            chosen = dict(resolve_adapters(loaded, choice, param=param))
            loaded.lora_scales = [chosen.get(i, 0.0) for i in range(len(loaded.spec.loras))]

    # -- llama-server's slots ----------------------------------------------------------------------

    async def slots(self, name: str | None) -> tuple[int, list[SlotInfo]]:
        """The slots of the model (by default the default one) and their context, if it is loaded
        (none if not: nothing is loaded to list them)."""
        spec = self.resolve(name)
        if (record := current_request()) is not None:
            record.model = spec.name
        loaded = self._host.loaded.get(spec.name)
        if loaded is None:
            return 0, []
        return loaded.engine.n_ctx, await loaded.engine.slots()

    async def slot_action(self, name: str | None, action: str, slot_id: int, filename: str | None) -> SlotDone:
        """Save a slot's prompt cache to `filename` in the slot save folder (`slot_save_path`), restore it
        from there, or erase the slot (loading the model if need be). Without a slot save folder a 501,
        as llama-server answers without --slot-save-path."""
        folder = self._host.registry.settings.slot_save_path
        if folder is None:
            raise NotSupported("This server does not support slots action. Start it with `--slot-save-path` "
                               "(or set slot_save_path in models.toml)")
        path = None if action == "erase" else str(slot_file(folder, filename or ""))
        async with self.hold(name) as loaded:
            if (record := current_request()) is not None:
                record.model = loaded.spec.name
            return await loaded.engine.slot_action(action, slot_id, path)
