"""The server's settings (the top-level keys of models.toml, `localchat serve`'s flags over them)
and the pieces models.toml's entries share with them: the sampling defaults' model (built from the
engine's SamplingParams), durations ("10m"), the K/V cache types."""

from __future__ import annotations

import re
import typing
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from ..engine.params import KNOBS, SamplingParams, SpeedParams


def sampling_model(name: str, *, optional: bool, base: type[BaseModel] | None = None,
                   config: ConfigDict | None = None) -> type[BaseModel]:
    """A pydantic model with SamplingParams' and SpeedParams' settable fields and bounds: defaulting
    to None (a request: only what the client sent) or to the engine's defaults (models.toml)."""
    hints = {**typing.get_type_hints(SamplingParams), **typing.get_type_hints(SpeedParams)}
    defaults = {**asdict(SamplingParams()), **asdict(SpeedParams())}
    fields: dict[str, Any] = {}
    for key, bounds in KNOBS.items():
        kind = hints[key] | None if optional else hints[key]
        fields[key] = (kind, Field(None if optional else defaults[key], **bounds))
    if base is None:
        return create_model(name, __config__=config, **fields)
    return create_model(name, __base__=base, **fields)


SamplingDefaults = sampling_model("SamplingDefaults", optional=False, config=ConfigDict(extra="forbid"))


def parse_duration(value: object) -> float:
    """Seconds from a number or an Ollama-style duration ("10m", "1h30m", "45s", "-1")."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string such as '10m'")
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = re.fullmatch(r"(-)?(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?"
                         r"(?:(\d+(?:\.\d+)?)ms)?", text)
    if not text or not parts or not any(parts.groups()[1:]):
        raise ValueError(f"{text!r} is not a duration: use seconds or a string such as '10m', '1h30m', '45s'")
    h, m, sec, ms = (float(g or 0) for g in parts.groups()[1:])
    seconds = h * 3600 + m * 60 + sec + ms / 1000
    return -seconds if parts.group(1) else seconds


CacheType = Literal["f16", "q8_0", "q4_0"]  # a K/V cache type llama.cpp keeps (fit.CACHE_BYTES: bytes per value)


class Settings(BaseModel):
    """Server-wide settings: top-level keys of models.toml; `localchat serve` flags override them."""

    model_config = ConfigDict(extra="forbid")
    parallel: int | None = Field(None, ge=1, le=64)  # slots per loaded model (None: up to 4, as memory allows)
    context_length: int | None = Field(None, ge=64)  # tokens per slot for models without their own (None: fitted)
    queue_limit: int = Field(64, ge=0)  # requests that may wait for a slot; past it a 429
    max_loaded_models: int = Field(2, ge=1)
    keep_alive: float = 600.0  # seconds an idle model stays loaded; negative: forever
    reap_interval: float = Field(1.0, gt=0)  # how often idle models are looked at (seconds)
    # Request limits (docs/limits-and-safety.md "Limits"; checked in generation/limits.py): past each one a request
    # gets a 400 (413 for the body) naming the field; max_tokens_cap is a ceiling, a larger ask is lowered to it.
    max_body_bytes: int = Field(32 * 1024 * 1024, ge=1024)  # a request body's size
    max_tokens_cap: int = Field(16384, ge=1)  # tokens one choice may generate; also the default when none is asked
    max_stop_strings: int = Field(16, ge=0)  # entries in `stop`
    max_stop_chars: int = Field(1000, ge=1)  # characters in one stop string
    max_tools: int = Field(256, ge=0)  # entries in `tools`
    max_tool_schema_bytes: int = Field(1024 * 1024, ge=1024)  # all tools' `parameters` together, as compact JSON
    max_grammar_bytes: int = Field(1024 * 1024, ge=1024)  # a grammar: the raw `grammar`, or one made from schemas
    max_schema_depth: int = Field(64, ge=2, le=96)  # JSON nesting of one schema (96: what Python's stack allows)
    schema_loosened: Literal["report", "refuse"] = "report"  # a schema keyword no grammar enforces: header, or 400
    max_media: int = Field(16, ge=0)  # images and audio clips in one request
    max_media_bytes: int = Field(20 * 1024 * 1024, ge=1024)  # one image or audio file, decoded from base64
    max_image_pixels: int = Field(50_000_000, ge=1)  # width × height of one image (a decompression bomb's guard)
    fetch_images: bool = False  # fetch images named by http(s) URLs (off: a 400 asks for a data: URI)
    media_timeout: float = Field(10.0, gt=0, le=600)  # seconds one image's fetch may take
    media_folder: Path | None = None  # file:// URLs are read under this folder only (None: not at all)
    worker: bool = True  # run each model's llama.cpp in a supervised child process (False: in the server)
    # A tool that only a hosted API can run (web search, code execution, MCP connectors): "drop" leaves it out
    # of what the model sees and names it in the x-localchat-dropped-tools header; "refuse" makes it a 400.
    hosted_tools: Literal["drop", "refuse"] = "drop"
    log_requests: bool = True  # one access-log line per request
    # The K/V cache's types for models without their own (llama-server's --cache-type-k/-v): q8_0 halves the
    # cache's memory (the fitted context grows), q4_0 quarters it; a quantized V needs flash attention.
    cache_type_k: CacheType = "f16"
    cache_type_v: CacheType = "f16"
    metrics: bool = False  # GET /metrics: Prometheus metrics per model (api/metrics.py), as llama-server's --metrics
    # Prompts' K/V cells kept on disk (under the cache folder's prompts/) so that a long prompt is read once,
    # across restarts and unloads too: the folder's size limit in bytes, least recently used out first; 0: off.
    prompt_cache_bytes: int = Field(4 * 1024**3, ge=0)
    # llama-server's --slot-save-path: the folder where POST /slots/{id}?action=save writes a slot's prompt cache
    # and action=restore reads it (made if missing); None: the slot actions answer 501.
    slot_save_path: Path | None = None
    # Serve this server's models to other localchats (`serve --peer`): the token-mode routes under /internal/engine
    # that their `upstream` entries call (localchat/peer.py). Guarded like every route (loopback, the API key).
    peer: bool = False

    @field_validator("keep_alive", mode="before")
    @classmethod
    def _duration(cls, v: object) -> float:
        return parse_duration(v)
