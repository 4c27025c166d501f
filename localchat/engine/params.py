"""Plain data crossing the engine boundary."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int | None = None  # None: until the context is full
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_last_n: int = 64
    seed: int | None = None
    logit_bias: dict[int, float] = field(default_factory=dict)
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False


@dataclass(frozen=True)
class Constraint:
    """A GBNF grammar the output must follow; checked by the caller before it gets here.
    With trigger patterns or tokens it is lazy: free text until a trigger, then the grammar."""

    grammar: str
    root: str = "root"
    trigger_patterns: tuple[str, ...] = ()
    trigger_tokens: tuple[int, ...] = ()

    @property
    def lazy(self) -> bool:
        return bool(self.trigger_patterns or self.trigger_tokens)


@dataclass(frozen=True)
class Text:
    """Decoded text, never splitting a UTF-8 character or a possible stop string."""

    text: str


@dataclass(frozen=True)
class Done:
    finish_reason: str  # "stop" | "length" | "cancelled"
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int


Event = Text | Done
