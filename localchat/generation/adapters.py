"""LoRA adapters by name or id: a request's `lora` choice, or the model's defaults, as the set
the engine applies: ((index in the model's `loras`, scale), …), sorted, without zero scales."""

from __future__ import annotations

from ..errors import InvalidRequest
from ..models.host import LoadedModel
from ..neutral import LoraChoice


def resolve_adapters(loaded: LoadedModel, choice: LoraChoice, param: str = "lora") -> tuple[tuple[int, float], ...]:
    if choice is None:
        scales = dict(enumerate(loaded.lora_scales))
    elif isinstance(choice, str):
        scales = {adapter_index(loaded, choice, param): 1.0}
    else:
        scales = {adapter_index(loaded, ref, f"{param}.{i}"): scale for i, (ref, scale) in enumerate(choice)}
    return tuple(sorted((i, float(s)) for i, s in scales.items() if s != 0))


def adapter_index(loaded: LoadedModel, ref: str | int, param: str) -> int:
    loras = loaded.spec.loras
    if isinstance(ref, int) and 0 <= ref < len(loras):
        return ref
    for i, lora in enumerate(loras):
        if lora.name == ref:
            return i
    known = ", ".join(f"{i}: {lora.name}" for i, lora in enumerate(loras)) or "none"
    raise InvalidRequest(f"{param}: the model {loaded.spec.name} has no LoRA adapter {ref!r} (its adapters: {known}; "
                         "see GET /lora-adapters)", param=param)
