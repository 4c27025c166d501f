"""OpenAI content parts with media (`image_url` with a data: URI, `input_audio`) for
/v1/chat/completions: decoded, and a marker left where each sits in the message."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from ..engine.params import Media
from ..errors import InvalidRequest
from ..generation.media import b64, check_count, data_uri, decode_audio, decode_image, marker
from ..models import Settings

MEDIA_PARTS = ("image_url", "input_audio")


class ImageUrl(BaseModel):
    model_config = ConfigDict(extra="ignore")
    url: str
    detail: str | None = None  # accepted, not used: the projector decides the resolution


class InputAudio(BaseModel):
    model_config = ConfigDict(extra="ignore")
    data: str  # base64
    format: str


def media_capabilities(projector: Any) -> list[str]:
    """What a model reads besides text (a `ProjectorInfo`, or None), as capability names."""
    return [name for name, has in (("vision", projector and projector.vision), ("audio", projector and projector.audio))
            if has]


def count_media(messages: list[Any], limits: Settings) -> None:
    """Refuse too many media before any is decoded."""
    check_count(sum(1 for m in messages if isinstance(m.content, list) for p in m.content if p.type in MEDIA_PARTS),
                limits)


def content_with_media(i: int, parts: list[Any], media: list[Media], limits: Settings) -> str | list[tuple[str, bool]]:
    """A message's parts: text joined by newlines, as before; with media, (text, is_plain) pieces
    holding a marker where each image or clip sits (its Media appended to `media`)."""
    pieces: list[tuple[str, bool]] = []
    for j, part in enumerate(parts):
        param = f"messages.{i}.content.{j}"
        if part.type == "text" and part.text is not None:
            if pieces and pieces[-1][1]:
                pieces.append(("\n", True))
            pieces.append((part.text, True))
        elif part.type == "image_url" and part.image_url is not None:
            url = part.image_url if isinstance(part.image_url, str) else part.image_url.url
            media.append(decode_image(data_uri(url, f"{param}.image_url.url"), param, limits))
            pieces.append(marker(len(media) - 1))
        elif part.type == "input_audio" and part.input_audio is not None:
            data = b64(part.input_audio.data, f"{param}.input_audio.data")
            media.append(decode_audio(data, part.input_audio.format, param, limits))
            pieces.append(marker(len(media) - 1))
        else:
            raise InvalidRequest(f"messages[{i}].content: part type {part.type!r} is not supported; this server "
                                 "takes text, image_url and input_audio parts", param=f"messages.{i}.content")
    if all(plain for _, plain in pieces):
        return "".join(text for text, _ in pieces)
    return pieces
