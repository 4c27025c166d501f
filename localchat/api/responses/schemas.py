"""The Responses request, validated at the edge (unknown fields are ignored): input items, tools
(function and namespace tools; hosted ones are kept to be reported), `text.format`, reasoning.
request.py turns it into the neutral generation request; stream.py echoes it in the response."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ..body import KeepAlive
from ..common import Lenient as _Lenient
from ..fields import SamplingFields


class Part(_Lenient):
    type: str
    text: str | None = None
    image_url: str | None = None  # an input_image's (a data: URI)


class InputItem(_Lenient):
    type: str = "message"
    role: Literal["user", "system", "developer", "assistant"] | None = None
    content: str | list[Part] | None = None
    call_id: str | None = None
    name: str | None = None
    namespace: str | None = None  # a call of a function tool inside a namespace tool
    arguments: str | None = None
    output: str | list[Part] | None = None


class Tool(_Lenient):
    type: str
    name: str | None = Field(None, pattern=r"^[a-zA-Z0-9_.:-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    tools: list[Tool] | None = None  # a namespace's function tools


class NamedChoice(_Lenient):
    type: str
    name: str | None = None


class TextFormat(_Lenient):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | bool | None = Field(None, alias="schema")
    strict: bool | None = None


class TextConfig(_Lenient):
    format: TextFormat | None = None


class Reasoning(_Lenient):
    effort: str | None = None
    summary: str | None = None


class ResponsesRequest(SamplingFields):  # type: ignore[misc, valid-type]
    model: str | None = None
    input: str | list[InputItem] | None = None
    instructions: str | None = None
    tools: list[Tool] = []
    tool_choice: Literal["auto", "none", "required"] | NamedChoice = "auto"
    parallel_tool_calls: bool = True
    text: TextConfig | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    reasoning: Reasoning | None = None
    store: bool = True
    previous_response_id: str | None = None
    metadata: dict[str, Any] | None = None
    stream: bool = False
    logit_bias: dict[str, float] | None = None  # extension, as in chat completions
    keep_alive: KeepAlive = None  # extension (Ollama's)
    prompt_cache_key: str | None = Field(None, max_length=1024)  # the conversation's slot (Codex sends its session's id)

    def items(self) -> list[InputItem]:
        return [InputItem(role="user", content=self.input)] if isinstance(self.input, str) else list(self.input or [])
