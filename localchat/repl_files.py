"""Files in the terminal chat: images attached to the next message (`/image PATH`, or a path
pasted alone on a line), sent as OpenAI `image_url` parts with a data: URI; conversations saved
and loaded as OpenAI-style JSON messages."""

from __future__ import annotations

import base64
import json
import mimetypes
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp")
MAX_IMAGE_BYTES = 20 * 1024 * 1024  # the server's default max_media_bytes (the server has the last word)


@dataclass(frozen=True)
class Attachment:
    name: str
    size: int
    url: str  # a data: URI

    def part(self) -> dict[str, Any]:
        return {"type": "image_url", "image_url": {"url": self.url}}

    def __str__(self) -> str:
        return f"{self.name} ({self.size / 1024:.0f} KB)" if self.size >= 1024 else f"{self.name} ({self.size} bytes)"


def attach(text: str) -> Attachment:
    """An image file as an attachment (the server decides whether it is an image it reads)."""
    path = Path(text).expanduser()
    if not path.is_file():
        raise ValueError(f"no file {path}")
    size = path.stat().st_size
    if size > MAX_IMAGE_BYTES:
        raise ValueError(f"{path} is {size} bytes; at most {MAX_IMAGE_BYTES}")
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return Attachment(path.name, size, f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}")


def pasted_image(line: str) -> str | None:
    """The image file a line names when the line is nothing else: a path whose name ends in an
    image suffix (.png, .jpg, .jpeg, .webp, .gif, .bmp) and that exists, as terminals and file
    managers paste one: bare, quoted, with backslash-escaped spaces, or as a file:// URL. Any
    other line is text (None)."""
    text = line.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    else:
        text = re.sub(r"\\(.)", r"\1", text)
    if text.startswith("file://"):
        text = unquote(urlsplit(text).path)
    if not text or "\n" in text or not text.lower().endswith(IMAGE_SUFFIXES):
        return None
    path = Path(text).expanduser()
    return str(path) if path.is_file() else None


def with_images(text: str, images: list[Attachment]) -> str | list[dict[str, Any]]:
    """A user message's content: the text, and the images attached (OpenAI's parts)."""
    if not images:
        return text
    return [{"type": "text", "text": text}, *(a.part() for a in images)]


def save_conversation(path: str, conversation: list[dict[str, Any]]) -> None:
    Path(path).expanduser().write_text(json.dumps(conversation, ensure_ascii=False, indent=2) + "\n")


def load_conversation(path: str) -> list[dict[str, Any]]:
    try:
        data = json.loads(Path(path).expanduser().read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON: {exc}") from None
    if not isinstance(data, list) or not all(
            isinstance(m, dict) and m.get("role") in ("system", "user", "assistant", "tool") for m in data):
        raise ValueError(f"{path} is not a list of chat messages")
    return data
