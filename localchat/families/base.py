"""What a model family is: everything localchat knows about one prompt format and its models'
output: the template (when the GGUF has none), stop and control tokens, reasoning tags and the
switch that turns reasoning on or off, and the tool-call codec."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..neutral import Reasoning
from .codecs.base import Codec, ToolSpec
from .codecs.json_codecs import GENERIC
from .codecs.split import Splitter

Marker = str | tuple[str, ...]  # a text in the chat template; a tuple: all of them ("!text": not that text)
Messages = list[dict[str, Any]]


def _found(marker: Marker, template: str) -> bool:
    texts = (marker,) if isinstance(marker, str) else marker
    return all((t[1:] not in template) if t.startswith("!") else (t in template) for t in texts)


@dataclass(frozen=True)
class Family:
    name: str
    # Jinja chat template used when the GGUF carries none (same variables as HF templates:
    # messages, add_generation_prompt, bos_token, eos_token).
    template: str
    # Text that ends an assistant turn; generation stops on these tokens.
    stop_tokens: tuple[str, ...]
    # Every control token of the family's vocabulary (also what the test fixtures put in a tiny model).
    control_tokens: tuple[str, ...]
    # Texts that identify this family's chat template (any one of them).
    template_markers: tuple[Marker, ...]
    # GGUF `general.architecture` values that imply this family when nothing else tells.
    architectures: tuple[str, ...] = ()
    bos_token: str = ""
    eos_token: str = ""
    codec: Codec = GENERIC
    reasoning: tuple[str, str] | None = None  # (open, close) think tags, for families that think
    thinking_switch: str = "enable_thinking"  # the template variable that turns reasoning on or off
    effort_switch: str = ""  # or the one that sets its effort (harmony's reasoning_effort)
    history: Callable[[Messages], Messages] | None = None  # fixes a GGUF template needs in the history
    models: str = ""  # which models use it (for people)
    thinking_values: tuple[Any, Any] = (False, True)  # what the switch is set to for reasoning off, on

    def matches(self, template: str) -> bool:
        return any(_found(m, template) for m in self.template_markers)

    @property
    def vocabulary_markers(self) -> tuple[str, ...]:
        """A marker whose texts are all tokens of the family's vocabulary (for detection without a
        template); none when the vocabulary cannot tell this family from another."""
        for marker in self.template_markers:
            texts = [t for t in ((marker,) if isinstance(marker, str) else marker) if not t.startswith("!")]
            if all(t in self.control_tokens for t in texts):
                return tuple(texts)
        return ()

    @property
    def visible_tokens(self) -> tuple[str, ...]:
        """Control tokens that must show in the output text: the codec's and the think tags."""
        return tuple(dict.fromkeys((*self.codec.visible_tokens, *(self.reasoning or ()))))

    def template_vars(self, reasoning: Reasoning | None = None) -> dict[str, Any]:
        """Template variables for a request's reasoning: None leaves the template's defaults; else
        the switch turns it on or off, or, where the family takes an effort instead, its effort
        (on with none given: "medium"; off: "low", the least there is)."""
        if reasoning is None:
            return {}
        if self.effort_switch:
            return {self.effort_switch: reasoning.effort or ("medium" if reasoning.enabled else "low")}
        return {self.thinking_switch: self.thinking_values[reasoning.enabled]} if self.thinking_switch else {}

    def opens_reasoning(self, prompt: str) -> bool:
        """Whether the rendered prompt leaves the model inside a think block."""
        return bool(self.reasoning) and prompt.rstrip().endswith(self.reasoning[0])  # type: ignore[index]

    def splitter(self, tools: Sequence[ToolSpec] = (), thinking: bool = False, strict: bool = True,
                 calls: bool = True) -> Splitter:
        """What splits this family's output into reasoning, content and (with `calls`) tool calls."""
        return self.codec.splitter(self.reasoning, thinking, tools if calls else None, strict)
