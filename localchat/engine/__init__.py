"""Tokens in, tokens out. Plain data at the boundary; llama_cpp stays inside.

`Engine` is the interface (base.py), the data crossing it is params.py (outputs.py: what a step
produced); `LocalEngine` runs llama.cpp in this process (engine.py), `WorkerEngine` in a supervised
child process (worker/), `FakeEngine` plays a script (tests; fake.py), `UpstreamEngine` asks another
localchat over HTTP (remote/; its data as JSON: wire.py). The engines are imported on first use, so
that importing this package (or params.py) never loads llama.cpp.

Below the contract, one subpackage per layer, lowest first (tests/test_imports.py's ENGINE_LAYERS:
a module imports its own layer or below): llama/ (llama.cpp wrapped), sampling/, drafting/ and
media/, state/ (a Job, a Slot), cache/, core/ (the step), then the engines (engine.py, fake.py,
remote/) and worker/."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import Engine, Stream, Tokenizer
from .params import Constraint, Done, Event, Generate, PromptLogprobs, SamplingParams, Text, TokenLogprob, TopLogprob

if TYPE_CHECKING:
    from .engine import LocalEngine
    from .fake import FakeEngine
    from .remote.upstream import UpstreamEngine
    from .worker.worker import WorkerEngine

_LAZY = {"LocalEngine": "engine", "FakeEngine": "fake", "WorkerEngine": "worker.worker", "UpstreamEngine": "remote.upstream"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Constraint", "Done", "Engine", "Event", "FakeEngine", "Generate", "LocalEngine", "PromptLogprobs",
           "SamplingParams", "Stream",
           "Text", "TokenLogprob", "Tokenizer", "TopLogprob", "UpstreamEngine", "WorkerEngine"]
