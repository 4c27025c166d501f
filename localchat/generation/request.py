"""The neutral generation request: what every protocol translates its own request into.

Typed messages made of parts, typed sampling overrides (only what the client set), the output's
rules, a reasoning switch, n and log-probabilities. Nothing here is any protocol's wording:
generation applies limits and defaults once, and an error names a field of this request (a
`field` path such as `tools.2.parameters` or `json_schema`), which each protocol says in its
own words (api/<protocol>'s table)."""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass, replace
from typing import Any, Literal

from ..engine.params import KNOBS, SamplingParams
from .adapters import LoraChoice
from .constraints import OutputRules


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Image:
    """An image as the client sent it (decoded from base64 or a data URI, or a URL to load), for
    a model with a vision projector."""

    data: bytes
    media_type: str | None = None
    where: str = ""  # where the client sent it, in its protocol's words (`messages.0.content.1`): errors name it
    url: str | None = None  # an http(s) or file URL to load it from (generation/fetch.py), instead of `data`
    url_where: str = ""  # where the URL sits (`messages.0.content.1.image_url.url`)


@dataclass(frozen=True)
class Audio:
    """An audio clip as the client sent it (a file's bytes), for a model whose projector hears."""

    data: bytes
    format: str  # wav | mp3 | flac
    where: str = ""


Part = Text | Image | Audio


@dataclass(frozen=True)
class ToolCall:
    """An assistant's earlier tool call, as the client sends it back."""

    name: str
    arguments: Any  # the JSON object (a string the client sent that is not JSON stays a string)
    id: str | None = None


@dataclass(frozen=True)
class Message:
    role: Literal["system", "user", "assistant", "tool"]
    content: tuple[Part, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant's
    tool_call_id: str | None = None  # a tool result: the call it answers
    name: str | None = None  # a tool result: the tool's name
    reasoning: str | None = None  # an assistant's earlier thinking

    @property
    def text(self) -> str:
        return "\n".join(p.text for p in self.content if isinstance(p, Text))

    @classmethod
    def of(cls, role: str, text: str, **extra: Any) -> Message:
        return cls(role, (Text(text),), **extra)  # type: ignore[arg-type]


def _sampling_class() -> type:
    """The request's sampling overrides: SamplingParams' settable fields, each None unless the
    client set it (declared once, in engine/params.py), plus stop strings, logit bias by token
    id (as the client wrote it: checked in generation) and ignore_eos."""
    names = [*KNOBS, "stop", "ignore_eos"]
    cls = make_dataclass("Sampling", [(n, Any, field(default=None)) for n in names]
                         + [("logit_bias", dict, field(default_factory=dict))], frozen=True)
    cls.__doc__ = _sampling_class.__doc__

    def over(self: Any, base: SamplingParams) -> SamplingParams:
        """`base` with what the client set."""
        return replace(base, **{n: getattr(self, n) for n in names if getattr(self, n) is not None})

    cls.over = over  # type: ignore[attr-defined]
    return cls


Sampling: Any = _sampling_class()


@dataclass(frozen=True)
class GenerationRequest:
    """One generation: chat messages rendered with the model's template, or a raw prompt (no
    template; with `suffix`, fill-in-the-middle with `extra` files as context)."""

    messages: tuple[Message, ...] = ()
    model: str | None = None  # None or "": the default model
    prompt: str | None = None
    suffix: str | None = None
    extra: tuple[tuple[str, str], ...] = ()  # (filename, text)
    sampling: Any = field(default_factory=Sampling)
    output: OutputRules = OutputRules()
    reasoning: bool | None = None  # think or not, where the model's template has the switch; None: its default
    n: int = 1
    logprobs: int | None = None  # None: none; k: the chosen token's and the k most likely
    keep_alive: float | None = None  # seconds the model stays loaded after this request
    lora: LoraChoice = None  # LoRA adapters by name or id (adapters.py); None: the model's defaults
    # The prompt's end: continue the last message, the assistant's (True: no end of turn, no new turn),
    # or close it (False); None: continue it when the last message is the assistant's (a prefill).
    continue_final: bool | None = None
    generation_prompt: bool = True  # when not continuing: open the assistant's turn (the template's add_generation_prompt)
    template_kwargs: dict[str, Any] = field(default_factory=dict)  # more variables for the chat template
    documents: tuple[dict[str, str], ...] = ()  # for retrieval: to a template that takes them, else the system prompt
    cache_prompt: bool = True  # False: the prompt is neither read from a slot's cache nor left in it
    prompt_logprobs: int | None = None  # k: each prompt token's log-probability and the k most likely
