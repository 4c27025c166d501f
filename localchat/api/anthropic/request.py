"""The Anthropic Messages API, `POST /v1/messages` and `POST /v1/messages/count_tokens`: a thin
translation onto the one generation step (Claude Code and other Anthropic clients).

Content blocks become OpenAI-shaped messages: assistant `tool_use` blocks → `tool_calls`,
user `tool_result` blocks → `tool` messages, assistant `thinking` → `reasoning_content`;
`system` messages inside `messages` stay where they are (generation merges them into the
system prompt when the model's template cannot place them). Tools the hosted API runs itself
(web search, code execution, MCP servers) are dropped and reported (hosted.py); a tool with
`defer_loading` is shown to the model once a `tool_reference` block in a tool result loads it.
The response side (blocks, SSE events) is in stream.py."""

from __future__ import annotations

import asyncio
import re
import secrets
from typing import Any, Literal

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...errors import InvalidRequest
from ...generation import REASONING_OFF, REASONING_ON, Chat, ChatMessage, GenerationRequest, OutputRules, Part, PastCall, TextPart, ToolSpec
from ...models import Settings, sampling_model
from .. import hosted
from ..body import KeepAlive, parse, read_json
from ..common import Lenient as _Lenient, base64_image, respond, sampling, url_image
from ..sse import frame, loosened_headers
from .stream import collect, stream


class Block(_Lenient):
    type: str
    text: str | None = None
    thinking: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    tool_use_id: str | None = None
    content: str | list[Block] | None = None
    is_error: bool = False
    tool_name: str | None = None  # a tool_reference block: the deferred tool it loads
    source: dict[str, Any] | None = None  # an image block's: {type: base64, media_type, data}


class Message(_Lenient):
    role: Literal["user", "assistant", "system"]  # system: mid-conversation instructions (Claude Code sends them)
    content: str | list[Block]


class Tool(_Lenient):
    type: str | None = None  # absent or "custom": a tool the client runs; else one the hosted API runs
    name: str = Field(pattern=r"^[a-zA-Z0-9_.:-]{1,128}$")
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    defer_loading: bool = False  # not shown to the model until a tool_reference block loads it
    strict: bool | None = None


class ToolChoice(_Lenient):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False


class Thinking(_Lenient):
    type: str  # enabled | disabled | adaptive | between_tools: the model thinks or not by its template
    budget_tokens: int | None = Field(None, ge=1)


class JsonFormat(_Lenient):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(_Lenient):
    format: JsonFormat | None = None  # structured output: the answer's text is JSON for this schema


SamplingFields = sampling_model("AnthropicSampling", optional=True, base=_Lenient)


class CountRequest(SamplingFields):  # type: ignore[misc, valid-type]
    """What count_tokens reads: the prompt's parts (sampling fields are accepted and unused)."""

    model: str | None = None
    system: str | list[Block] | None = None
    messages: list[Message] = Field(min_length=1)
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None  # budget_tokens is not enforced
    output_config: OutputConfig | None = None
    mcp_servers: list[dict[str, Any]] | None = None  # run by the hosted API: dropped and reported


class MessagesRequest(CountRequest):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    stream: bool = False
    logit_bias: dict[str, float] | None = None  # extension (OpenAI's): token id → bias
    keep_alive: KeepAlive = None  # extension (Ollama's): how long the model stays loaded afterwards


def to_request(req: CountRequest, settings: Settings, dropped: list[str] | None = None) -> GenerationRequest:
    """The neutral request. max_tokens is a ceiling: past the server's cap generation lowers it
    to the cap (Claude Code asks for 32000). Hosted tools left out are appended to
    `dropped`. `thinking` turns reasoning on or off where the template has the switch."""
    knobs = req.model_dump()
    extra: dict[str, Any] = {}
    if isinstance(req, MessagesRequest):
        knobs["max_tokens"] = req.max_tokens
        extra = {"keep_alive": req.keep_alive}
    else:
        knobs["max_tokens"] = None
    loaded: set[str] = set()  # deferred tools that a tool_reference block has loaded
    messages = conversation(req, loaded)
    thinking = req.thinking.type if req.thinking else None
    return GenerationRequest(
        messages=messages, model=req.model or None,
        sampling=sampling(knobs, stop=getattr(req, "stop_sequences", None), logit_bias=getattr(req, "logit_bias", None)),
        output=output_rules(req, settings, loaded, [] if dropped is None else dropped),
        reasoning={"enabled": REASONING_ON, "disabled": REASONING_OFF}.get(thinking or ""), **extra)


