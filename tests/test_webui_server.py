"""The chat page's server side, without a browser: `GET /` and its files (types, gzip, ETag,
CSP, nothing outside the folder), public under --api-key while the APIs are not, --no-webui,
the address printed by `serve`, `localchat open`, and what `/health` adds for the status panel."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import localchat
from conftest import Server, free_port
from localchat.api.webui import WEB
from localchat.engine.params import KNOBS

KEY = "page-key"
CHAT = {"model": "tiny-chatml", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}


@pytest.fixture(scope="module")
def tiny(registry_file: Path) -> Iterator[Server]:
    s = Server(registry_file, "--model", "tiny-chatml")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def http(tiny: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=tiny.url, timeout=60) as c:
        yield c


def page_files(html: str) -> list[str]:
    return re.findall(r'(?:src|href)="(/ui/[^"]+)"', html)


def test_the_page_and_every_file_it_names_are_served(http: httpx.Client):
    r = http.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "connect-src 'self'" in csp and "unsafe-eval" not in csp
    assert r.headers["x-content-type-options"] == "nosniff"
    files = page_files(r.text)
    assert "/ui/js/main.js" in files and "/ui/app.css" in files
    types = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
    for path in files:
        f = http.get(path)
        assert f.status_code == 200, path
        assert f.headers["content-type"].startswith(types[Path(path).suffix]), path


def test_every_module_import_resolves_to_a_served_file(http: httpx.Client):
    """The ES modules import each other by relative paths: each must exist, or the page breaks."""
    for js in sorted((WEB / "js").glob("*.js")):
        text = js.read_text()
        for target in re.findall(r"""(?:from|import\()\s*'(\.[^']+)'""", text):
            url = "/ui/" + os.path.normpath(f"js/{target}")
            assert http.get(url).status_code == 200, f"{js.name} imports {target}"


def test_vendored_libraries_keep_their_licenses():
    vendor = WEB / "vendor"
    for lib in ("marked", "dompurify", "highlight", "katex"):
        assert list((vendor / lib).glob("LICENSE*")), lib
    css = (vendor / "katex" / "katex.min.css").read_text()
    fonts = set(re.findall(r"url\((fonts/[^)]+)\)", css))
    assert fonts and all((vendor / "katex" / f).is_file() for f in fonts), "a font KaTeX's CSS names is missing"


def test_gzip_and_etag(http: httpx.Client):
    plain = http.get("/ui/vendor/marked/marked.esm.js", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers
    packed = http.get("/ui/vendor/marked/marked.esm.js", headers={"Accept-Encoding": "gzip"})
    assert packed.headers["content-encoding"] == "gzip"
    assert packed.content == plain.content  # httpx decodes it
    assert int(packed.headers["content-length"]) < len(plain.content) / 2
    etag = plain.headers["etag"]
    again = http.get("/ui/vendor/marked/marked.esm.js", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    font = http.get("/ui/vendor/katex/fonts/KaTeX_Main-Regular.woff2", headers={"Accept-Encoding": "gzip"})
    assert font.status_code == 200 and "content-encoding" not in font.headers  # woff2 is compressed already


@pytest.mark.parametrize("path", ["/ui/%2e%2e/api/webui.py", "/ui/%2e%2e/%2e%2e/pyproject.toml", "/ui/js/../../api/app.py",
                                  "/ui/nothing.js", "/ui/js", "/ui/"])
def test_nothing_outside_the_page_folder_is_served(http: httpx.Client, path: str):
    r = http.get(path)
    assert r.status_code == 404


def test_knobs_are_the_engines(http: httpx.Client):
    assert http.get("/ui/knobs.json").json() == KNOBS


def test_serve_prints_the_page_address(tiny: Server):
    assert f"chat in your browser: {tiny.url}/" in tiny.output()


def test_health_says_version_memory_and_recent_requests(http: httpx.Client):
    r = http.post("/v1/chat/completions", json=CHAT)
    usage = r.json()["usage"]
    with http.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True, "max_tokens": 2000,
                                                            "ignore_eos": True}) as s:
        next(s.iter_lines())  # started; then the client leaves
    health = http.get("/health").json()
    assert health["version"] == localchat.__version__
    card = next(m for m in health["loaded"] if m["name"] == "tiny-chatml")
    if sys.platform == "linux":
        assert card["rss_bytes"] > 0 and health["memory"]["server_rss_bytes"] > 0
        assert 0 < health["memory"]["available_bytes"] <= health["memory"]["total_bytes"]
    recent = health["recent"]
    for _ in range(50):  # the stream's end is recorded when the server notices the client left
        if recent and recent[0]["finish"] == "cancelled":
            break
        recent = http.get("/health").json()["recent"]
    assert recent[0]["finish"] == "cancelled" and recent[0]["completion_tokens"] is None
    done = recent[1]
    # the access record keeps the neutral reasons: end (the model ended its turn), stop, length
    assert done["model"] == "tiny-chatml" and done["finish"] in ("end", "stop", "length")
    assert (done["prompt_tokens"], done["completion_tokens"]) == (usage["prompt_tokens"], usage["completion_tokens"])
    assert done["seconds"] >= 0 and done["started"] <= recent[0]["started"]


