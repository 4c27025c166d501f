"""The models as Ollama's clients see them: `/api/tags`, `/api/show`, `/api/ps`, from the
service's `chat.models` (registered, loaded, described) and each GGUF file's metadata (read once
per version of the file)."""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...errors import LocalchatError
from ...families import Family, choose
from ...generation import Chat, LoadedView
from ...models import ModelInfo, ModelSpec, inspect
from ...models.fit import Sizing
from ...models.gguf import read_metadata
from ..body import parse, read_json
from .chat import Named, model_name

# Ollama's names for localchat's capabilities (models.describe), in Ollama's order; a reranker has none.
CAPABILITIES = {"completion": "completion", "tools": "tools", "fim": "insert", "embedding": "embedding",
                "reasoning": "thinking", "vision": "vision", "audio": "audio"}


@dataclass(frozen=True)
class Facts:
    """What a model's GGUF file says, read once per version of the file."""

    info: ModelInfo | None = None  # None: the file is not there (yet) or unreadable
    meta: dict[str, Any] = field(default_factory=dict)  # its scalar metadata
    size: int = 0
    modified: float = 0.0
    digest: str = ""


class Catalog:
    """Facts per model name, kept while the file's path, size and modification time stay the same."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[tuple[str, int, int], Facts]] = {}

    async def facts(self, spec: ModelSpec) -> Facts:
        return await asyncio.to_thread(self._facts, spec)

    def _facts(self, spec: ModelSpec) -> Facts:
        path = spec.location()
        try:
            stat = path.stat() if path else None
        except OSError:
            stat = None
        if path is None or stat is None:
            return Facts()
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        cached = self._cache.get(spec.name)
        if cached and cached[0] == key:
            return cached[1]
        digest = hashlib.sha256("\0".join(map(str, key)).encode()).hexdigest()
        try:
            info, meta = inspect(path), read_metadata(path)
        except (LocalchatError, ValueError, OSError):
            info, meta = None, {}
        facts = Facts(info, {k: v for k, v in meta.items() if _shown(k, v)}, stat.st_size, stat.st_mtime, digest)
        self._cache[spec.name] = (key, facts)
        return facts


def _shown(key: str, value: Any) -> bool:
    if value is None or isinstance(value, list) or key.startswith("GGUF.") or key == "tokenizer.chat_template":
        return False
    return not (isinstance(value, float) and not math.isfinite(value))


async def tags(chat: Chat, catalog: Catalog, request: Request) -> Response:
    models = []
    for name, spec in chat.models.registered().items():
        facts = await catalog.facts(spec)
        models.append({"name": name, "model": name, "modified_at": _iso(facts.modified),
                       "size": facts.size, "digest": facts.digest, "details": _details(facts)})
    return JSONResponse({"models": models})


async def show(chat: Chat, catalog: Catalog, request: Request) -> Response:
    body = parse(Named, await read_json(request, chat.settings.max_body_bytes))
    spec = chat.models.resolve(model_name(chat.models, body.named))
    facts = await catalog.facts(spec)
    loaded = chat.models.loaded(spec.name)
    sizing = await chat.models.sizing(spec.name)
    described = await chat.models.describe(spec.name)
    family, template = _family(spec, facts.info, loaded)
    parameters = _parameters(spec, family)
    return JSONResponse({
        "license": "", "modelfile": _modelfile(spec, template, parameters), "parameters": parameters,
        "template": template, "details": _details(facts), "model_info": _model_info(spec, facts, sizing),
        "capabilities": [ours for name, ours in CAPABILITIES.items() if name in described.capabilities],
        "modified_at": _iso(facts.modified)})


async def ps(chat: Chat, catalog: Catalog, request: Request) -> Response:
    models = []
    for m in chat.models.running():
        facts, stats, name = await catalog.facts(m.spec), m.stats, m.spec.name
        models.append({"name": name, "model": name, "size": stats.bytes, "digest": facts.digest,
                       "details": _details(facts), "expires_at": _expires(m),
                       "size_vram": stats.bytes if m.spec.gpu_layers else 0, "context_length": stats.n_ctx})
    return JSONResponse({"models": models})


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat().replace("+00:00", "Z")


def _expires(m: LoadedView) -> str:
    if m.keep_alive is None:  # never
        return "9999-12-31T00:00:00Z"
    return _iso(time.time() + max(0.0, m.keep_alive - m.idle_seconds))


def _details(facts: Facts) -> dict[str, Any]:
    info = facts.info
    arch = info.architecture if info else ""
    quant = info.quantization if info and info.quantization != "unknown" else ""
    return {"parent_model": "", "format": "gguf", "family": arch, "families": [arch] if arch else None,
            "parameter_size": _human(info.parameters) if info and info.parameters else "",
            "quantization_level": quant.removeprefix("ALL_")}


def _human(n: int) -> str:
    """Ollama's way: 8B, 7.6B, 268.10M, 135M, 12K."""
    for size, unit, decimals in ((1e9, "B", 1), (1e6, "M", 2)):
        if n >= size:
            x = n / size
            return f"{x:.0f}{unit}" if x == int(x) else f"{x:.{decimals}f}{unit}"
    return f"{n / 1e3:.0f}K" if n >= 1e3 else str(n)


def _family(spec: ModelSpec, info: ModelInfo | None, loaded: LoadedView | None) -> tuple[Family, str]:
    """The family and template the model has, or will have once loaded (as load_model picks them)."""
    if loaded is not None:
        return loaded.family, loaded.template
    chosen = choose(spec.family, info, spec.template)
    return chosen.family, chosen.template


def _parameters(spec: ModelSpec, family: Family) -> str:
    names = {"max_tokens": "num_predict", "penalty_last_n": "repeat_last_n"}
    lines = [f"{names.get(k, k)} {v}" for k, v in spec.sampling.model_dump().items() if v is not None]
    return "\n".join(lines + [f'stop "{t}"' for t in family.stop_tokens])


def _modelfile(spec: ModelSpec, template: str, parameters: str) -> str:
    lines = ["# localchat reads models.toml, not Modelfiles: this one only describes the model",
             f"FROM {spec.location() or spec.package or spec.wheel or spec.parts or spec.upstream}", f'TEMPLATE """{template}"""']
    return "\n".join(lines + [f"PARAMETER {p}" for p in parameters.splitlines()]) + "\n"


def _model_info(spec: ModelSpec, facts: Facts, sizing: Sizing | None) -> dict[str, Any]:
    arch = facts.info.architecture if facts.info else "unknown"
    out: dict[str, Any] = {**facts.meta, "general.architecture": arch, "general.basename": spec.name}
    if facts.info:
        out["general.parameter_count"] = facts.info.parameters
    if sizing:  # the context this server gives it (or would, loaded now), not the GGUF's trained one; and why
        out[f"{arch}.context_length"] = sizing.context
        out.update({"localchat.slots": sizing.slots, "localchat.memory_needed": sizing.need.total,
                    "localchat.sizing": sizing.reason})
    return out
