"""Ollama's `POST /api/chat` and `POST /api/generate`: the request parsed and turned into one
neutral GenerationRequest; the answer framed by stream.py."""

from __future__ import annotations

import asyncio

import time
from typing import Any, Literal, Protocol

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...generation import KNOBS
from ...errors import InvalidRequest, ModelNotFound
from ...generation import Chat, ChatMessage, GenerationRequest, OutputRules, Part, PastCall, Reasoning, TextPart, ToolSpec, Turn
from ...neutral import EFFORTS
from ...models import ModelSpec
from ..body import KeepAlive, parse, read_json
from ..common import Lenient as _Lenient, base64_image, respond, sampling
from ..fields import call_arguments
from ..sse import loosened_headers
from .stream import Answer, Clock, LineShape, collect, stream


class Names(Protocol):
    """What resolves a model's name: the service's `chat.models` (or a Registry)."""

    def resolve(self, name: str | None) -> ModelSpec: ...


def model_name(names: Names, name: str) -> str | None:
    """What to resolve: Ollama clients may add `:latest` to a name that has no tag."""
    if not name:
        return None
    bare = name.removesuffix(":latest")
    try:
        names.resolve(bare)
        return bare
    except ModelNotFound:
        return name


class Named(_Lenient):
    """A body that names a model (`/api/show`, `/api/pull`, `/api/delete`): `model`, or the older
    clients' `name`."""

    model: str = ""
    name: str = ""

    @property
    def named(self) -> str:
        return self.model or self.name


class Options(_Lenient):
    """Ollama's `options`; load-time ones (num_ctx, num_gpu, num_thread…) are ignored: the
    model's settings are in models.toml."""

    temperature: float | None = Field(None, **KNOBS["temperature"])
    top_k: int | None = Field(None, **KNOBS["top_k"])
    top_p: float | None = Field(None, **KNOBS["top_p"])
    min_p: float | None = Field(None, **KNOBS["min_p"])
    repeat_penalty: float | None = Field(None, **KNOBS["repeat_penalty"])
    presence_penalty: float | None = Field(None, **KNOBS["presence_penalty"])
    frequency_penalty: float | None = Field(None, **KNOBS["frequency_penalty"])
    repeat_last_n: int | None = Field(None, **KNOBS["penalty_last_n"])
    repetition_stop: int | None = Field(None, **KNOBS["repetition_stop"])  # localchat's: 0 lets a loop run on
    seed: int | None = None  # negative: a random seed
    num_predict: int | None = None  # -1, -2 (and 0): no limit of the request's own
    stop: str | list[str] | None = None

    def sampling(self) -> Any:
        knobs = {**self.model_dump(), "penalty_last_n": self.repeat_last_n,
                 "seed": self.seed if self.seed is not None and self.seed >= 0 else None,
                 "max_tokens": self.num_predict if self.num_predict is not None and self.num_predict > 0 else None}
        return sampling(knobs, stop=self.stop)


class CallFunction(_Lenient):
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)


class Call(_Lenient):
    id: str | None = None
    function: CallFunction


class Message(_Lenient):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    thinking: str | None = None
    images: list[Any] | None = None
    tool_calls: list[Call] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None


class Function(_Lenient):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(_Lenient):
    type: Literal["function"] = "function"
    function: Function


class _Generation(_Lenient):
    model: str = ""
    format: Literal["", "json"] | dict[str, Any] | None = None
    options: Options | None = None
    stream: bool = True
    keep_alive: KeepAlive = None
    think: bool | str | None = None  # "high" / "medium" / "low": thinking on

    def common(self, names: Names, tools: list[Tool] | None = None) -> dict[str, Any]:
        fmt = self.format
        rules = OutputRules(tools=tuple(ToolSpec(t.function.name, t.function.description, t.function.parameters)
                                        for t in tools or []),
                            json_schema=fmt if isinstance(fmt, dict) else None, json_object=fmt == "json")
        return {"model": model_name(names, self.model), "sampling": (self.options or Options()).sampling(),
                "output": rules, "keep_alive": self.keep_alive, "reasoning": self.reasoning}

    @property
    def thinks(self) -> bool | None:
        return self.think if self.think is None or isinstance(self.think, bool) else True

    @property
    def reasoning(self) -> Reasoning | None:
        """`think`: true / false, or an effort ("low" / "medium" / "high": on, that hard; another
        text: on)."""
        if isinstance(self.think, str):
            return Reasoning(True, self.think if self.think in EFFORTS else None)  # type: ignore[arg-type]
        return None if self.think is None else Reasoning(self.think)


class ChatBody(_Generation):
    messages: list[Message] = []
    tools: list[Tool] | None = None


