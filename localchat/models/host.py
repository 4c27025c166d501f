"""The loaded models: each request leases its model until its last event; up to
`max_loaded_models` stay loaded, the least recently used idle one makes room, and a model
idle for longer than its keep-alive is unloaded."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from ..engine import Engine
from ..errors import LocalchatError, ModelNotFound, ModelTooLarge, ModelUnavailable
from ..families import Family
from ..families import choose as choose_family
from .catalog import ModelSpec, Registry, Settings
from .describe import Describer, Description, embeds, reranks
from .fit import Memory, MemoryShape, Sizing, choose, free_memory
from .gguf import RANK_POOLING, ModelInfo, ProjectorInfo, inspect, inspect_projector
from .paths import prompt_cache_dir, step_costs_file
from .upstream import open_chat_upstream, open_upstream

log = logging.getLogger("localchat.models")


@dataclass
class LoadedModel:
    spec: ModelSpec
    info: ModelInfo
    family: Family
    template: str
    engine: Engine
    stop_ids: frozenset[int]
    active: int = 0  # leases held: running and queued requests
    last_used: float = field(default_factory=time.monotonic)
    keep_alive: float | None = None  # seconds idle before unloading; None: forever
    sizing: Sizing | None = None  # the context and slots it got, and why
    lora_scales: list[float] = field(default_factory=list)  # each LoRA adapter's default scale (POST /lora-adapters)
    projector: ProjectorInfo | None = None  # what its mmproj reads (images, audio); None: text only
    # how requests reach its engine, decided here once (generation/runners.py): "tokens" (rendered,
    # constrained and tokenized by this server) or "chat" (an upstream that renders and parses itself)
    mode: Literal["tokens", "chat"] = "tokens"

    @property
    def remote(self) -> bool:
        """It runs in an upstream engine (it holds no memory here)."""
        return self.spec.kind == "upstream"

    @property
    def can_embed(self) -> bool:
        return embeds(self.spec, self.info)

    @property
    def can_rerank(self) -> bool:
        return reranks(self.spec, self.info)

    @property
    def can_infill(self) -> bool:
        if self.mode == "chat":  # no vocabulary here
            return False
        return all(k in self.engine.tokenizer.fim for k in ("pre", "suf", "mid"))

    @property
    def bos_token(self) -> str:
        return self.info.bos_token or self.family.bos_token

    @property
    def eos_token(self) -> str:
        return self.info.eos_token or self.family.eos_token

    def idle_for(self, now: float | None = None) -> float:
        return 0.0 if self.active else (now or time.monotonic()) - self.last_used


def size_model(spec: ModelSpec, info: ModelInfo, settings: Settings | None = None,
               memory: Memory | None = None, draft: ModelInfo | None = None) -> Sizing:
    """The context and slots the model gets on this machine now (fit.py): models.toml's values,
    else the server's (`--ctx-size`, `--parallel`), else the largest that fit in free memory
    (`memory`, else this machine's: an RPC model's is its workers'), beside its draft model if it has one."""
    settings = settings or Settings()
    shape = MemoryShape.of(info)
    if spec.rope_scale and shape.trained:  # stretched positions: the model takes that much more context
        shape = replace(shape, trained=int(shape.trained * spec.rope_scale))
    try:
        return choose(shape, memory or free_memory(spec.gpu_layers),
                      context=spec.context_length or settings.context_length, slots=spec.parallel or settings.parallel,
                      draft=MemoryShape.of(draft) if draft is not None else None, cache=cache_types(spec, settings))
    except ModelTooLarge as exc:
        raise ModelTooLarge(f"{spec.name} does not fit in memory: {exc.message}", param="model") from None


def cache_types(spec: ModelSpec, settings: Settings) -> tuple[str, str]:
    """The K and V cache types the model gets: its own, else the server's (f16 unless set)."""
    return spec.cache_type_k or settings.cache_type_k, spec.cache_type_v or settings.cache_type_v


def make_engine(path: Path, *, worker: bool, name: str, **options: Any) -> Engine:
    """The default engine factory: llama.cpp in a supervised worker process, or in this one
    (imported here: llama.cpp loads when the first engine is built, not when this module is imported).
    A model on RPC workers always gets a worker process: a lost link aborts the process it runs in.
    `options`: EngineConfig's fields (engine/params.py)."""
    from ..engine.params import EngineConfig

    lists = ("visible", "loras", "rpc", "tensor_split")
    config = EngineConfig(str(path), **{k: tuple(str(x) if k != "tensor_split" else x for x in v)
                                        if k in lists and v is not None else v for k, v in options.items()})
    if worker or config.rpc:
        from ..engine.worker import WorkerEngine

        return WorkerEngine(config, name)
    from ..engine.engine import LocalEngine

    return LocalEngine.from_config(config)


EngineFactory = Callable[..., Engine]  # make_engine's signature: (path, *, worker, name, n_ctx, parallel, …)


def load_model(spec: ModelSpec, info: ModelInfo | None = None, settings: Settings | None = None,
               engine: EngineFactory = make_engine, draft: ModelSpec | None = None) -> LoadedModel:
    """Blocking. The engine is chosen by the entry's kind: a file's reads the GGUF header (unless
    given), sizes the context and slots to the free memory, picks the family and template, and
    starts `engine` for it (with `draft`, the entry's draft model, resolved: draft_spec); an
    upstream's is opened on the peer, which says all that (upstream.py)."""
    settings = settings or Settings()
    if spec.kind == "upstream":
        return _load_upstream(spec, settings)
    path = spec.file()
    info = info or inspect(path)
    remote, memory = _rpc_options(spec)  # each RPC worker probed: a clear 503 when one is down
    layers = remote.pop("n_gpu_layers", spec.gpu_layers)
    drafting: dict[str, Any] = {}
    draft_info = None
    if draft is not None:
        from ..engine.params import Draft

        draft_path = draft.file()
        draft_info = inspect(draft_path)
        drafting["draft"] = Draft(str(draft_path), draft.gpu_layers, spec.draft_max, spec.draft_min, spec.draft_p_min)
    sizing = size_model(spec, info, settings, memory, draft_info)  # ModelTooLarge (a 503) before llama.cpp tries
    chosen = choose_family(spec.family, info, spec.template)
    family, template = chosen.family, chosen.template
    projector = inspect_projector(spec.mmproj) if spec.mmproj else None
    pooled = info.pooling_type not in (None, RANK_POOLING)  # a reranker's rank pooling makes no embeddings
    pooling = None if pooled else 1 if spec.embedding else None  # 1: mean
    started = engine(path, worker=settings.worker, name=spec.name, n_ctx=sizing.context, parallel=sizing.slots,
                     max_queue=settings.queue_limit, n_threads=spec.threads,
                     n_gpu_layers=layers,
                     visible=family.visible_tokens, pooling=pooling, loras=[lora.path for lora in spec.loras],
                     **remote,
                     mmproj=str(spec.mmproj) if spec.mmproj else None,
                     rope=(spec.rope_scaling, spec.rope_scale) if spec.rope_scale and spec.rope_scale != 1 else None,
                     prompt_cache=str(prompt_cache_dir()), prompt_cache_bytes=settings.prompt_cache_bytes,
                     step_costs=str(step_costs_file()), cache_types=sizing.cache, **drafting)
    stop_ids = frozenset(i for t in family.stop_tokens if (i := started.tokenizer.token_id(t)) is not None)
    keep = spec.keep_alive if spec.keep_alive is not None else settings.keep_alive
    return LoadedModel(spec, info, family, template, started, stop_ids, keep_alive=keep if keep >= 0 else None,
                       sizing=sizing, lora_scales=[lora.scale for lora in spec.loras], projector=projector)


def draft_spec(registry: Registry, spec: ModelSpec) -> ModelSpec | None:
    """The registry's entry for a model's draft model (`draft`), or None when it has none."""
    if not spec.draft or spec.kind != "file":
        return None
    try:
        draft = registry.resolve(spec.draft)
    except ModelNotFound:
        raise ModelUnavailable(f"{spec.name}: its draft model {spec.draft!r} is not a model of the registry",
                               param="model") from None
    if draft.kind != "file":
        raise ModelUnavailable(f"{spec.name}: its draft model {draft.name} is served by an upstream; a draft model "
                               "is a GGUF file here", param="model")
    return draft


def _rpc_options(spec: ModelSpec) -> tuple[dict[str, Any], Memory | None]:
    """An RPC model's engine options (its endpoints, its split, all layers on them unless its entry
    says how many) and its workers' free memory, probed; nothing for another model."""
    if not spec.rpc:
        return {}, None
    from ..engine import rpc

    endpoints = rpc.probe_all(spec.rpc, spec.name)
    memory = Memory(sum(e.free for e in endpoints), "RPC at " + ", ".join(spec.rpc))
    layers = spec.gpu_layers if "gpu_layers" in spec.model_fields_set else -1
    return {"rpc": list(spec.rpc), "tensor_split": spec.tensor_split, "n_gpu_layers": layers}, memory


def _load_upstream(spec: ModelSpec, settings: Settings) -> LoadedModel:
    opened = open_chat_upstream(spec) if spec.upstream_mode == "chat" else open_upstream(spec)
    keep = spec.keep_alive if spec.keep_alive is not None else settings.keep_alive
    return LoadedModel(opened.spec, opened.info, opened.family, opened.template, opened.engine, opened.stop_ids,
                       keep_alive=keep if keep >= 0 else None, sizing=opened.sizing, projector=opened.projector,
                       mode="chat" if spec.upstream_mode == "chat" else "tokens")


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
        """Ask each loaded upstream model's peer how it fares (its stats then tell). Blocking."""
        for model in list(self.loaded.values()):
            if model.remote:
                model.engine.probe()  # type: ignore[attr-defined]

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
