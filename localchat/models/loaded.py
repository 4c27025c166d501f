"""A model loaded for serving (`LoadedModel`) and how one is loaded: its size fitted to free
memory (fit.py), its family chosen, its engine built (in a worker process, in-process, or an
upstream's), its draft model found. The host (host.py) keeps them and decides when."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from ..engine import Engine
from ..errors import ModelNotFound, ModelTooLarge, ModelUnavailable
from ..families import Family
from ..families import choose as choose_family
from .catalog import ModelSpec, Registry, Settings
from .describe import embeds, reranks
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
        from ..engine.worker.worker import WorkerEngine

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
    from ..engine.remote import rpc

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