class GenerateBody(_Generation):
    prompt: str = ""
    suffix: str | None = None  # fill in the middle between prompt and suffix
    system: str | None = None
    template: str | None = None  # ignored: the model's own template is used
    raw: bool = False
    images: list[Any] | None = None
    context: list[int] | None = None  # ignored: send the conversation as messages to /api/chat


def chat_request(body: ChatBody, names: Names) -> GenerationRequest:
    return GenerationRequest(messages=_messages(body.messages), **body.common(names, body.tools))


def generate_request(body: GenerateBody, names: Names) -> GenerationRequest:
    common = body.common(names)
    images = tuple(_images(body.images, "images"))
    if body.suffix:
        return GenerationRequest(prompt=body.prompt, suffix=body.suffix, **common)
    if body.raw:
        return GenerationRequest(prompt=body.prompt, **common)
    system = (ChatMessage.of("system", body.system),) if body.system else ()
    return GenerationRequest(messages=(*system, ChatMessage("user", (TextPart(body.prompt), *images))), **common)


def _images(images: list[Any] | None, where: str) -> list[Part]:
    """Ollama's images: base64 strings."""
    for k, image in enumerate(images or []):
        if not isinstance(image, str):
            raise InvalidRequest(f"{where}.{k}: an image is a base64 string", param=f"{where}.{k}")
    return [base64_image(image, None, f"{where}.{k}") for k, image in enumerate(images or [])]


def _messages(messages: list[Message]) -> tuple[ChatMessage, ...]:
    """Neutral messages. Ollama's calls have no ids and its tool results name the tool: each
    result answers the first unanswered call of that name from the assistant before it."""
    out: list[ChatMessage] = []
    unanswered: list[tuple[str, str]] = []  # (id, name)
    for i, m in enumerate(messages):
        parts = (TextPart(m.content or ""), *_images(m.images, f"messages.{i}.images"))
        if m.role == "assistant" and m.tool_calls:
            calls = tuple(PastCall(c.function.name, call_arguments(c.function.arguments), c.id or f"call_{i}_{j}")
                          for j, c in enumerate(m.tool_calls))
            unanswered = [(c.id or "", c.name) for c in calls]
            out.append(ChatMessage("assistant", parts, calls, reasoning=m.thinking or None))
        elif m.role == "tool":
            match = next((c for c in unanswered
                          if m.tool_call_id in (None, c[0]) and m.tool_name in (None, c[1])), None)
            if match:
                unanswered.remove(match)
            call_id, name = match or (m.tool_call_id or f"call_{i}", m.tool_name or "")
            out.append(ChatMessage("tool", parts, tool_call_id=call_id, name=name))
        else:
            out.append(ChatMessage(m.role, parts, reasoning=m.thinking if m.role == "assistant" else None))
    return tuple(out)


async def _answer(request: Request, turn: Turn, shape: LineShape, body: _Generation, clock: Clock) -> Response:
    clock.ready = time.perf_counter()  # the model is loaded and the prompt prepared
    answer = Answer(body.thinks)
    return await respond(request, body.stream, lambda: stream(turn, shape, answer, clock),
                         lambda: collect(turn, shape, answer, clock), turn.close, lambda: loosened_headers(turn),
                         keepalive=None, media_type="application/x-ndjson")


async def _load(chat: Chat, body: _Generation, shape: LineShape) -> Response:
    """An empty request loads the model (keep_alive 0: unloads it), as Ollama's clients expect."""
    name = await chat.models.load(model_name(chat.models, body.model), body.keep_alive)
    shape.model = body.model or name
    done = "unload" if body.keep_alive == 0 else "load"
    return JSONResponse(shape.line({}, {"done": True, "done_reason": done}))


async def chat_route(chat: Chat, request: Request) -> Response:
    clock = Clock()
    body = await asyncio.to_thread(parse, ChatBody, await read_json(request, chat.settings.max_body_bytes))
    if not body.messages:
        return await _load(chat, body, LineShape(True, body.model))
    turn = await chat.start(await asyncio.to_thread(chat_request, body, chat.models))  # (images decoded: off the loop)
    return await _answer(request, turn, LineShape(True, body.model or turn.model), body, clock)


async def generate_route(chat: Chat, request: Request) -> Response:
    clock = Clock()
    body = await asyncio.to_thread(parse, GenerateBody, await read_json(request, chat.settings.max_body_bytes))
    if not body.prompt and not body.suffix:
        return await _load(chat, body, LineShape(False, body.model))
    turn = await chat.start(await asyncio.to_thread(generate_request, body, chat.models))
    return await _answer(request, turn, LineShape(False, body.model or turn.model), body, clock)
