"""Tokens in, tokens out. Plain data at the boundary; llama_cpp stays inside."""

from .llama import Engine
from .params import Done, Event, SamplingParams, Text

__all__ = ["Done", "Engine", "Event", "SamplingParams", "Text"]
