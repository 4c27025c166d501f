"""An `upstream` entry of models.toml: the model runs in another localchat (`serve --peer`), and
what this server needs to render, constrain and size for it is what the peer says about it:
its GGUF's facts, family and template, projector, context, slots and sizing (engine/remote/upstream.py
opens it there). `facts_dict` is the peer's half: what its /internal/engine/open answers."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from ..engine.remote.upstream import UpstreamEngine
from ..engine.remote.upstream_chat import ChatEngine
from ..errors import LocalchatError, UpstreamError
from ..families import FAMILIES, Family, get_family
from .catalog import ModelSpec
from .fit import Memory, Need, Sizing
from .gguf import ModelInfo, ProjectorInfo


@dataclass(frozen=True)
class Opened:
    """An upstream model, opened: the entry with the peer's defaults under its own, and the rest
    of what a loaded model holds."""

    spec: ModelSpec
    info: ModelInfo
    family: Family
    template: str
    engine: UpstreamEngine | ChatEngine
    stop_ids: frozenset[int]
    sizing: Sizing | None
    projector: ProjectorInfo | None


def open_upstream(spec: ModelSpec) -> Opened:
    """Blocking: the peer loads the model (if it has not) and says what it is."""
    engine = UpstreamEngine(spec.peer(), name=spec.name)
    try:
        facts = engine.facts
        projector = facts.get("projector")
        return Opened(_with_defaults(spec, facts), info_of(facts["info"]), get_family(facts["family"]),
                      str(facts["template"]), engine, frozenset(int(t) for t in facts["stop_ids"]),
                      sizing_of(facts["sizing"], spec.upstream or "") if facts.get("sizing") else None,
                      ProjectorInfo(bool(projector["vision"]), bool(projector["audio"])) if projector else None)
    except (KeyError, TypeError, ValueError, LocalchatError) as exc:
        engine.close()
        raise UpstreamError(f"the upstream {spec.upstream} described the model {spec.name} in a way this server "
                            f"cannot read ({type(exc).__name__}: {exc}); is it another version of localchat?",
                            param="model") from None


# A model in chat mode has no template or family here (the upstream renders and parses): this
# stands in where a loaded model must name one (/health shows "upstream").
CHAT_FAMILY = replace(FAMILIES["chatml"], name="upstream")


def open_chat_upstream(spec: ModelSpec) -> Opened:
    """Blocking: the upstream's model list is asked for the model (chat mode)."""
    engine = ChatEngine(spec.peer(), name=spec.name)
    info = ModelInfo(architecture="upstream", context_length=engine.n_ctx or None, chat_template=None,
                     bos_token="", eos_token="", tokens=frozenset())
    return Opened(spec, info, CHAT_FAMILY, "", engine, frozenset(), None, None)


def _with_defaults(spec: ModelSpec, facts: dict[str, Any]) -> ModelSpec:
    """The peer's sampling defaults and system_prompt_strip, under what this entry sets itself."""
    known = type(spec.sampling).model_fields
    theirs = {k: v for k, v in (facts.get("sampling") or {}).items() if k in known}
    sampling = spec.sampling.model_validate({**theirs, **spec.sampling.model_dump(exclude_unset=True)})
    strip = spec.system_prompt_strip if "system_prompt_strip" in spec.model_fields_set else facts.get("system_prompt_strip")
    return spec.model_copy(update={"sampling": sampling, "system_prompt_strip": strip})


def info_dict(info: ModelInfo) -> dict[str, Any]:
    """A GGUF's facts as JSON (its files stay where they are)."""
    return {**asdict(info), "tokens": sorted(info.tokens), "files": []}


def info_of(data: dict[str, Any]) -> ModelInfo:
    known = {f.name for f in fields(ModelInfo)} - {"files"}
    values = {k: v for k, v in data.items() if k in known}
    return ModelInfo(**{**values, "tokens": frozenset(values.get("tokens") or ())})


def sizing_of(data: dict[str, Any], url: str) -> Sizing:
    """The context and slots the peer gave the model, and why (its memory, not this machine's)."""
    return Sizing(int(data["context_length"]), int(data["slots"]), Need(**data["need"]),
                  Memory(int(data["memory_free_bytes"]), f"{data['memory']} at {url}"), f"{data['reason']} (at {url})",
                  (str(data.get("cache_type_k", "f16")), str(data.get("cache_type_v", "f16"))))
