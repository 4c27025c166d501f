"""Ollama's API on the same port, for the clients that speak it (VS Code Copilot's Ollama
provider, Open WebUI, the `ollama` libraries): the models and their facts (`/api/tags`,
`/api/show`, `/api/ps`, `/api/version`), embeddings (`/api/embed`, `/api/embeddings`), and chat
and generate (ollama_chat.py). Errors are Ollama's `{"error": "message"}`."""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..engine.embed import Embedder
from ..errors import InvalidRequest, LocalchatError
from ..families import DEFAULT_FAMILY, Family, detect, get_family
from ..generation import Chat, LoadedModel
from ..models import ModelInfo, ModelSpec, inspect
from ..models.gguf import read_metadata
from . import errors
from .body import parse, read_json
from .ollama_chat import KeepAlive, chat_route, generate_route, model_name
from .ollama_stream import Clock, nanos

VERSION = "0.9.0"  # the Ollama API this follows: `think` (0.9), structured outputs (0.5), tools
EMBED_MAX_TOKENS = Embedder.__init__.__kwdefaults__["n_batch"]  # the longest input one embedding takes
FIM_TEXTS = (("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"), ("<fim-prefix>", "<fim-suffix>", "<fim-middle>"),
             ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"), ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),
             ("<PRE>", "<SUF>", "<MID>"), ("▁<PRE>", "▁<SUF>", "▁<MID>"))  # as llama.cpp finds them by text
FOREVER = datetime(9999, 12, 31, tzinfo=timezone.utc)