def open_page(url: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`localchat open` with a stand-in browser ($BROWSER) that writes down the address it gets."""
    seen = tmp_path / "opened"
    browser = tmp_path / "browser"
    browser.write_text(f"#!/bin/sh\necho \"$1\" > {seen}\n")
    browser.chmod(0o755)
    done = subprocess.run([sys.executable, "-m", "localchat", "open", "--url", url], capture_output=True, text=True,
                          env={**os.environ, "BROWSER": str(browser)}, timeout=60)
    return done, seen


@pytest.mark.skipif(sys.platform == "win32", reason="a shell script stands in for the browser")
def test_open_opens_the_page(tiny: Server, tmp_path: Path):
    done, seen = open_page(tiny.url + "/v1", tmp_path)
    assert done.returncode == 0, done.stderr
    assert seen.read_text().strip() == tiny.url + "/"


def test_open_without_a_server_says_how_to_start_one(tmp_path: Path):
    done, seen = open_page(f"http://127.0.0.1:{free_port()}", tmp_path)
    assert done.returncode == 1 and "localchat serve" in done.stderr and not seen.exists()


@pytest.fixture(scope="module")
def no_page(registry_file: Path) -> Iterator[Server]:
    s = Server(registry_file, "--model", "tiny-chatml", "--no-webui")
    yield s
    s.stop()


def test_no_webui_serves_no_page(no_page: Server, tmp_path: Path):
    s = no_page
    for path in ("/", "/ui/app.css", "/ui/js/main.js"):
        assert httpx.get(s.url + path).status_code == 404, path
    assert httpx.post(s.url + "/v1/chat/completions", json=CHAT, timeout=60).status_code == 200
    assert "chat in your browser" not in s.output()
    done, seen = open_page(s.url, tmp_path)
    assert done.returncode == 1 and "--no-webui" in done.stderr and not seen.exists()


@pytest.fixture(scope="module")
def keyed(registry_file: Path) -> Iterator[Server]:
    s = Server(registry_file, "--model", "tiny-chatml", "--api-key", KEY)
    yield s
    s.stop()


def test_with_a_key_the_page_is_public_and_the_apis_are_not(keyed: Server):
    page = httpx.get(keyed.url + "/")
    assert page.status_code == 200
    for path in page_files(page.text):
        assert httpx.get(keyed.url + path).status_code == 200, path
    origin = {"Origin": keyed.url}  # what the page's own requests carry
    assert httpx.get(keyed.url + "/v1/models", headers=origin).status_code == 401
    assert httpx.post(keyed.url + "/v1/chat/completions", json=CHAT, headers=origin).status_code == 401
    assert httpx.post(keyed.url + "/ui/app.css", json={}, headers=origin).status_code == 401  # only GET is public
    ok = httpx.post(keyed.url + "/v1/chat/completions", json=CHAT, timeout=60,
                    headers={**origin, "Authorization": f"Bearer {KEY}"})
    assert ok.status_code == 200


def test_the_pages_requests_pass_the_csrf_rules(http: httpx.Client, tiny: Server):
    """The page's POSTs are same-origin JSON with an Origin (the browser tests send them for real)."""
    r = http.post("/v1/chat/completions", json=CHAT, headers={"Origin": tiny.url, "Sec-Fetch-Site": "same-origin"})
    assert r.status_code == 200
