"""The OpenAI chat completions request, validated at the edge (unknown fields are ignored), and
its translation into the neutral generation request."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from ...errors import InvalidRequest
from ...generation import (Audio, GenerationRequest, Message as Said, OutputRules, Part, Text, ToolCall as Called,
                           ToolSpec)
from ...generation.media import b64
from ...grammars.metaschema import schema_problem
from ...models import Settings, sampling_model
from ..body import KeepAlive
from ..common import Lenient as _Lenient, data_image, sampling
from ..llamacpp.lora import LoraField, lora_choice

_DEFAULT_LIMITS = Settings()


def _limits(info: ValidationInfo) -> Settings:
    """The server's limits, passed as validation context: `model_validate(body, context={"limits": settings})`."""
    context = info.context or {}
    return context.get("limits") or _DEFAULT_LIMITS


def _checked_schema(schema: Any, info: ValidationInfo) -> Any:
    problem = schema_problem(schema, _limits(info).max_schema_depth)
    if problem:
        raise ValueError(problem)
    return schema


class ImageUrl(_Lenient):
    url: str
    detail: str | None = None  # accepted, not used: the projector decides the resolution


class InputAudio(_Lenient):
    data: str  # base64
    format: str


class ContentPart(_Lenient):
    type: str
    text: str | None = None
    image_url: ImageUrl | str | None = None  # a data: URI (some clients send the bare string)
    input_audio: InputAudio | None = None


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
    strict: bool | None = None  # true: a keyword the grammar cannot enforce is a 400

    @field_validator("parameters")
    @classmethod
    def _parameters(cls, v: dict[str, Any] | None, info: ValidationInfo) -> dict[str, Any] | None:
        return None if v is None else _checked_schema(v, info)


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

    @field_validator("schema_")
    @classmethod
    def _schema(cls, v: dict[str, Any] | bool, info: ValidationInfo) -> dict[str, Any] | bool:
        return _checked_schema(v, info)


class ResponseFormat(_Lenient):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


SamplingFields = sampling_model("SamplingFields", optional=True, base=_Lenient)