def render(status: int, kind: str, message: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": message}


errors.register("/api/", render)


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ShowBody(_Lenient):
    model: str = ""
    name: str = ""  # the older clients' field


class EmbedBody(_Lenient):
    model: str = ""
    input: str | list[str] = ""
    truncate: bool = True
    keep_alive: KeepAlive = None
    dimensions: int | None = Field(None, ge=1)


class EmbeddingsBody(_Lenient):
    model: str = ""
    prompt: str = ""
    keep_alive: KeepAlive = None


@dataclass(frozen=True)
class Facts:
    """What a model's GGUF file says, read once per version of the file."""

    info: ModelInfo | None = None  # None: the file is not there (yet) or unreadable
    meta: dict[str, Any] = field(default_factory=dict)  # its scalar metadata
    size: int = 0
    modified: float = 0.0
    digest: str = ""


class Catalog:
    def __init__(self) -> None:
        self._cache: dict[str, tuple[tuple[str, int, int], Facts]] = {}

    async def facts(self, spec: ModelSpec) -> Facts:
        return await asyncio.to_thread(self._facts, spec)

    def _facts(self, spec: ModelSpec) -> Facts:
        path = spec.location()
        try:
            stat = Path(path).stat() if path else None
        except OSError:
            stat = None
        if stat is None:
            return Facts()
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        cached = self._cache.get(spec.name)
        if cached and cached[0] == key:
            return cached[1]
        digest = hashlib.sha256("\0".join(map(str, key)).encode()).hexdigest()
        try:
            info, meta = inspect(Path(path)), read_metadata(Path(path))
        except (LocalchatError, ValueError, OSError):
            info, meta = None, {}
        facts = Facts(info, {k: v for k, v in meta.items() if _shown(k, v)}, stat.st_size, stat.st_mtime, digest)
        self._cache[spec.name] = (key, facts)
        return facts


def _shown(key: str, value: Any) -> bool:
    if value is None or isinstance(value, list) or key.startswith("GGUF.") or key == "tokenizer.chat_template":
        return False
    return not (isinstance(value, float) and not math.isfinite(value))


def routes(chat: Chat) -> list[Route]:
    catalog, registry = Catalog(), chat.host.registry

    async def version(request: Request) -> Response:
        return JSONResponse({"version": VERSION})

    async def tags(request: Request) -> Response:
        models = []
        for name, spec in registry.models.items():
            facts = await catalog.facts(spec)
            models.append({"name": name, "model": name, "modified_at": _iso(facts.modified),
                           "size": facts.size, "digest": facts.digest, "details": _details(facts)})
        return JSONResponse({"models": models})

    async def show(request: Request) -> Response:
        body = parse(ShowBody, await read_json(request, chat.host.settings.max_body_bytes))
        spec = registry.resolve(model_name(registry, body.model or body.name) or "")
        facts = await catalog.facts(spec)
        loaded = chat.host.loaded.get(spec.name)
        n_ctx = await asyncio.to_thread(chat.host.context_length, spec.name)
        family, template = _family(spec, facts.info, loaded)
        parameters = _parameters(spec, family)
        return JSONResponse({
            "license": "", "modelfile": _modelfile(spec, template, parameters), "parameters": parameters,
            "template": template, "details": _details(facts), "model_info": _model_info(spec, facts, n_ctx),
            "capabilities": _capabilities(spec, facts, family, template, loaded), "modified_at": _iso(facts.modified)})

    async def ps(request: Request) -> Response:
        models = []
        for name, m in list(chat.host.loaded.items()):
            facts, stats = await catalog.facts(m.spec), m.engine.stats()
            models.append({"name": name, "model": name, "size": stats["bytes"], "digest": facts.digest,
                           "details": _details(facts), "expires_at": _expires(m),
                           "size_vram": stats["bytes"] if m.spec.gpu_layers else 0, "context_length": stats["n_ctx"]})
        return JSONResponse({"models": models})

    async def embed(request: Request) -> Response:
        clock = Clock()
        body = parse(EmbedBody, await read_json(request, chat.host.settings.max_body_bytes))
        texts = ([body.input] if body.input else []) if isinstance(body.input, str) else body.input
        name, vectors, count = await _embed(chat, body.model, texts, body.truncate, body.keep_alive, clock)
        if body.dimensions is not None and vectors:
            vectors = [_shorten(v, body.dimensions) for v in vectors]
        return JSONResponse({"model": body.model or name, "embeddings": vectors,
                             "total_duration": nanos(time.perf_counter() - clock.start),
                             "load_duration": nanos((clock.ready or clock.start) - clock.start),
                             "prompt_eval_count": count})

    async def embeddings(request: Request) -> Response:
        body = parse(EmbeddingsBody, await read_json(request, chat.host.settings.max_body_bytes))
        _, vectors, _ = await _embed(chat, body.model, [body.prompt] if body.prompt else [], True, body.keep_alive,
                                     Clock())
        return JSONResponse({"embedding": vectors[0] if vectors else []})

    async def chat_(request: Request) -> Response:
        return await chat_route(chat, request)

    async def generate(request: Request) -> Response:
        return await generate_route(chat, request)

    async def unsupported(request: Request) -> Response:
        return JSONResponse({"error": f"localchat does not manage models through {request.url.path}: add a GGUF "
                                      "file with `localchat models add PATH` (or edit models.toml)"}, status_code=501)

    return [Route("/api/version", version, methods=["GET"]), Route("/api/tags", tags, methods=["GET"]),
            Route("/api/show", show, methods=["POST"]), Route("/api/ps", ps, methods=["GET"]),
            Route("/api/chat", chat_, methods=["POST"]), Route("/api/generate", generate, methods=["POST"]),
            Route("/api/embed", embed, methods=["POST"]), Route("/api/embeddings", embeddings, methods=["POST"]),
            *(Route(f"/api/{p}", unsupported, methods=["POST", "DELETE"])
              for p in ("pull", "push", "create", "copy", "delete"))]


async def _embed(chat: Chat, model: str, texts: list[str], truncate: bool, keep_alive: float | None,
                 clock: Clock) -> tuple[str, list[list[float]], int]:
    """(the model's name, one L2-normalized vector per text, the tokens embedded)."""
    lease = await chat.host.lease(model_name(chat.host.registry, model), keep_alive)
    try:
        loaded = lease.model
        if not loaded.can_embed:
            raise InvalidRequest(f"the model {loaded.spec.name} does not embed: its GGUF declares no pooling type; "
                                 f"set `embedding = true` under [models.{loaded.spec.name}] in models.toml to embed "
                                 "with it (mean pooling), or use an embedding model", param="model")
        clock.ready = time.perf_counter()

        def tokenize() -> list[list[int]]:
            tokens = [loaded.engine.tokenize([(text, True)]) for text in texts]
            return [t[:EMBED_MAX_TOKENS] for t in tokens] if truncate else tokens

        tokens = await asyncio.to_thread(tokenize)
        vectors = await loaded.engine.embed(tokens) if tokens else []
    finally:
        lease.release()
    return loaded.spec.name, vectors, sum(map(len, tokens))


def _shorten(vector: list[float], dimensions: int) -> list[float]:
    if dimensions > len(vector):
        raise InvalidRequest(f"dimensions: this model's embeddings have {len(vector)} dimensions", param="dimensions")
    cut = vector[:dimensions]
    norm = math.sqrt(sum(x * x for x in cut)) or 1.0
    return [x / norm for x in cut]


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat().replace("+00:00", "Z")


def _expires(m: LoadedModel) -> str:
    if m.keep_alive is None:
        return FOREVER.isoformat().replace("+00:00", "Z")
    left = max(0.0, m.keep_alive - m.idle_for())
    return (datetime.now(timezone.utc) + timedelta(seconds=left)).isoformat().replace("+00:00", "Z")


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


def _family(spec: ModelSpec, info: ModelInfo | None, loaded: LoadedModel | None) -> tuple[Family, str]:
    """The family and template the model has, or will have once loaded (as load_model picks them)."""
    if loaded is not None:
        return loaded.family, loaded.template
    family = (get_family(spec.family) if spec.family else
              detect(info.architecture, info.chat_template, info.tokens) if info else DEFAULT_FAMILY)
    own = info.chat_template if info and not spec.family else None
    return family, spec.template or own or family.template


def _parameters(spec: ModelSpec, family: Family) -> str:
    names = {"max_tokens": "num_predict", "penalty_last_n": "repeat_last_n"}
    lines = [f"{names.get(k, k)} {v}" for k, v in spec.sampling.model_dump().items() if v is not None]
    return "\n".join(lines + [f'stop "{t}"' for t in family.stop_tokens])


def _modelfile(spec: ModelSpec, template: str, parameters: str) -> str:
    lines = ["# localchat reads models.toml, not Modelfiles: this one only describes the model",
             f"FROM {spec.location() or spec.package}", f'TEMPLATE """{template}"""']
    return "\n".join(lines + [f"PARAMETER {p}" for p in parameters.splitlines()]) + "\n"


def _model_info(spec: ModelSpec, facts: Facts, n_ctx: int | None) -> dict[str, Any]:
    arch = facts.info.architecture if facts.info else "unknown"
    out: dict[str, Any] = {**facts.meta, "general.architecture": arch, "general.basename": spec.name}
    if facts.info:
        out["general.parameter_count"] = facts.info.parameters
    if n_ctx:
        out[f"{arch}.context_length"] = n_ctx  # the context this server gives it, not the GGUF's trained one
    return out


def _capabilities(spec: ModelSpec, facts: Facts, family: Family, template: str,
                  loaded: LoadedModel | None) -> list[str]:
    info = facts.info
    if info and info.pooling_type:  # an embedding model
        return ["embedding"]
    caps = ["completion", "tools"]  # every family's template gets tools, under the tool-call grammar
    if loaded.can_infill if loaded else _has_fim(facts):
        caps.append("insert")
    if loaded.can_embed if loaded else spec.embedding:
        caps.append("embedding")
    if family.reasoning and family.reasoning[0] in template:
        caps.append("thinking")
    return caps


def _has_fim(facts: Facts) -> bool:
    keys = ("tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.fim_mid_token_id")
    tokens = facts.info.tokens if facts.info else frozenset()
    return all(k in facts.meta for k in keys) or any(all(t in tokens for t in triple) for triple in FIM_TEXTS)
