"""OpenAI's Responses API, `POST /v1/responses`: input items (messages, function calls and
their outputs) become chat messages, `tools` / `tool_choice` / `text.format` the output rules,
and the generation's events become output items (stream.py). The request's models: schemas.py.

Stored responses (`store`, on by default) are kept in memory, the last STORED of them, so that
`previous_response_id` continues a conversation and `GET /v1/responses/{id}` finds one; a
restart forgets them. Clients that send the whole input each turn (the Codex CLI sends
`store: false`) need none of it.

Tools: a `namespace` tool's function tools become ordinary tools named `NAMESPACE.NAME` for the
model; their calls come back as `function_call` items with `name` and `namespace` apart, as
the Codex CLI expects them. Hosted tools (web_search, file_search, code_interpreter, …) are
dropped and reported (hosted.py)."""

from __future__ import annotations

import asyncio

import json
from collections import OrderedDict
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...errors import InvalidRequest, LocalchatError
from ...generation import Chat, ChatMessage, GenerationRequest, Image, OutputRules, PastCall, TextPart, ToolSpec
from ...models import Settings
from .. import hosted
from ..body import parse, read_json
from ..common import openai_reasoning, respond, sampling, url_image
from ..sse import loosened_headers
from .schemas import InputItem, NamedChoice, Part, ResponsesRequest, Tool
from .stream import Numbered, Output, Shell, collect, stream

STORED = 100  # responses kept for previous_response_id


class ResponseNotFound(LocalchatError):
    status = 404
    type = "invalid_request_error"


class Store(OrderedDict[str, tuple[dict[str, Any], list[InputItem]]]):
    """The last `size` stored responses, by id: each one's body and its conversation as input
    items (what came before it, its input, its output; instructions are not carried over)."""

    def __init__(self, size: int = STORED) -> None:
        super().__init__()
        self.size = size

    def put(self, response: dict[str, Any], items: list[InputItem]) -> None:
        self[response["id"]] = (response, items)
        while len(self) > self.size:
            self.popitem(last=False)

    def history(self, response_id: str) -> list[InputItem]:
        if response_id not in self:
            raise InvalidRequest(f"previous_response_id: no stored response {response_id!r}. This server keeps the "
                                 f"last {self.size} responses sent with store: true, in memory; send the whole "
                                 "conversation in `input` instead", param="previous_response_id")
        return self[response_id][1]


def routes(chat: Chat) -> list[Route]:
    store = Store()

    async def create(request: Request) -> Response:
        settings = chat.settings
        req = await asyncio.to_thread(parse, ResponsesRequest, await read_json(request, settings.max_body_bytes))
        history = store.history(req.previous_response_id) if req.previous_response_id else []
        dropped: list[str] = []
        turn = await chat.start(await asyncio.to_thread(to_request, req, history, settings, dropped))  # (off the loop)
        shell = Shell(req, turn.model)

        def keep(response: dict[str, Any], out: Output) -> None:
            if req.store:
                store.put(response, history + req.items() + _kept(out.items))

        events = Numbered(shell)
        return await respond(request, req.stream, lambda: stream(turn, events, keep), lambda: collect(turn, shell, keep),
                             turn.close, lambda: {**hosted.headers(dropped), **loosened_headers(turn)},
                             keepalive=events.keepalive)

    async def retrieve(request: Request) -> Response:
        entry = store.get(request.path_params["response_id"])
        if entry is None:
            raise ResponseNotFound(f"no stored response {request.path_params['response_id']!r} (this server keeps "
                                   f"the last {store.size}, in memory)", param="response_id")
        return JSONResponse(entry[0])

    return [Route("/v1/responses", create, methods=["POST"]), Route("/responses", create, methods=["POST"]),
            Route("/v1/responses/{response_id}", retrieve, methods=["GET"]),
            Route("/responses/{response_id}", retrieve, methods=["GET"])]


# -- request → generation --------------------------------------------------------------------

def to_request(req: ResponsesRequest, history: list[InputItem], settings: Settings,
               dropped: list[str] | None = None) -> GenerationRequest:
    calls: dict[str, str] = {}  # call_id → function name, for the outputs that answer them
    messages = _messages(history, calls, "input") + _messages(req.items(), calls, "input")
    if not messages:
        raise InvalidRequest("input: say something: a string or a list of input items", param="input")
    if req.instructions:
        messages.insert(0, ChatMessage.of("system", req.instructions))
    knobs = {**req.model_dump(), "max_tokens": req.max_output_tokens}
    return GenerationRequest(messages=_one_system(messages), model=req.model or None,
                             sampling=sampling(knobs, logit_bias=req.logit_bias),
                             output=_rules(req, settings, [] if dropped is None else dropped),
                             reasoning=openai_reasoning(req.reasoning.effort if req.reasoning else None),
                             keep_alive=req.keep_alive, cache_key=req.prompt_cache_key)


