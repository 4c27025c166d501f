"""What models there are and which are loaded: the catalog (models.toml, the user's registry),
GGUF metadata, paths, and the host that loads models and lends them to requests
(`localchat.models.host`, kept out of this import: it brings in the families and the engine;
llama.cpp itself loads only when the host builds an engine)."""

from .catalog import ModelSpec, Registry, SamplingDefaults, Settings, parse_duration, sampling_model, shipped_config
from .gguf import ModelInfo, inspect

__all__ = ["ModelInfo", "ModelSpec", "Registry", "SamplingDefaults", "Settings", "inspect",
           "parse_duration", "sampling_model", "shipped_config"]
