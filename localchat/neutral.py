"""The neutral vocabulary: what every protocol translates its request into, and the events a
generation produces, whatever the protocol and whatever the model's tool-call syntax.

The ground floor: this module imports nothing of localchat's (for the type checker only, a name
of engine/params.py); the protocols (api/), generation, the families and their codecs all import
it. Nothing here is any protocol's wording, nor any server limit: generation applies limits and
defaults once, and an error names a field of the request (a `field` path such as
`tools.2.parameters` or `json_schema`), which each protocol says in its own words."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    from .engine.params import TokenLogprob


# -- the output, split: what generation streams (families/codecs/split.py produces the pieces) --

@dataclass(frozen=True)
class Delta:
    """Answer text (content)."""

    content: str


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class ToolCallStart:
    index: int
    id: str
    name: str


@dataclass(frozen=True)
class ToolCallArguments:
    """A fragment of a call's arguments, always of a JSON object's text."""

    index: int
    fragment: str


Piece = Delta | ReasoningDelta | ToolCallStart | ToolCallArguments


def new_call_id() -> str:
    """A neutral call id (each protocol writes it with its own prefix: call_, toolu_)."""
    return secrets.token_hex(12)


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    resampled_tokens: int = 0  # written, then taken back: a value broke the schema (not in completion_tokens)
    prediction: tuple[int, int] | None = None  # with a prediction: its tokens accepted (written), and rejected

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Finish:
    """One choice has ended; `usage` counts that choice's completion tokens."""

    reason: str  # end: the model ended its turn | stop: a stop string matched | length: out of tokens
    usage: Usage
    index: int = 0
    matched_stop: str | None = None  # the stop string that ended the text, if one did
    calls: int = 0  # tool calls made in this choice


@dataclass(frozen=True)
class Logprobs:
    index: int
    tokens: tuple[TokenLogprob, ...]


# -- the request: messages --------------------------------------------------------------------

@dataclass(frozen=True)
class TextPart:
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


Part = TextPart | Image | Audio


@dataclass(frozen=True)
class PastCall:
    """An assistant's earlier tool call, as the client sends it back."""

    name: str
    arguments: Any  # the JSON object (a string the client sent that is not JSON stays a string)
    id: str | None = None


@dataclass(frozen=True)
class ChatMessage:
    role: Literal["system", "user", "assistant", "tool"]
    content: tuple[Part, ...] = ()
    tool_calls: tuple[PastCall, ...] = ()  # an assistant's
    tool_call_id: str | None = None  # a tool result: the call it answers
    name: str | None = None  # a tool result: the tool's name
    reasoning: str | None = None  # an assistant's earlier thinking

    @property
    def text(self) -> str:
        return "\n".join(p.text for p in self.content if isinstance(p, TextPart))

    @classmethod
    def of(cls, role: str, text: str, **extra: Any) -> ChatMessage:
        return cls(role, (TextPart(text),), **extra)  # type: ignore[arg-type]


# -- the request: sampling and reasoning ------------------------------------------------------

_Params = TypeVar("_Params")  # engine/params.py's SamplingParams (not imported: it sits above)