def output_rules(req: CountRequest, settings: Settings, loaded: set[str] = frozenset(),  # type: ignore[assignment]
                 dropped: list[str] | None = None) -> OutputRules:
    choice, asked = "auto", req.tool_choice.type if req.tool_choice else "auto"
    tools = _tools(req, settings, loaded, [] if dropped is None else dropped)
    if asked == "tool":
        if not req.tool_choice or not req.tool_choice.name:
            raise InvalidRequest("tool_choice.name is required when tool_choice.type is 'tool'", param="tool_choice.name")
        choice = req.tool_choice.name
    elif asked in ("any", "none"):
        if asked == "any" and not tools:
            raise InvalidRequest("tool_choice is 'any' but the request has no tools", param="tool_choice")
        choice = "required" if asked == "any" else "none"
    fmt = req.output_config.format if req.output_config else None
    return OutputRules(tools=tuple(tools), tool_choice=choice, json_schema=fmt.schema_ if fmt else None,
                       parallel_tool_calls=not (req.tool_choice and req.tool_choice.disable_parallel_tool_use))


def _tools(req: CountRequest, settings: Settings, loaded: set[str], dropped: list[str]) -> list[ToolSpec]:
    """The tools the model sees: the client's own, less the deferred ones not yet loaded."""
    out = []
    for i, t in enumerate(req.tools or []):
        if t.type not in (None, "custom"):
            hosted.drop(dropped, t.type, f"tools.{i}.type", settings)
        elif t.input_schema is None:
            raise InvalidRequest(f"tools.{i}.input_schema: Field required", param=f"tools.{i}.input_schema")
        elif not t.defer_loading or t.name in loaded:
            out.append(ToolSpec(t.name, t.description, t.input_schema, bool(t.strict)))
    if req.mcp_servers:
        hosted.drop(dropped, "mcp_servers", "mcp_servers", settings)
    return out


def conversation(req: CountRequest, loaded: set[str] | None = None) -> tuple[ChatMessage, ...]:
    out: list[ChatMessage] = []
    system = _without_billing(req.system if isinstance(req.system, str) else _texts(req.system or [], "system"))
    if system:
        out.append(ChatMessage.of("system", system))
    names: dict[str, str] = {}  # tool_use id → tool name, for the tool messages answering them
    loaded = set() if loaded is None else loaded
    for i, m in enumerate(req.messages):
        where = f"messages.{i}.content"
        if m.role == "system":
            text = m.content if isinstance(m.content, str) else _texts(m.content, where)
            out.insert(_before_asking(out), ChatMessage.of("system", text))
        elif isinstance(m.content, str):
            out.append(ChatMessage.of(m.role, m.content))
        elif m.role == "assistant":
            out.append(_assistant(m.content, where, names))
        else:
            out += _user(m.content, where, names, loaded)
    return tuple(out)


def _before_asking(out: list[ChatMessage]) -> int:
    """Where a system message in `messages` goes: before the user's text it follows, else where
    it stands. Claude Code sends its context (skills, agent types, today's date) as a system
    message *after* the user's message; rendered there, it is the last thing a small model reads
    before answering, and Qwen2.5-Coder 1.5B answered "Say hi." with a call to the skill listed
    last (`init`, with the date as its argument). Read just before the user's text it still
    applies to the answer (Anthropic: from its point on), and the turns before it stay a cached
    prefix. After a tool's result it stays where it is (a result follows its call)."""
    return len(out) - 1 if out and out[-1].role == "user" else len(out)


# Claude Code (2.1.36+) opens its system prompt with a line that changes with every request
# (`x-anthropic-billing-header: cc_version=2.1.330.440; cc_entrypoint=cli; cch=36ee5;`): kept, it
# would make every request miss the prompt cache after ~20 tokens. It tells the model nothing.
_BILLING = re.compile(r"^x-anthropic-billing-header:[^\n]*(?:\n|$)", re.MULTILINE)


def _without_billing(system: str) -> str:
    return _BILLING.sub("", system).strip("\n") if "x-anthropic-billing-header:" in system else system


