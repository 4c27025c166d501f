"""The loaded models: each request leases its model until its last event; up to
`max_loaded_models` stay loaded, the least recently used idle one makes room, and a model
idle for longer than its keep-alive is unloaded. What a loaded model is, and how one is loaded:
loaded.py (named here too, for the modules that hold one)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from ..errors import LocalchatError, ModelTooLarge
from .catalog import Registry
from .describe import Describer, Description
from .fit import Sizing
from .gguf import RANK_POOLING, ProjectorInfo
from .loaded import EngineFactory, LoadedModel, cache_types, draft_spec, load_model, make_engine, size_model

__all__ = ["RANK_POOLING", "Lease", "LoadedModel", "ModelHost", "cache_types", "draft_spec", "load_model",
           "make_engine", "size_model"]

log = logging.getLogger("localchat.models")


class Lease:
    """A request's hold on its model; release it after the request's last event."""

    def __init__(self, host: ModelHost, model: LoadedModel, keep_alive: float | None) -> None:
        self.host, self.model, self._keep_alive = host, model, keep_alive
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.host._release(self.model, self._keep_alive)


class ModelHost:
    """`engine` makes each model's engine (make_engine; a test gives a FakeEngine factory)."""

    def __init__(self, registry: Registry, report: Callable[[str], None] = log.info,
                 engine: EngineFactory = make_engine) -> None:
        self.registry = registry
        self.engine_factory = engine
        self.report = report  # told the sizes each model gets at load (the server prints them)
        self.settings = registry.settings
        self.loaded: dict[str, LoadedModel] = {}
        self._loading: dict[str, bool] = {}  # models being loaded: whether each has a file here
        self._cond: asyncio.Condition | None = None
        self._reaper: asyncio.Task[None] | None = None
        self.describer = Describer()  # each model file's header, read once per version of the file
        self.loads = 0  # models loaded since start (a model loaded twice at once would count twice)

    @property
    def current(self) -> LoadedModel | None:
        """The most recently used loaded model."""
        return max(self.loaded.values(), key=lambda m: m.last_used, default=None)

    async def lease(self, name: str | None, keep_alive: float | None = None) -> Lease:
        """Hold a model (loading it if needed) until the lease is released. keep_alive (seconds,
        negative: forever) replaces the model's keep-alive once this request ends."""
        spec = self.registry.resolve(name)
        cond = self._condition()
        if self._reaper is None:
            self._reaper = asyncio.create_task(self._reap())
        info, local = None, spec.kind == "file"
        if spec.name not in self.loaded and local:  # a missing or broken file: leave what is loaded alone
            info = await asyncio.to_thread(lambda: self.describer.header(spec.file()))
        async with cond:
            while True:
                model = self.loaded.get(spec.name)
                if model is not None:
                    model.active += 1
                    return Lease(self, model, keep_alive)
                if spec.name in self._loading:
                    await cond.wait()
                    continue
                if not local or self._files_held() < self.settings.max_loaded_models:
                    break  # (an upstream model takes no memory here: it does not count)
                idle = [m for m in self.loaded.values() if not m.active and not m.remote]
                if not idle:
                    await cond.wait()  # every loaded model is busy: wait for one to go idle
                    continue
                await self._unload(min(idle, key=lambda m: m.last_used))
            self._loading[spec.name] = local
        try:
            try:
                draft = draft_spec(self.registry, spec)
                model = await asyncio.to_thread(load_model, spec, info, self.settings, self.engine_factory, draft)
            except ModelTooLarge:
                if not await self._unload_idle():
                    raise
                model = await asyncio.to_thread(load_model, spec, info, self.settings, self.engine_factory,
                                                draft)  # sized to what was freed
        finally:
            async with cond:
                self._loading.pop(spec.name, None)
                cond.notify_all()
        self._loaded(model)
        async with cond:
            model.active += 1
            self.loaded[spec.name] = model
            self.loads += 1
        return Lease(self, model, keep_alive)

    def _files_held(self) -> int:
        """Models with a file here, loaded or being loaded (what max_loaded_models counts)."""
        return sum(not m.remote for m in self.loaded.values()) + sum(self._loading.values())

    def probe(self) -> None:
        """Ask each loaded upstream model's peer how it fares (its stats then tell; a local engine has
        nothing to ask). Blocking."""
        for model in list(self.loaded.values()):
            model.engine.probe()

    def _loaded(self, model: LoadedModel) -> None:
        if model.sizing is not None:
            self.report(f"{model.spec.name}: {model.sizing.describe()}")

    async def drop(self, name: str) -> None:
        """A model left the registry: unload it now if idle, else once its last request ends."""
        async with self._condition():
            model = self.loaded.get(name)
            if model is not None and not model.active:
                await self._unload(model)
            elif model is not None:
                model.keep_alive = 0

    async def _unload_idle(self) -> bool:
        """Unload every idle model (to make room for one that does not fit beside them)."""
        async with self._condition():
            idle = [m for m in self.loaded.values() if not m.active and not m.remote]
            for model in idle:
                await self._unload(model)
        return bool(idle)

    def _release(self, model: LoadedModel, keep_alive: float | None) -> None:
        model.active -= 1
        model.last_used = time.monotonic()
        if keep_alive is not None:
            model.keep_alive = keep_alive if keep_alive >= 0 else None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # released while shutting down: nothing waits any more
            return
        if self._cond is not None:
            loop.create_task(self._notify())

    async def _notify(self) -> None:
        assert self._cond is not None
        async with self._cond:
            for model in [m for m in self.loaded.values() if not m.active and m.keep_alive == 0]:
                await self._unload(model)
            self._cond.notify_all()

    async def _unload(self, model: LoadedModel) -> None:
        """With the condition held: forget the model, then free it off the event loop."""
        if self.loaded.get(model.spec.name) is model:
            del self.loaded[model.spec.name]
            log.info("unloading %s (idle %.0f s)", model.spec.name, model.idle_for())
            await asyncio.to_thread(model.engine.close)

    async def _reap(self) -> None:
        """Unload models idle past their keep-alive."""
        while True:
            await asyncio.sleep(self.settings.reap_interval)
            now = time.monotonic()
            expired = [m for m in self.loaded.values()
                       if not m.active and m.keep_alive is not None and m.idle_for(now) >= m.keep_alive]
            if expired:
                async with self._condition():
                    for model in expired:
                        if not model.active:
                            await self._unload(model)
                    self._condition().notify_all()

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    def sizing(self, name: str) -> Sizing | None:
        """The context and slots a model has, or would get if loaded now; None if its file is not
        on disk (a packaged model's is not fetched for this), cannot be read or does not fit.
        Blocking (reads the GGUF header once per version of the file)."""
        spec = self.registry.resolve(name)
        if spec.name in self.loaded:
            return self.loaded[spec.name].sizing
        where = spec.location()
        if spec.rpc:  # sized to its workers' memory when it loads (they are not asked for a description)
            return None
        try:
            draft = draft_spec(self.registry, spec)
            draft_at = draft.location() if draft is not None else None
            draft_info = self.describer.header(draft_at) if draft_at and draft_at.is_file() else None
            return size_model(spec, self.describer.header(where), self.settings, draft=draft_info) if where else None
        except LocalchatError:
            return None

    def context_length(self, name: str) -> int | None:
        """The context a model has or would get (without loading it): models.toml's while its file
        is not on disk yet. Blocking."""
        spec = self.registry.resolve(name)
        if spec.name in self.loaded:
            return self.loaded[spec.name].engine.n_ctx
        sizing = self.sizing(spec.name)
        if sizing is None and self.describer.describe(spec).file == "on_demand":
            return spec.context_length
        return sizing.context if sizing else None

    def forget(self) -> None:
        """The registry changed (a model pulled or deleted): read model files afresh."""
        self.describer = Describer()

    def describe(self, name: str) -> Description:
        """What a model is and can do: the loaded model's answer, else its file's (nothing is
        fetched). Blocking (reads the GGUF header once per version of the file)."""
        spec = self.registry.resolve(name)
        return self.describer.describe(spec, self.loaded.get(spec.name))

    def projector(self, name: str) -> ProjectorInfo | None:
        """What a model's projector (mmproj) reads, without loading the model; None: text only, or
        a projector that cannot be read (loading says why). Blocking."""
        spec = self.registry.resolve(name)
        if spec.name in self.loaded:
            return self.loaded[spec.name].projector
        if spec.mmproj is None:
            return None
        try:
            return self.describer.projector(spec.mmproj)
        except LocalchatError:
            return None

    def preload(self, name: str | None) -> LoadedModel:
        """Blocking load before the event loop runs (server start-up)."""
        spec = self.registry.resolve(name)
        model = self.loaded[spec.name] = load_model(spec, settings=self.settings, engine=self.engine_factory,
                                                    draft=draft_spec(self.registry, spec))
        self.loads += 1
        self._loaded(model)
        return model

    async def aclose(self) -> None:
        """close(), from the event loop: the workers stop in a thread."""
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        for model in self.loaded.values():
            model.engine.close()
        self.loaded.clear()
