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
    """A GBNF grammar (start rule `root`) the output must follow; checked by the caller
    before it gets here. With triggers it is lazy: the text is free until it contains one of
    the trigger strings, and from the end of that string on the grammar holds."""

    grammar: str
    triggers: tuple[str, ...] = ()
    after: str = ""  # the triggers count only once this text has been written (a think block's end)


@dataclass(frozen=True)
class Generate:
    """One request to the engine: a prompt, and how to continue it n times."""

    tokens: list[int]
    params: SamplingParams
    stop_tokens: frozenset[int] = frozenset()
    constraint: Constraint | None = None
    n: int = 1  # completions of the same prompt; completion i samples with seed + i
    logprobs: int | None = None  # None: no log-probabilities; k: the chosen token's and the k most likely


@dataclass(frozen=True)
class TopLogprob:
    token: str
    logprob: float
    bytes: list[int]


@dataclass(frozen=True)
class TokenLogprob:
    """The log-probability of a generated token under the model's raw distribution (before
    penalties, temperature, truncation and grammar), and the most likely alternatives."""

    token: str
    logprob: float
    bytes: list[int]
    top: list[TopLogprob]


@dataclass(frozen=True)
class Text:
    """Decoded text, never splitting a UTF-8 character or a possible stop string; with the
    log-probabilities of the tokens generated since the previous event, when asked for."""

    text: str
    index: int = 0
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class Done:
    finish_reason: str  # "stop" | "length" | "cancelled"
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    index: int = 0


Event = Text | Done