class ChatCompletionRequest(SamplingFields):  # type: ignore[misc, valid-type]
    model: str | None = None
    messages: list[Message] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    logit_bias: dict[str, float] | None = None
    n: int = Field(1, ge=1, le=64)  # at most the model's `parallel` (checked once the model is known)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    keep_alive: KeepAlive = None  # extension (Ollama's): how long the model stays loaded afterwards
    ignore_eos: bool = False  # extension (llama.cpp's): generate max_tokens even past end-of-turn
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    response_format: ResponseFormat | None = None
    grammar: str | None = None  # extension: raw GBNF
    reasoning_effort: str | None = None  # "none" / "minimal": no thinking, where the template has the switch
    lora: LoraField = None  # extension (llama-server's, oxillama's): LoRA adapters for this request

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, v: str | list[str] | None, info: ValidationInfo) -> str | list[str] | None:
        most, longest = _limits(info).max_stop_strings, _limits(info).max_stop_chars
        stops = [v] if isinstance(v, str) else v or []
        if len(stops) > most:
            raise ValueError(f"at most {most} stop strings (max_stop_strings)")
        if any(len(s) > longest for s in stops):
            raise ValueError(f"a stop string may be at most {longest} characters (max_stop_chars)")
        return v

    @field_validator("max_tokens", "max_completion_tokens")
    @classmethod
    def _max_tokens(cls, v: int | None, info: ValidationInfo) -> int | None:
        cap = _limits(info).max_tokens_cap
        if v is not None and v > cap:
            raise ValueError(f"at most {cap} tokens per choice on this server (max_tokens_cap)")
        return v

    @field_validator("tools", mode="before")
    @classmethod
    def _tools_size(cls, v: Any, info: ValidationInfo) -> Any:
        """Count and size first, before any schema is parsed or checked."""
        if not isinstance(v, list):
            return v  # the type check reports it
        most, budget = _limits(info).max_tools, _limits(info).max_tool_schema_bytes
        if len(v) > most:
            raise ValueError(f"{len(v)} tools; at most {most} per request (max_tools)")
        size = 0
        for tool in v:
            function = tool.get("function") if isinstance(tool, dict) else None
            parameters = function.get("parameters") if isinstance(function, dict) else None
            try:
                size += len(json.dumps(parameters, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass"))
            except (RecursionError, ValueError):
                continue  # too deep to measure: its own check names it
            if size > budget:
                raise ValueError(f"the tools' parameters schemas are more than {budget} bytes of JSON together "
                                 "(max_tool_schema_bytes)")
        return v

    @field_validator("grammar")
    @classmethod
    def _grammar_size(cls, v: str | None, info: ValidationInfo) -> str | None:
        most = _limits(info).max_grammar_bytes
        if v is not None and len(v.encode("utf-8", "surrogatepass")) > most:
            raise ValueError(f"the grammar is more than {most} bytes (max_grammar_bytes)")
        return v

    @field_validator("logit_bias")
    @classmethod
    def _bias_values(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        for key, value in (v or {}).items():
            if not -100 <= value <= 100:  # NaN fails too
                raise ValueError(f"the bias {value} for token {key!r} is outside -100..100")
        return v

    def to_request(self, limits: Settings | None = None) -> GenerationRequest:
        """The neutral request. Without max_tokens a choice gets the model's default
        (models.toml) if it has one, else it runs until the model ends its turn, never past the
        server's cap or the context (generation applies both)."""
        limits = limits or _DEFAULT_LIMITS
        if self.top_logprobs is not None and not self.logprobs:
            raise InvalidRequest("top_logprobs needs logprobs: true", param="top_logprobs")
        knobs = self.model_dump()
        knobs["max_tokens"] = self.max_completion_tokens or self.max_tokens  # type: ignore[attr-defined]
        effort = self.reasoning_effort
        return GenerationRequest(
            messages=tuple(_said(i, m) for i, m in enumerate(self.messages)),
            model=self.model,
            sampling=sampling(knobs, stop=self.stop, logit_bias=self.logit_bias, ignore_eos=self.ignore_eos),
            output=self._output_rules(limits),
            reasoning=None if effort is None else effort not in ("none", "minimal"),
            n=self.n,
            logprobs=(self.top_logprobs or 0) if self.logprobs else None,
            keep_alive=self.keep_alive,  # type: ignore[arg-type]  # a duration in seconds after validation
            lora=lora_choice(self.lora),
        )

    def _output_rules(self, limits: Settings) -> OutputRules:
        fmt = self.response_format
        if fmt is not None and fmt.type == "json_schema" and fmt.json_schema is None:
            raise InvalidRequest("response_format.json_schema is required when type is 'json_schema'",
                                 param="response_format.json_schema")
        choice = self.tool_choice
        return OutputRules(
            tools=tuple(ToolSpec(t.function.name, t.function.description, t.function.parameters, bool(t.function.strict))
                        for t in self.tools or []),
            tool_choice=choice.function.name if isinstance(choice, NamedToolChoice) else choice or "auto",
            parallel_tool_calls=self.parallel_tool_calls,
            json_schema=fmt.json_schema.schema_ if fmt and fmt.type == "json_schema" and fmt.json_schema else None,
            json_object=bool(fmt and fmt.type == "json_object"),
            strict=bool(fmt and fmt.type == "json_schema" and fmt.json_schema and fmt.json_schema.strict),
            grammar=self.grammar,
            max_grammar_bytes=limits.max_grammar_bytes,
        )


def _said(i: int, m: Message) -> Said:
    """One message, neutral: `developer` is `system`, text, image and audio parts, tool calls'
    arguments as objects."""
    where = f"messages.{i}.content"
    parts: list[Part] = []
    if isinstance(m.content, list):
        for j, part in enumerate(m.content):
            if part.type == "text" and part.text is not None:
                parts.append(Text(part.text))
            elif part.type == "image_url" and part.image_url is not None:
                url = part.image_url if isinstance(part.image_url, str) else part.image_url.url
                parts.append(data_image(url, f"{where}.{j}", f"{where}.{j}.image_url.url"))
            elif part.type == "input_audio" and part.input_audio is not None:
                data = b64(part.input_audio.data, f"{where}.{j}.input_audio.data")
                parts.append(Audio(data, part.input_audio.format, f"{where}.{j}"))
            else:
                raise InvalidRequest(f"{where}.{j}: part type {part.type!r} is not supported here; send text, "
                                     "image_url and input_audio parts", param=f"{where}.{j}")
    elif m.content is not None:
        parts.append(Text(m.content))
    if m.content is None and not (m.role == "assistant" and m.tool_calls):
        raise InvalidRequest(f"{where} is required for a {m.role} message", param=where)
    calls = tuple(Called(c.function.name, call_arguments(c.function.arguments), c.id) for c in m.tool_calls or [])
    return Said("system" if m.role == "developer" else m.role, tuple(parts), calls, m.tool_call_id, m.name,
                m.reasoning_content)


def call_arguments(arguments: str | dict[str, Any]) -> Any:
    """A tool call's arguments as the JSON value they encode (a string that is not JSON stays)."""
    if isinstance(arguments, dict):
        return arguments
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments
