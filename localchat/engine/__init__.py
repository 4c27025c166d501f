"""Tokens in, tokens out. Plain data at the boundary; llama_cpp stays inside."""

from .llama import Engine
from .params import Constraint, Done, Event, SamplingParams, Text

__all__ = ["Constraint", "Done", "Engine", "Event", "SamplingParams", "Text"]
