"""Request fields that more than one protocol parses the same way: the optional sampling knobs
(OpenAI's chat and legacy completions, Responses), a tool call's arguments as a JSON value (OpenAI's
messages, Ollama's), and a request's LoRA adapters (`lora`: OpenAI's requests, llama-server's
`/lora-adapters`). Neutral ground, so that no protocol imports another's request models."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..generation.adapters import LoraChoice
from ..models import sampling_model
from .common import Lenient

SamplingFields = sampling_model("SamplingFields", optional=True, base=Lenient)


def call_arguments(arguments: str | dict[str, Any]) -> Any:
    """A tool call's arguments as the JSON value they encode (a string that is not JSON stays)."""
    if isinstance(arguments, dict):
        return arguments
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


class LoraRef(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: int | None = Field(None, ge=0)
    name: str | None = None
    scale: float = Field(1.0, ge=-100, le=100)  # NaN fails too

    @model_validator(mode="after")
    def _one(self) -> "LoraRef":
        if (self.id is None) == (self.name is None):
            raise ValueError("give an adapter's `name` or its `id`")
        return self


LoraField = list[LoraRef] | str | None  # a request's `lora` (the list first: its errors name the entry)


def lora_choice(value: LoraField) -> LoraChoice:
    """The request's field as the generation layer takes it."""
    if value is None or isinstance(value, str):
        return value
    return tuple((ref.name if ref.name is not None else ref.id, ref.scale) for ref in value)  # type: ignore[misc]
