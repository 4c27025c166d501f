"""Images and audio in a request, whatever the protocol: decoded and checked here (Pillow), placed
in the prompt by a marker each protocol puts where the media sits in a message's content, and
handed to the engine as plain data (`engine.params.Media`: RGB pixels or an audio file's bytes)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import re
from dataclasses import replace
from typing import Any

from PIL import Image, ImageOps, UnidentifiedImageError

from ..engine.params import Media
from ..errors import InvalidRequest
from ..models import Settings

_MARKER = re.compile("\ue002media:(\\d+)\ue003")
AUDIO_FORMATS = ("wav", "mp3", "flac")


def marker(k: int) -> tuple[str, bool]:
    """The content piece that stands for the request's k-th media (template text, never plain text)."""
    return f"\ue002media:{k}\ue003", False


def decode_image(data: bytes, param: str, limits: Settings) -> Media:
    """An image file (PNG, JPEG, WebP, GIF: its first frame, …) as RGB pixels, upright by its EXIF."""
    _check_size(data, "image", param, limits)
    try:
        with Image.open(io.BytesIO(data)) as img:
            if img.width * img.height > limits.max_image_pixels:
                raise InvalidRequest(f"{param}: the image is {img.width}×{img.height} pixels; at most "
                                     f"{limits.max_image_pixels} (max_image_pixels)", param=param)
            rgb = ImageOps.exif_transpose(img).convert("RGB")
    except InvalidRequest:
        raise
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise InvalidRequest(f"{param}: not an image that can be read (PNG, JPEG, WebP, GIF, BMP…): {exc}",
                             param=param) from None
    pixels = rgb.tobytes()
    digest = hashlib.sha256(b"image %d %d " % rgb.size + pixels).hexdigest()
    return Media(at=-1, kind="image", data=pixels, id=digest, width=rgb.width, height=rgb.height, param=param)


def decode_audio(data: bytes, fmt: str, param: str, limits: Settings) -> Media:
    """An audio file, checked for its format and size here; the projector's side decodes it."""
    _check_size(data, "audio clip", param, limits)
    check_audio_format(fmt, param)
    return Media(at=-1, kind="audio", data=data, id=hashlib.sha256(b"audio " + data).hexdigest(), param=param)


def check_audio_format(fmt: str, param: str) -> None:
    if fmt not in AUDIO_FORMATS:
        raise InvalidRequest(f"{param}: audio format {fmt!r} is not read here; send {', '.join(AUDIO_FORMATS)}",
                             param=param)


def data_uri(url: str, param: str) -> bytes:
    """The bytes of a `data:` URI (base64)."""
    head, sep, payload = url.partition(",")
    if not url.startswith("data:") or not sep:
        scheme = url.split(":", 1)[0] + " URLs" if ":" in url else "a bare string"
        raise InvalidRequest(f"{param}: send the image inline as a data: URI (data:image/png;base64,…), or an "
                             f"http(s) or file URL where the server allows them; {scheme} are not read",
                             param=param)
    if not head.endswith(";base64"):
        raise InvalidRequest(f"{param}: a data: URI must be base64 (data:image/png;base64,…)", param=param)
    return b64(payload, param)


def b64(text: str, param: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"{param}: not valid base64", param=param) from None


def check_count(n: int, limits: Settings, param: str = "messages") -> None:
    if n > limits.max_media:
        raise InvalidRequest(f"{param}: {n} images or audio clips; at most {limits.max_media} a request (max_media)",
                             param=param)


def check_reads(medium: str, param: str, projector: Any, model: str) -> None:
    """The model reads this kind of media (image, audio): it has a projector (`mmproj`) for it."""
    if projector is None or not (projector.vision if medium == "image" else projector.audio):
        what, projector_kind = ("images", "a vision") if medium == "image" else ("audio", "an audio")
        raise InvalidRequest(f"{param}: the model {model} does not read {what}: give it {projector_kind} projector "
                             "(`mmproj` in models.toml)", param=param)


def place_media(model: Any, segments: tuple[tuple[str, bool], ...] | list[tuple[str, bool]],
                media: tuple[Media, ...]) -> tuple[list[int], tuple[Media, ...]]:
    """Tokenize a rendered prompt as `Model.tokenize` does, each media marker becoming the place
    (`Media.at`) of its media."""
    tokens: list[int] = []
    placed: dict[int, Media] = {}
    for text, plain in segments:
        found = None if plain else _MARKER.fullmatch(text)
        if found is None:
            tokens += model.tokenize_bytes(text.encode("utf-8", "replace"), parse_special=not plain)
        elif int(found.group(1)) < len(media):
            k = int(found.group(1))
            placed[k] = replace(media[k], at=len(tokens))
    shift = int(model.bos is not None and tokens[:1] != [model.bos])
    if shift:
        tokens.insert(0, model.bos)
    if len(placed) != len(media):
        missing = next(m for k, m in enumerate(media) if k not in placed)
        raise InvalidRequest(f"{missing.param}: the model's chat template leaves this message's media out of the "
                             "prompt (images and audio go in user messages)", param=missing.param)
    return tokens, tuple(replace(m, at=m.at + shift) for _, m in sorted(placed.items()))


def _check_size(data: bytes, what: str, param: str, limits: Settings) -> None:
    if not data:
        raise InvalidRequest(f"{param}: the {what} is empty", param=param)
    if len(data) > limits.max_media_bytes:
        raise InvalidRequest(f"{param}: the {what} is {len(data)} bytes; at most {limits.max_media_bytes} "
                             "(max_media_bytes)", param=param)