@dataclass(frozen=True)
class Sampling:
    """The request's sampling overrides, each None unless the client set it: SamplingParams' and
    SpeedParams' settable fields (engine/params.py's KNOBS, which declares their bounds; a test keeps the two
    alike), plus stop strings, logit bias by token id (as the client wrote it: checked in
    generation), ignore_eos and the editor limits."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repeat_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    penalty_last_n: int | None = None
    repetition_stop: int | None = None
    seed: int | None = None
    ngram_draft: int | None = None  # (SpeedParams')
    cache_reuse: int | None = None
    stop: tuple[str, ...] | None = None
    ignore_eos: bool | None = None
    n_indent: int | None = None  # llama-server's editor limits (/infill)
    t_max_predict_ms: int | None = None
    logit_bias: dict[Any, float] = field(default_factory=dict)

    def over(self, base: _Params) -> _Params:
        """`base` (a SamplingParams or a SpeedParams) with what the client set of its fields; the
        logit bias is left to the caller, which checks its token ids against the vocabulary."""
        given = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "logit_bias"}  # type: ignore[arg-type]
        theirs = {f.name for f in fields(base)}  # type: ignore[arg-type]
        return replace(base, **{k: v for k, v in given.items() if v is not None and k in theirs})  # type: ignore[type-var]


Effort = Literal["low", "medium", "high"]
EFFORTS: tuple[Effort, ...] = ("low", "medium", "high")


@dataclass(frozen=True)
class Reasoning:
    """Think or not, where the model's template has the switch, and how hard, where it takes an
    effort (gpt-oss's `reasoning_effort`). A request without one (None) leaves both to the
    template's defaults. Each protocol's edge maps its own field here: OpenAI's
    `reasoning_effort`, the Responses API's `reasoning.effort`, Anthropic's `thinking`, Ollama's
    `think`."""

    enabled: bool = True
    effort: Effort | None = None  # only when enabled; None: the template's default effort

    def __post_init__(self) -> None:
        if self.effort is not None and (self.effort not in EFFORTS or not self.enabled):
            raise ValueError(f"an effort is one of {', '.join(EFFORTS)}, and only when reasoning is on")

    @classmethod
    def of(cls, value: bool | str | None) -> Reasoning | None:
        """From a switch or an effort: None (unset), True / False (on / off), or an effort
        ("low" / "medium" / "high": on, that hard). Other texts are a ValueError."""
        if value is None or isinstance(value, bool):
            return None if value is None else cls(value)
        return cls(True, value)  # type: ignore[arg-type]


REASONING_OFF = Reasoning(False)
REASONING_ON = Reasoning(True)


# -- the request: the output's rules -----------------------------------------------------------

@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call, from the request through the families' codecs."""

    name: str
    description: str | None = None
    parameters: Any = None  # a JSON schema (dict or bool); None: any object
    strict: bool = False  # a keyword of `parameters` the grammar cannot enforce is a 400, not a header

    def openai(self) -> dict[str, Any]:
        """The tool as chat templates expect it ({"type": "function", "function": {…}})."""
        function = {k: v for k, v in (("name", self.name), ("description", self.description),
                                      ("parameters", self.parameters)) if v is not None}
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class OutputRules:
    """The request's wishes for the output, as the API parsed them."""

    tools: tuple[ToolSpec, ...] = ()
    tool_choice: str = "auto"  # auto | none | required | the name of one tool
    parallel_tool_calls: bool = True
    json_schema: dict[str, Any] | bool | None = None  # response_format json_schema
    json_object: bool = False  # response_format json_object
    strict: bool = False  # json_schema's strict: a keyword the grammar cannot enforce is a 400, not a header
    grammar: str | None = None  # raw GBNF (extension)

    @property
    def calls_tools(self) -> bool:
        return bool(self.tools) and self.tool_choice != "none"


# A request's LoRA choice: None (the model's defaults), a name (that adapter at scale 1, no other),
# or (name or id, scale) pairs (those adapters, no other); generation/adapters.py resolves it.
LoraChoice = str | tuple[tuple[str | int, float], ...] | None


# -- the request ------------------------------------------------------------------------------

@dataclass(frozen=True)
class GenerationRequest:
    """One generation: chat messages rendered with the model's template, or a raw prompt (no
    template; with `suffix`, fill-in-the-middle with `extra` files as context)."""

    messages: tuple[ChatMessage, ...] = ()
    model: str | None = None  # None or "": the default model
    prompt: str | None = None
    suffix: str | None = None
    extra: tuple[tuple[str, str], ...] = ()  # (filename, text)
    sampling: Sampling = field(default_factory=Sampling)
    output: OutputRules = OutputRules()
    reasoning: Reasoning | None = None  # think or not, and how hard, where the template has the switch; None: its default
    n: int = 1
    logprobs: int | None = None  # None: none; k: the chosen token's and the k most likely
    keep_alive: float | None = None  # seconds the model stays loaded after this request
    lora: LoraChoice = None  # LoRA adapters by name or id; None: the model's defaults
    # The prompt's end: continue the last message, the assistant's (True: no end of turn, no new turn),
    # or close it (False); None: continue it when the last message is the assistant's (a prefill).
    continue_final: bool | None = None
    generation_prompt: bool = True  # when not continuing: open the assistant's turn (the template's add_generation_prompt)
    template_kwargs: dict[str, Any] = field(default_factory=dict)  # more variables for the chat template
    documents: tuple[dict[str, str], ...] = ()  # for retrieval: to a template that takes them, else the system prompt
    cache_prompt: bool = True  # False: the prompt is neither read from a slot's cache nor left in it
    prompt_logprobs: int | None = None  # k: each prompt token's log-probability and the k most likely
    prediction: str | None = None  # the text the answer is expected to be (OpenAI's Predicted Outputs): drafts read it first
    cache_key: str | None = None  # the client's name for the conversation (OpenAI's prompt_cache_key): its slot
