"""The OpenAI request body, validated at the edge. Unknown fields are ignored."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..chat import ChatRequest, OutputRules, ToolSpec
from ..errors import InvalidRequest
from ..registry import parse_duration


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ContentPart(_Lenient):
    type: str
    text: str | None = None


class FunctionCall(_Lenient):
    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCall(_Lenient):
    id: str | None = None
    type: str = "function"
    function: FunctionCall


class Message(_Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class StreamOptions(_Lenient):
    include_usage: bool = False


class FunctionDef(_Lenient):
    name: str = Field(pattern=r"^[a-zA-Z0-9_.:-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(_Lenient):
    type: Literal["function"] = "function"
    function: FunctionDef


class NamedFunction(_Lenient):
    name: str


class NamedToolChoice(_Lenient):
    type: Literal["function"] = "function"
    function: NamedFunction


class JsonSchemaFormat(_Lenient):
    name: str = "response"
    schema_: dict[str, Any] | bool = Field(True, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Lenient):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class ChatCompletionRequest(_Lenient):
    model: str | None = None
    messages: list[Message] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: int | None = Field(None, ge=0)
    min_p: float | None = Field(None, ge=0, le=1)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    repeat_penalty: float | None = Field(None, gt=0, le=10)
    seed: int | None = None
    stop: str | list[str] | None = None
    logit_bias: dict[str, float] | None = None
    n: int = Field(1, ge=1, le=64)  # at most the model's `parallel` (checked once the model is known)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    keep_alive: float | str | None = None  # extension (Ollama's): how long the model stays loaded afterwards
    ignore_eos: bool = False  # extension (llama.cpp's): generate max_tokens even past end-of-turn
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    response_format: ResponseFormat | None = None
    grammar: str | None = None  # extension: raw GBNF

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, v: str | list[str] | None) -> str | list[str] | None:
        stops = [v] if isinstance(v, str) else v or []
        if len(stops) > 16:
            raise ValueError("at most 16 stop strings")
        if any(len(s) > 1000 for s in stops):
            raise ValueError("a stop string may be at most 1000 characters")
        return v

    @field_validator("keep_alive")
    @classmethod
    def _keep_alive(cls, v: float | str | None) -> float | None:
        return None if v is None else parse_duration(v)

    def to_chat(self) -> ChatRequest:
        if self.top_logprobs is not None and not self.logprobs:
            raise InvalidRequest("top_logprobs needs logprobs: true", param="top_logprobs")
        sampling: dict[str, Any] = {
            k: v for k, v in self.model_dump(include={
                "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
                "repeat_penalty", "seed"}).items() if v is not None
        }
        max_tokens = self.max_completion_tokens or self.max_tokens
        if max_tokens is not None:
            sampling["max_tokens"] = max_tokens
        if self.stop:
            sampling["stop"] = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        if self.ignore_eos:
            sampling["ignore_eos"] = True
        return ChatRequest(
            messages=[_flatten(i, m) for i, m in enumerate(self.messages)],
            model=self.model,
            sampling=sampling,
            logit_bias=self.logit_bias or {},
            output=self._output_rules(),
            n=self.n,
            logprobs=(self.top_logprobs or 0) if self.logprobs else None,
            keep_alive=self.keep_alive,  # type: ignore[arg-type]  # a duration in seconds after validation
        )

    def _output_rules(self) -> OutputRules:
        fmt = self.response_format
        if fmt is not None and fmt.type == "json_schema" and fmt.json_schema is None:
            raise InvalidRequest("response_format.json_schema is required when type is 'json_schema'",
                                 param="response_format.json_schema")
        choice = self.tool_choice
        return OutputRules(
            tools=tuple(ToolSpec(t.function.name, t.function.description, t.function.parameters)
                        for t in self.tools or []),
            tool_choice=choice.function.name if isinstance(choice, NamedToolChoice) else choice or "auto",
            parallel_tool_calls=self.parallel_tool_calls,
            json_schema=fmt.json_schema.schema_ if fmt and fmt.type == "json_schema" and fmt.json_schema else None,
            json_object=bool(fmt and fmt.type == "json_object"),
            grammar=self.grammar,
        )


def _flatten(i: int, m: Message) -> dict[str, Any]:
    """One message as a template expects it: string content, `developer` as `system`,
    tool-call arguments as objects."""
    if isinstance(m.content, list):
        parts = []
        for part in m.content:
            if part.type != "text" or part.text is None:
                raise InvalidRequest(f"messages[{i}].content: part type {part.type!r} is not supported; "
                                     "this server takes text parts only", param=f"messages.{i}.content")
            parts.append(part.text)
        content = "\n".join(parts)
    else:
        content = m.content
    if content is None and not (m.role == "assistant" and m.tool_calls):
        raise InvalidRequest(f"messages[{i}].content is required for a {m.role} message",
                             param=f"messages.{i}.content")
    out: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role, "content": content or ""}
    if m.name:
        out["name"] = m.name
    if m.tool_call_id:
        out["tool_call_id"] = m.tool_call_id
    if m.reasoning_content:
        out["reasoning_content"] = m.reasoning_content
    if m.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": c.type, "function": {"name": c.function.name, "arguments": _arguments(c.function.arguments)}}
            for c in m.tool_calls
        ]
    return out


def _arguments(arguments: str | dict[str, Any]) -> Any:
    if isinstance(arguments, dict):
        return arguments
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments
