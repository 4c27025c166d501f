"""A local stand-in for the Hugging Face Hub, speaking what huggingface_hub calls: model info with
its files (`GET /api/models/OWNER/REPO[/revision/REV]`), and `HEAD`/`GET` on
`/OWNER/REPO/resolve/REV/FILE` with the headers huggingface_hub needs (X-Repo-Commit, ETag: the
sha256 of the file, Content-Length, Accept-Ranges), Range requests (206), and the hub's errors
(X-Error-Code: RepoNotFound, EntryNotFound, GatedRepo as 401 without a token, 403 with a wrong one).

Set HF_ENDPOINT to `hub.url`. A file can be served broken on purpose: `cut_after` closes the
connection after that many bytes (the first N GETs), `stall_after` sends that many bytes and then
waits (for a test to interrupt the client), `corrupt` flips a byte in transit."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"
RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
INFO = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+?)(?:/revision/(?P<rev>[^/]+))?$")


@dataclass
class Served:
    data: bytes
    cut_after: int | None = None  # close the connection after this many bytes ...
    cuts: int = 1  # ... the first this many GETs
    stall_after: int | None = None  # send this many bytes, then wait until released
    corrupt: bool = False  # one byte differs from what the ETag (sha256) says

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass
class Repo:
    files: dict[str, Served]
    gated: bool = False
    token: str = "hf_allowed"  # the token a gated repository lets in


@dataclass
class FakeHub:
    repos: dict[str, Repo] = field(default_factory=dict)
    requests: list[tuple[str, str, str | None, str | None]] = field(default_factory=list)  # method, path, Range, auth
    release: threading.Event = field(default_factory=threading.Event)

    def add(self, repo: str, files: dict[str, bytes | Path | Served], gated: bool = False) -> Repo:
        served = {name: f if isinstance(f, Served) else Served(f.read_bytes() if isinstance(f, Path) else f)
                  for name, f in files.items()}
        self.repos[repo] = Repo(served, gated)
        return self.repos[repo]

    def gets(self, file: str) -> list[str | None]:
        """The Range header of each GET of a file."""
        return [r for m, p, r, _ in self.requests if m == "GET" and p.endswith("/" + file)]

    def start(self) -> "FakeHub":
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                hub._handle(self, head=False)

            def do_HEAD(self) -> None:
                hub._handle(self, head=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    # -- the hub's routes ---------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        path = h.path.split("?", 1)[0]
        self.requests.append((h.command, path, h.headers.get("Range"), h.headers.get("Authorization")))
        if m := INFO.match(path):
            return self._info(h, m["repo"])
        if m := RESOLVE.match(path):
            return self._resolve(h, m["repo"], m["file"], head)
        self._error(h, 404, "RepoNotFound", "not found")

    def _info(self, h: BaseHTTPRequestHandler, name: str) -> None:
        repo = self.repos.get(name)
        if repo is None:
            return self._error(h, 401, "RepoNotFound", "Repository not found")
        body = {"id": name, "modelId": name, "sha": COMMIT, "private": False, "gated": "manual" if repo.gated else False,
                "siblings": [{"rfilename": f} for f in repo.files]}
        self._send(h, 200, json.dumps(body).encode(), {"Content-Type": "application/json"})

    def _resolve(self, h: BaseHTTPRequestHandler, name: str, file: str, head: bool) -> None:
        repo = self.repos.get(name)
        if repo is None:
            return self._error(h, 401, "RepoNotFound", "Repository not found")
        if repo.gated and h.headers.get("Authorization") != f"Bearer {repo.token}":
            status = 403 if h.headers.get("Authorization") else 401
            return self._error(h, status, "GatedRepo", "Access to model is restricted. You must have access to it "
                                                       "and be authenticated to access it. Please log in.")
        served = repo.files.get(file)
        if served is None:
            return self._error(h, 404, "EntryNotFound", "Entry not found")
        size = len(served.data)
        start = 0
        if m := re.fullmatch(r"bytes=(\d+)-", h.headers.get("Range") or ""):
            start = int(m[1])
        headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{served.sha256}"', "Accept-Ranges": "bytes",
                   "Content-Type": "application/octet-stream"}
        if head:
            return self._send(h, 200, b"", {**headers, "Content-Length": str(size)}, body=False)
        data = served.data[start:]
        if served.corrupt:
            data = data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 0xFF]) + data[len(data) // 2 + 1:]
        status = 206 if start else 200
        if start:
            headers["Content-Range"] = f"bytes {start}-{size - 1}/{size}"
        h.send_response(status)
        for k, v in {**headers, "Content-Length": str(len(data))}.items():
            h.send_header(k, v)
        h.end_headers()
        self._body(h, served, data, start)

    def _body(self, h: BaseHTTPRequestHandler, served: Served, data: bytes, start: int) -> None:
        if served.cut_after is not None and served.cuts > 0 and start < served.cut_after:
            served.cuts -= 1
            h.wfile.write(data[:served.cut_after - start])
            h.wfile.flush()
            h.close_connection = True
            return
        if served.stall_after is not None and start < served.stall_after:
            h.wfile.write(data[:served.stall_after - start])
            h.wfile.flush()
            while not self.release.wait(0.1):
                time.sleep(0)
            h.close_connection = True
            return
        h.wfile.write(data)

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        self._send(h, status, body, {"Content-Type": "application/json", "X-Error-Code": code,
                                     "X-Error-Message": message})

    def _send(self, h: BaseHTTPRequestHandler, status: int, data: bytes, headers: dict[str, str],
              body: bool = True) -> None:
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        if "Content-Length" not in headers:
            h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if body:
            h.wfile.write(data)
