"""Keeps one model loaded: its spec, what its GGUF says, its family and its engine."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ..engine import Engine
from ..errors import LocalchatError
from ..families import Family, detect, get_family
from ..registry import DEFAULT_CONTEXT_CAP, ModelInfo, ModelSpec, Registry, inspect


@dataclass
class LoadedModel:
    spec: ModelSpec
    info: ModelInfo
    family: Family
    template: str
    engine: Engine
    stop_ids: frozenset[int]

    @property
    def bos_token(self) -> str:
        return self.info.bos_token or self.family.bos_token

    @property
    def eos_token(self) -> str:
        return self.info.eos_token or self.family.eos_token


def context_length(spec: ModelSpec, info: ModelInfo) -> int:
    return spec.context_length or min(info.context_length or DEFAULT_CONTEXT_CAP, DEFAULT_CONTEXT_CAP)


def load_model(spec: ModelSpec, info: ModelInfo | None = None) -> LoadedModel:
    """Blocking: reads the GGUF header (unless given), picks the family and template, loads llama.cpp."""
    path = spec.file()
    info = info or inspect(path)
    family = get_family(spec.family) if spec.family else detect(info.architecture, info.chat_template, info.tokens)
    if spec.template:
        template = spec.template
    elif info.chat_template and not spec.family:
        template = info.chat_template
    else:
        template = family.template
    engine = Engine(path, n_ctx=context_length(spec, info), n_threads=spec.threads, n_gpu_layers=spec.gpu_layers)
    stop_ids = frozenset(i for t in family.stop_tokens if (i := engine.token_id(t)) is not None)
    engine.show_tokens(family.tools.visible_tokens)
    return LoadedModel(spec, info, family, template, engine, stop_ids)


class ModelHost:
    """Loads models on demand, one at a time (a laptop has room for one)."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.current: LoadedModel | None = None
        self._lock = asyncio.Lock()
        self._context_lengths: dict[str, int] = {}

    async def get(self, name: str | None) -> LoadedModel:
        spec = self.registry.resolve(name)
        async with self._lock:
            if self.current is None or self.current.spec.name != spec.name:
                info = await asyncio.to_thread(inspect, spec.file())  # a missing or broken file: keep what is loaded
                old, self.current = self.current, None
                if old is not None:
                    await asyncio.to_thread(old.engine.close)
                self.current = await asyncio.to_thread(load_model, spec, info)
            return self.current

    def context_length(self, name: str) -> int | None:
        """The context a model gets (without loading it); None if its file cannot be read."""
        spec = self.registry.resolve(name)
        if self.current is not None and self.current.spec.name == spec.name:
            return self.current.engine.n_ctx
        if spec.context_length:
            return spec.context_length
        if spec.name not in self._context_lengths:
            try:
                self._context_lengths[spec.name] = context_length(spec, inspect(spec.file()))
            except LocalchatError:
                return None
        return self._context_lengths[spec.name]

    def preload(self, name: str | None) -> LoadedModel:
        """Blocking load before the event loop runs (server start-up)."""
        self.current = load_model(self.registry.resolve(name))
        return self.current

    def close(self) -> None:
        if self.current is not None:
            self.current.engine.close()
            self.current = None
