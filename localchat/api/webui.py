"""The chat page: `GET /` and its files under `/ui/`, served from localchat/web as they are (no
build step). A file is read once (again when it changes), kept in memory with its gzip and ETag; every answer asks
the browser to revalidate (an upgraded server never serves a stale page, an unchanged file costs
a 304). The page and its files need no API key (it asks for the key); everything it calls does."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..generation import KNOBS

WEB = Path(__file__).resolve().parent.parent / "web"
PUBLIC_PATHS = frozenset({"/"})
PUBLIC_PREFIXES = ("/ui/",)
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".woff2": "font/woff2",
         ".json": "application/json", ".txt": "text/plain; charset=utf-8", ".md": "text/plain; charset=utf-8"}
COMPRESSED = {".woff2"}  # already compressed: gzip would only cost time
# Defence in depth behind the sanitiser: no inline or foreign script, no foreign connection.
# Inline styles stay allowed: KaTeX positions its glyphs with style attributes.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
       "font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
       "frame-ancestors 'none'")
HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}


@dataclass(frozen=True)
class Asset:
    body: bytes
    gzipped: bytes | None
    etag: str
    media_type: str


class Assets:
    """The files under one folder, read on first use and kept."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._kept: dict[str, tuple[tuple[int, int], Asset]] = {}  # name → ((mtime, size), asset): an edited file is read again
        self._lock = threading.Lock()

    def get(self, name: str) -> Asset | None:
        """Blocking (reads and compresses a file when it is new or changed). None: not a file we serve."""
        path = (self.root / name).resolve()
        if not path.is_relative_to(self.root) or path.suffix not in TYPES or not path.is_file():
            return None
        stat = path.stat()
        version = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            kept = self._kept.get(name)
            if kept and kept[0] == version:
                return kept[1]
        asset = self._read(path)
        with self._lock:
            self._kept[name] = (version, asset)
        return asset

    def _read(self, path: Path) -> Asset:
        body = path.read_bytes()
        packed = gzip.compress(body, 9, mtime=0) if path.suffix not in COMPRESSED else None
        etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
        return Asset(body, packed if packed is not None and len(packed) < len(body) else None, etag, TYPES[path.suffix])


def routes(root: Path = WEB) -> list[Route]:
    assets = Assets(root)

    async def page(request: Request) -> Response:
        return await _serve(request, assets, "index.html", {"Content-Security-Policy": CSP})

    async def file(request: Request) -> Response:
        return await _serve(request, assets, request.path_params["path"])

    async def knobs(request: Request) -> Response:
        """The sampling fields and their bounds, as the engine declares them (the settings form)."""
        return JSONResponse(KNOBS, headers=HEADERS)

    return [Route("/", page, methods=["GET"]), Route("/ui/knobs.json", knobs, methods=["GET"]),
            Route("/ui/{path:path}", file, methods=["GET"])]


async def _serve(request: Request, assets: Assets, name: str, extra: dict[str, str] | None = None) -> Response:
    asset = await asyncio.to_thread(assets.get, name)
    if asset is None:
        return JSONResponse({"error": {"message": f"no file {request.url.path}", "type": "not_found",
                                       "param": None, "code": None}}, status_code=404)
    headers = {**HEADERS, **(extra or {}), "ETag": asset.etag, "Vary": "Accept-Encoding"}
    if asset.etag in request.headers.get("if-none-match", ""):
        return Response(status_code=304, headers=headers)
    body = asset.body
    if asset.gzipped is not None and "gzip" in request.headers.get("accept-encoding", ""):
        body, headers["Content-Encoding"] = asset.gzipped, "gzip"
    return Response(body, media_type=asset.media_type, headers=headers)