def _assistant(blocks: list[Block], where: str, names: dict[str, str]) -> ChatMessage:
    texts, thoughts, calls = [], [], []
    for j, b in enumerate(blocks):
        if b.type == "text":
            texts.append(b.text or "")
        elif b.type == "thinking":
            thoughts.append(b.thinking or "")
        elif b.type == "tool_use":
            if not b.id or not b.name:
                raise InvalidRequest(f"{where}.{j}: a tool_use block needs `id` and `name`", param=f"{where}.{j}")
            names[b.id] = b.name
            calls.append(PastCall(b.name, b.input or {}, b.id))
        elif b.type != "redacted_thinking":  # encrypted by Anthropic: nothing a local model can read
            raise _unsupported(b, f"{where}.{j}")
    return ChatMessage("assistant", (TextPart("\n".join(texts)),), tuple(calls), reasoning="\n".join(thoughts) or None)


def _user(blocks: list[Block], where: str, names: dict[str, str], loaded: set[str]) -> list[ChatMessage]:
    """Tool results become `tool` messages; runs of text and image blocks become user messages."""
    out: list[ChatMessage] = []
    parts: list[Part] = []
    for j, b in enumerate(blocks):
        if b.type in ("text", "image"):
            parts.append(TextPart(b.text or "") if b.type == "text" else _image(b, f"{where}.{j}"))
            continue
        if b.type != "tool_result":
            raise _unsupported(b, f"{where}.{j}")
        if not b.tool_use_id:
            raise InvalidRequest(f"{where}.{j}.tool_use_id is required", param=f"{where}.{j}.tool_use_id")
        if parts:
            out.append(ChatMessage("user", tuple(parts)))
            parts = []
        content = b.content if isinstance(b.content, str) else _texts(b.content or [], f"{where}.{j}.content", loaded)
        out.append(ChatMessage.of("tool", ("Error: " if b.is_error else "") + content, tool_call_id=b.tool_use_id,
                           name=names.get(b.tool_use_id)))
    if parts or not out:
        out.append(ChatMessage("user", tuple(parts) or (TextPart(""),)))
    return out


def _image(block: Block, where: str) -> Part:
    """A base64 image, or one by URL (`{type: url, url}`: fetched where the server allows it)."""
    source = block.source or {}
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return url_image(source["url"], where, f"{where}.source.url")
    if source.get("type") != "base64" or not isinstance(source.get("data"), str):
        raise InvalidRequest(f"{where}.source: an image block's source must be {{type: base64, media_type, data}} "
                             "or {type: url, url}", param=f"{where}.source")
    return base64_image(source["data"], source.get("media_type"), where)


def _texts(blocks: list[Block], where: str, loaded: set[str] | None = None) -> str:
    """Text blocks as one text; in a tool result, `tool_reference` blocks load deferred tools."""
    texts = []
    for j, b in enumerate(blocks):
        if b.type == "text":
            texts.append(b.text or "")
        elif b.type == "tool_reference" and loaded is not None and b.tool_name:
            loaded.add(b.tool_name)
            texts.append(f"Tool {b.tool_name} loaded.")
        else:
            raise _unsupported(b, f"{where}.{j}")
    return "\n".join(texts)


def _unsupported(block: Block, where: str) -> InvalidRequest:
    if block.type in ("image", "document"):
        return InvalidRequest(f"{where}: {block.type} blocks are not read here (text, and images in user turns)",
                              param=where)
    return InvalidRequest(f"{where}: content blocks of type {block.type!r} are not supported here", param=where)


PING = frame({"type": "ping"}, event="ping")  # Anthropic's keepalive while the prompt is read


def routes(chat: Chat) -> list[Route]:
    async def read(request: Request, model: type[CountRequest]) -> tuple[CountRequest, GenerationRequest, list[str]]:
        settings = chat.settings
        body = await read_json(request, settings.max_body_bytes)

        def translate() -> tuple[CountRequest, GenerationRequest, list[str]]:  # a long conversation: off the loop
            req, dropped = parse(model, body), []
            return req, to_request(req, settings, dropped), dropped

        return await asyncio.to_thread(translate)

    async def messages(request: Request) -> Response:
        req, ask, dropped = await read(request, MessagesRequest)
        assert isinstance(req, MessagesRequest)
        turn = await chat.start(ask)
        meta = {"id": f"msg_{secrets.token_hex(12)}", "type": "message", "role": "assistant", "model": turn.model}
        return await respond(request, req.stream, lambda: stream(turn, meta), lambda: collect(turn, meta), turn.close,
                             lambda: {**hosted.headers(dropped), **loosened_headers(turn)}, keepalive=PING)

    async def tokens(request: Request) -> Response:
        _, ask, dropped = await read(request, CountRequest)
        return JSONResponse({"input_tokens": await chat.count_tokens(ask)}, headers=hosted.headers(dropped))

    return [Route("/v1/messages", messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", tokens, methods=["POST"])]
