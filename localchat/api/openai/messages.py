"""OpenAI chat messages, validated at the edge, and their translation into neutral messages:
text, image and audio parts, tool calls with their arguments as JSON values."""

from __future__ import annotations

from typing import Any, Literal

from ...errors import InvalidRequest
from ...generation import Audio, ChatMessage, Part, PastCall, TextPart
from ...generation.media import b64
from ..common import Lenient as _Lenient, url_image
from ..fields import call_arguments


class ImageUrl(_Lenient):
    url: str
    detail: str | None = None  # accepted, not used: the projector decides the resolution


class InputAudio(_Lenient):
    data: str  # base64
    format: str


class ContentPart(_Lenient):
    type: str
    text: str | None = None
    image_url: ImageUrl | str | None = None  # a data: URI or an http(s) / file URL (some clients send the bare string)
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


def said(i: int, m: Message) -> ChatMessage:
    """One message, neutral: `developer` is `system`, text, image and audio parts, tool calls'
    arguments as objects."""
    where = f"messages.{i}.content"
    parts: list[Part] = []
    if isinstance(m.content, list):
        for j, part in enumerate(m.content):
            if part.type == "text" and part.text is not None:
                parts.append(TextPart(part.text))
            elif part.type == "image_url" and part.image_url is not None:
                url = part.image_url if isinstance(part.image_url, str) else part.image_url.url
                parts.append(url_image(url, f"{where}.{j}", f"{where}.{j}.image_url.url"))
            elif part.type == "input_audio" and part.input_audio is not None:
                data = b64(part.input_audio.data, f"{where}.{j}.input_audio.data")
                parts.append(Audio(data, part.input_audio.format, f"{where}.{j}"))
            else:
                raise InvalidRequest(f"{where}.{j}: part type {part.type!r} is not supported here; send text, "
                                     "image_url and input_audio parts", param=f"{where}.{j}")
    elif m.content is not None:
        parts.append(TextPart(m.content))
    if m.content is None and not (m.role == "assistant" and m.tool_calls):
        raise InvalidRequest(f"{where} is required for a {m.role} message", param=where)
    calls = tuple(PastCall(c.function.name, call_arguments(c.function.arguments), c.id) for c in m.tool_calls or [])
    return ChatMessage("system" if m.role == "developer" else m.role, tuple(parts), calls, m.tool_call_id, m.name,
                m.reasoning_content)

