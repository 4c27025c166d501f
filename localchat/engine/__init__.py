"""Tokens in, tokens out. Plain data at the boundary; llama_cpp stays inside."""

from .engine import Engine, Stream
from .worker import WorkerEngine
from .params import Constraint, Done, Event, Generate, SamplingParams, Text, TokenLogprob, TopLogprob

__all__ = ["Constraint", "Done", "Engine", "Event", "Generate", "SamplingParams", "Stream", "Text", "TokenLogprob",
           "TopLogprob", "WorkerEngine"]