def _messages(items: list[InputItem], calls: dict[str, str], where: str) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    for i, item in enumerate(items):
        if item.type == "message":
            if item.role is None or item.content is None:
                missing = "role" if item.role is None else "content"
                raise InvalidRequest(f"{where}.{i}.{missing} is required for a message", param=f"{where}.{i}.{missing}")
            out.append(ChatMessage("system" if item.role == "developer" else item.role,
                            _parts(item.content, f"{where}.{i}.content")))
        elif item.type == "function_call":
            call = _call(i, item)
            calls[call.id or ""] = call.name
            if not out or out[-1].role != "assistant":
                out.append(ChatMessage("assistant", (TextPart(""),)))
            out[-1] = replace(out[-1], tool_calls=(*out[-1].tool_calls, call))
        elif item.type == "function_call_output":
            if item.call_id not in calls:
                raise InvalidRequest(f"{where}.{i}.call_id: no function_call with call_id {item.call_id!r} comes "
                                     "before this output", param=f"{where}.{i}.call_id")
            text = "".join(p.text for p in _parts(item.output or "", f"{where}.{i}.output") if isinstance(p, TextPart))
            out.append(ChatMessage.of("tool", text, tool_call_id=item.call_id, name=calls[item.call_id]))
        elif item.type != "reasoning":  # a reasoning item from an earlier turn: the prompt leaves it out
            raise InvalidRequest(f"{where}.{i}.type: {item.type!r} items are not supported; this server reads "
                                 "message, function_call, function_call_output and reasoning items",
                                 param=f"{where}.{i}.type")
    return out


def _call(i: int, item: InputItem) -> PastCall:
    for field in ("call_id", "name", "arguments"):
        if getattr(item, field) is None:
            raise InvalidRequest(f"input.{i}.{field} is required for a function_call", param=f"input.{i}.{field}")
    try:
        arguments = json.loads(item.arguments or "")
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        raise InvalidRequest(f"input.{i}.arguments must be a JSON object, as a string", param=f"input.{i}.arguments")
    name = f"{item.namespace}.{item.name}" if item.namespace else item.name
    return PastCall(name or "", arguments, item.call_id)


def _parts(content: str | list[Part], where: str) -> tuple[TextPart | Image, ...]:
    if isinstance(content, str):
        return (TextPart(content),)
    out: list[TextPart | Image] = []
    for j, part in enumerate(content):
        if part.type in ("input_text", "output_text", "text") and part.text is not None:
            out.append(TextPart(part.text))
        elif part.type == "input_image" and part.image_url:
            out.append(url_image(part.image_url, f"{where}.{j}", f"{where}.{j}.image_url"))
        elif part.type != "refusal":
            raise InvalidRequest(f"{where}.{j}.type: {part.type!r} parts are not supported; this server reads "
                                 "text (input_text, output_text) and input_image parts", param=f"{where}.{j}.type")
    return tuple(out)


def _one_system(messages: list[ChatMessage]) -> tuple[ChatMessage, ...]:
    """Instructions and the system/developer messages right after them, as one system message
    (many templates take a single one)."""
    lead = next((k for k, m in enumerate(messages) if m.role != "system"), len(messages))
    if lead < 2:
        return tuple(messages)
    return (ChatMessage.of("system", "\n\n".join(m.text for m in messages[:lead])), *messages[lead:])


def _rules(req: ResponsesRequest, settings: Settings, dropped: list[str]) -> OutputRules:
    choice = req.tool_choice
    if isinstance(choice, NamedChoice):
        if choice.type != "function" or choice.name is None:
            field = "type" if choice.type != "function" else "name"
            raise InvalidRequest(f"tool_choice.{field}: name one function tool: "
                                 '{"type": "function", "name": ...}', param=f"tool_choice.{field}")
    fmt = req.text.format if req.text else None
    if fmt is not None and fmt.type == "json_schema" and fmt.schema_ is None:
        raise InvalidRequest("text.format.schema is required when type is 'json_schema'", param="text.format.schema")
    return OutputRules(tools=tuple(_tools(req.tools, settings, dropped)),
                       tool_choice=choice.name if isinstance(choice, NamedChoice) else choice,
                       parallel_tool_calls=req.parallel_tool_calls,
                       json_schema=fmt.schema_ if fmt is not None and fmt.type == "json_schema" else None,
                       json_object=fmt is not None and fmt.type == "json_object", strict=bool(fmt and fmt.strict))


def _tools(tools: list[Tool], settings: Settings, dropped: list[str], namespace: str = "",
           where: str = "tools") -> list[ToolSpec]:
    """Function tools, and those inside namespace tools (named NAMESPACE.NAME); hosted tools are
    dropped or refused."""
    out = []
    for i, t in enumerate(tools):
        if t.type == "namespace" and not namespace:
            if not t.name:
                raise InvalidRequest(f"{where}.{i}.name is required", param=f"{where}.{i}.name")
            out += _tools(t.tools or [], settings, dropped, t.name, f"{where}.{i}.tools")
        elif t.type != "function":
            hosted.drop(dropped, t.type, f"{where}.{i}.type", settings)
        elif t.name is None:
            raise InvalidRequest(f"{where}.{i}.name is required", param=f"{where}.{i}.name")
        else:
            out.append(ToolSpec(f"{namespace}.{t.name}" if namespace else t.name, t.description, t.parameters,
                                bool(t.strict)))
    return out


# -- generation → response ------------------------------------------------------------------

def _kept(items: list[dict[str, Any]]) -> list[InputItem]:
    """Output items as the input of a later turn; a function call cut off mid-arguments is left out."""
    return [InputItem.model_validate(it) for it in items
            if not (it["type"] == "function_call" and it["status"] == "incomplete")]
