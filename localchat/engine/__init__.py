"""Tokens in, tokens out. Plain data at the boundary; llama_cpp stays inside.

`Engine` is the interface (base.py); `LocalEngine` runs llama.cpp in this process, `WorkerEngine`
in a supervised child process, `FakeEngine` plays a script (tests)."""

from .base import Engine, Stream, Tokenizer
from .engine import LocalEngine
from .fake import FakeEngine
from .worker import WorkerEngine
from .params import Constraint, Done, Event, Generate, PromptLogprobs, SamplingParams, Text, TokenLogprob, TopLogprob

__all__ = ["Constraint", "Done", "Engine", "Event", "FakeEngine", "Generate", "LocalEngine", "PromptLogprobs",
           "SamplingParams", "Stream",
           "Text", "TokenLogprob", "Tokenizer", "TopLogprob", "WorkerEngine"]
