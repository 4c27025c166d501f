"""Images named by URL. `http://` and `https://` are fetched only where `fetch_images` allows
it, within `max_media_bytes` and `media_timeout`; `file://` is read only under `media_folder`
(symbolic links resolved first: a link that leads out of the folder is refused). Blocking:
called in `prepare`, off the event loop."""

from __future__ import annotations

import os
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx

from ..errors import InvalidRequest
from ..models import Settings

MAX_REDIRECTS = 5


def load_url(url: str, where: str, settings: Settings) -> bytes:
    """The bytes an http(s) or file URL names (a 400 naming `where` when it may not be read)."""
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("http", "https"):
        return _fetch(url, where, settings)
    if scheme == "file":
        return _read(url, where, settings)
    raise InvalidRequest(f"{where}: send a data: URI (data:image/png;base64,…), or an http(s) or file URL "
                         "where the server allows them", param=where)


def _fetch(url: str, where: str, settings: Settings) -> bytes:
    if not settings.fetch_images:
        raise InvalidRequest(f"{where}: http(s) URLs are not fetched on this server (fetch_images = true in "
                             "models.toml, or localchat serve --fetch-images, allows it); send the image inline as a "
                             "data: URI", param=where)
    most, seconds = settings.max_media_bytes, settings.media_timeout
    deadline = time.monotonic() + seconds
    try:
        with httpx.Client(follow_redirects=True, max_redirects=MAX_REDIRECTS, timeout=seconds) as client, \
                client.stream("GET", url, headers={"User-Agent": "localchat"}) as r:
            if r.status_code != 200:
                raise InvalidRequest(f"{where}: fetching the image answered HTTP {r.status_code}", param=where)
            declared = r.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > most:
                raise _too_large(where, int(declared), most)
            chunks, size = [], 0
            for chunk in r.iter_bytes():
                size += len(chunk)
                if size > most:
                    raise _too_large(where, size, most)
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout("the whole download")
                chunks.append(chunk)
    except httpx.TimeoutException:
        raise InvalidRequest(f"{where}: fetching the image took more than {seconds:g} s (media_timeout)",
                             param=where) from None
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
        raise InvalidRequest(f"{where}: the image could not be fetched: {exc}", param=where) from None
    return b"".join(chunks)


def _read(url: str, where: str, settings: Settings) -> bytes:
    if settings.media_folder is None:
        raise InvalidRequest(f"{where}: file URLs are read only under a media folder (media_folder = \"…\" in "
                             "models.toml, or localchat serve --media-folder); send the image inline as a data: URI",
                             param=where)
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
        raise InvalidRequest(f"{where}: a file URL names an absolute path on this machine (file:///path)", param=where)
    folder = Path(settings.media_folder).expanduser().resolve()
    path = Path(os.path.normpath(unquote(parts.path)))
    outside = InvalidRequest(f"{where}: the file is outside the media folder (media_folder)", param=where)
    if not (_under(path, folder) or _under(path, Path(settings.media_folder).expanduser().absolute())):
        raise outside
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise InvalidRequest(f"{where}: no such file in the media folder", param=where) from None
    if not _under(real, folder):
        raise outside  # a symbolic link that leads out of the folder
    if not real.is_file():
        raise InvalidRequest(f"{where}: not a file", param=where)
    with real.open("rb") as f:
        data = f.read(settings.max_media_bytes + 1)
    if len(data) > settings.max_media_bytes:
        raise _too_large(where, real.stat().st_size, settings.max_media_bytes)
    return data


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _too_large(where: str, size: int, most: int) -> InvalidRequest:
    return InvalidRequest(f"{where}: the image is {size} bytes or more; at most {most} (max_media_bytes)", param=where)
