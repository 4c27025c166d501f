"""The OpenAI chat completions request, validated at the edge (unknown fields are ignored), and
its translation into the neutral generation request. `read_chat_request` reads and parses one
(`/v1/chat/completions`, llama.cpp's `/apply-template`)."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from pydantic import Field
from starlette.requests import Request

from ...errors import InvalidRequest
from ...generation import GenerationRequest, OutputRules, Reasoning, ToolSpec
from ...models import Settings
from ..body import KeepAlive, parse, read_json
from ..common import Lenient as _Lenient, openai_reasoning, sampling
from ..fields import LoraField, SamplingFields, lora_choice
from .messages import Message, said

__all__ = ["ChatCompletionRequest", "SchemaSource", "StreamOptions", "read_chat_request"]

SchemaSource = tuple[dict[str, Any] | bool | None, str | None]  # the answer's JSON schema, the field it came in


class StreamOptions(_Lenient):
    include_usage: bool = False


class FunctionDef(_Lenient):
    name: str = Field(pattern=r"^[a-zA-Z0-9_.:-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None  # true: a keyword the grammar cannot enforce is a 400


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
    schema_: dict[str, Any] | bool | None = Field(None, alias="schema")  # llama.cpp's: json_object with a schema


class PredictionPart(_Lenient):
    type: Literal["text"]
    text: str


class Prediction(_Lenient):
    """OpenAI's Predicted Outputs: the text the answer is expected to be (a file being edited), as a
    string or text parts; drafts read it first (engine/drafting/drafts.py). The answer is the same with or
    without it."""
    type: Literal["content"]
    content: str | list[PredictionPart]

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class ChatCompletionRequest(SamplingFields):  # type: ignore[misc, valid-type]
    model: str | None = None
    messages: list[Message] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    logit_bias: dict[str, float] | None = None
    n: int = Field(1, ge=1, le=64)  # at most the model's `parallel` (generation/limits.py, once the model is known)
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
    # extensions (vLLM's): the prompt's end, the template's variables, documents, echo, logprobs' tokens
    continue_final_message: bool | None = None
    add_generation_prompt: bool | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    documents: list[dict[str, str]] | None = None
    echo: bool = False
    return_tokens_as_token_ids: bool = False
    json_schema: dict[str, Any] | bool | None = None  # extension (llama.cpp's): the answer is JSON for this schema
    cache_prompt: bool = True  # extension (llama.cpp's): false: the slot's prompt cache is neither read nor kept
    prompt_logprobs: int | None = Field(None, ge=0, le=20)  # extension (vLLM's): the prompt tokens' log-probabilities
    prediction: Prediction | None = None
    prompt_cache_key: str | None = Field(None, max_length=1024)  # the conversation's slot (see docs/api.md)

    def to_request(self, schema: SchemaSource | None = None) -> GenerationRequest:
        """The neutral request. Without max_tokens a choice gets the model's default
        (models.toml) if it has one, else it runs until the model ends its turn, never past the
        server's cap or the context (generation applies both, and every other limit). `schema`:
        what schema_source() found, when the caller has asked it already."""
        if self.top_logprobs is not None and not self.logprobs:
            raise InvalidRequest("top_logprobs needs logprobs: true", param="top_logprobs")
        if self.prompt_logprobs is not None and self.stream:
            raise InvalidRequest("prompt_logprobs: not available when streaming (as in vLLM)", param="prompt_logprobs")
        if self.prediction is not None and self.n > 1:
            raise InvalidRequest("prediction: not available with n greater than 1 (as in OpenAI's API)", param="n")
        knobs = self.model_dump()
        knobs["max_tokens"] = self.max_completion_tokens or self.max_tokens  # type: ignore[attr-defined]
        kwargs = dict(self.chat_template_kwargs or {})
        return GenerationRequest(
            messages=tuple(said(i, m) for i, m in enumerate(self.messages)),
            model=self.model,
            sampling=sampling(knobs, stop=self.stop, logit_bias=self.logit_bias, ignore_eos=self.ignore_eos),
            output=self._output_rules(schema or self.schema_source()),
            reasoning=self._reasoning(kwargs.pop("enable_thinking", None)),
            n=self.n,
            logprobs=(self.top_logprobs or 0) if self.logprobs else None,
            keep_alive=self.keep_alive,  # type: ignore[arg-type]  # a duration in seconds after validation
            lora=lora_choice(self.lora),
            continue_final=self._continue_final(),
            generation_prompt=self.add_generation_prompt is not False,
            template_kwargs=kwargs,
            documents=tuple(self.documents or ()),
            cache_prompt=self.cache_prompt,
            prompt_logprobs=self.prompt_logprobs,
            prediction=self.prediction.text() if self.prediction is not None else None,
            cache_key=self.prompt_cache_key,
        )

    def _continue_final(self) -> bool | None:
        """vLLM's two fields, as vLLM reads them; neither sent: a trailing assistant message is
        continued (a prefill, as llama-server and Anthropic's API do it)."""
        if self.continue_final_message and self.add_generation_prompt:
            raise InvalidRequest("continue_final_message: it and add_generation_prompt cannot both be true: the first "
                                 "continues the last (assistant) message, the second opens a new assistant turn",
                                 param="continue_final_message")
        if self.continue_final_message is None and self.add_generation_prompt is None:
            return None
        return bool(self.continue_final_message)

    def _reasoning(self, enable_thinking: Any) -> Reasoning | None:
        """The reasoning switch: `chat_template_kwargs.enable_thinking` (Qwen 3's), or
        `reasoning_effort` ("none" and "minimal": off; "low" / "medium" / "high": on, that
        hard, where the template takes an effort); both must agree."""
        effort = openai_reasoning(self.reasoning_effort)
        if enable_thinking is None:
            return effort
        if not isinstance(enable_thinking, bool):
            raise InvalidRequest("chat_template_kwargs.enable_thinking: must be true or false",
                                 param="chat_template_kwargs.enable_thinking")
        if effort is not None and effort.enabled != enable_thinking:
            raise InvalidRequest(f"chat_template_kwargs.enable_thinking: it is {str(enable_thinking).lower()} but "
                                 f"reasoning_effort is {self.reasoning_effort!r}; send one of them",
                                 param="chat_template_kwargs.enable_thinking")
        return effort or Reasoning(enable_thinking)

    def _output_rules(self, source: SchemaSource) -> OutputRules:
        fmt = self.response_format
        if fmt is not None and fmt.type == "json_schema" and fmt.json_schema is None:
            raise InvalidRequest("response_format.json_schema is required when type is 'json_schema'",
                                 param="response_format.json_schema")
        choice, (schema, _) = self.tool_choice, source
        return OutputRules(
            tools=tuple(ToolSpec(t.function.name, t.function.description, t.function.parameters, bool(t.function.strict))
                        for t in self.tools or []),
            tool_choice=choice.function.name if isinstance(choice, NamedToolChoice) else choice or "auto",
            parallel_tool_calls=self.parallel_tool_calls,
            json_schema=schema,
            json_object=bool(fmt and fmt.type == "json_object") and schema is None,
            strict=bool(fmt and fmt.type == "json_schema" and fmt.json_schema and fmt.json_schema.strict),
            grammar=self.grammar,
        )

    def schema_source(self) -> SchemaSource:
        """The answer's JSON schema and the field it came from: `response_format.json_schema.schema`,
        llama.cpp's `response_format.schema` (type json_object) or its top-level `json_schema`
        (which may repeat the response format's schema, not contradict it)."""
        fmt, top = self.response_format, self.json_schema
        found: SchemaSource = (None, None)
        if fmt is not None and fmt.type == "json_schema" and fmt.json_schema is not None:
            found = (fmt.json_schema.schema_, "response_format.json_schema.schema")
        elif fmt is not None and fmt.type == "json_object" and fmt.schema_ is not None:
            found = (fmt.schema_, "response_format.schema")
        if top is None:
            return found
        if found[0] is not None and found[0] != top:
            raise InvalidRequest(f"json_schema: it and {found[1]} are two different schemas; send one",
                                 param="json_schema")
        return top, found[1] or "json_schema"  # (with a grammar too: refused with the rules, constraints.check)


async def read_chat_request(request: Request, limits: Settings) -> ChatCompletionRequest:
    """The body, read within the server's limit and parsed off the event loop (a long
    conversation takes a while to parse)."""
    body = await read_json(request, limits.max_body_bytes)
    return await asyncio.to_thread(lambda: parse(ChatCompletionRequest, body))
