"""Images by URL: `http(s)://` fetched only with `fetch_images`, within `max_media_bytes` and
`media_timeout`, never blocking the server; `file://` read only under `media_folder` (symbolic
links out of it refused). A loopback HTTP server stands in for the web: nothing here reaches
the network."""

from __future__ import annotations

import http.server
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import pytest

from conftest import Server, shipped
from localchat.errors import InvalidRequest
from localchat.generation.fetch import load_url
from localchat.models import Settings
from test_vision import ask, logprobs, png, uri

SMALL = png(21, (16, 12))  # under the servers' max_media_bytes (4096) below
OTHER = png(22, (16, 12))
BIG = png(23, (64, 64))  # over it


class Web:
    """A loopback HTTP server: /cat.png, /other.png, /big.png, /moved (→ /cat.png), /missing (404),
    /slow (answers after 3 s), /hold (answers once `release` is set; `arrived` says it was asked)."""

    def __init__(self) -> None:
        self.arrived, self.release = threading.Event(), threading.Event()
        web = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                files = {"/cat.png": SMALL, "/other.png": OTHER, "/big.png": BIG}
                if self.path == "/moved":
                    self.send_response(302)
                    self.send_header("Location", "/cat.png")
                    self.end_headers()
                    return
                if self.path == "/slow":
                    time.sleep(3)
                if self.path == "/hold":
                    web.arrived.set()
                    web.release.wait(60)
                body = files.get(self.path, SMALL if self.path in ("/slow", "/hold") else None)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def web() -> Iterator[Web]:
    w = Web()
    yield w
    w.close()


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The media folder: cat.png, a link inside it to a file outside, and that file."""
    root = tmp_path_factory.mktemp("media-root")
    folder = root / "media"
    folder.mkdir()
    (folder / "cat.png").write_bytes(SMALL)
    (root / "secret.png").write_bytes(OTHER)
    os.symlink(root / "secret.png", folder / "link.png")
    return folder


@pytest.fixture(scope="module")
@shipped
def fetching(registry_file: Path, media: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server that fetches images, with a media folder, a small max_media_bytes and a long
    media_timeout (a fetch blocked for all of it would hold the event loop that long)."""
    config = tmp_path_factory.mktemp("fetching") / "models.toml"
    config.write_text(f'fetch_images = true\nmedia_folder = "{media}"\nmax_media_bytes = 4096\n'
                      f"media_timeout = 60\n{registry_file.read_text()}")
    s = Server(config)
    yield s
    s.stop()


def answer(server: Server, url: str, **extra: object) -> httpx.Response:
    body = ask("What is it?", url, cache_prompt=False, **extra)  # decoded cold: logprobs comparable
    return httpx.post(server.url + "/v1/chat/completions", json=body, timeout=120)


def test_an_image_by_http_url_is_the_image(fetching: Server, web: Web):
    by_data = answer(fetching, uri(SMALL)).json()
    for path in ("/cat.png", "/moved"):  # a redirect is followed
        by_url = answer(fetching, web.url + path)
        assert by_url.status_code == 200, by_url.text
        assert by_url.json()["usage"]["prompt_tokens"] == by_data["usage"]["prompt_tokens"]
        assert _same(by_url.json(), by_data)
    assert not _same(answer(fetching, web.url + "/other.png").json(), by_data)  # the pixels fetched matter


def _same(a: dict, b: dict) -> bool:
    return all(x[0] == y[0] and abs(x[1] - y[1]) < 1e-3 for x, y in zip(logprobs(a), logprobs(b), strict=True))


@pytest.mark.parametrize("path, words", [("/missing", "HTTP 404"), ("/big.png", "max_media_bytes")])
def test_a_url_that_cannot_be_used_is_a_400_naming_it(fetching: Server, web: Web, path: str, words: str):
    r = answer(fetching, web.url + path)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "messages.0.content.1.image_url.url" and words in error["message"]


def test_a_fetch_never_blocks_the_server(fetching: Server, web: Web):
    """While one request waits for its image, the server answers others."""
    done = threading.Event()
    result: list[httpx.Response] = []

    def slow() -> None:
        result.append(answer(fetching, web.url + "/hold"))
        done.set()

    thread = threading.Thread(target=slow)
    thread.start()
    try:
        assert web.arrived.wait(60)
        assert httpx.get(fetching.url + "/health", timeout=60).status_code == 200
        plain = httpx.post(fetching.url + "/v1/chat/completions", json=ask("Hi"), timeout=60)
        assert plain.status_code == 200
        assert not done.is_set()  # … all while the image was still on its way
    finally:
        web.release.set()
        thread.join(120)
    assert result and result[0].status_code == 200, result[0].text if result else "no answer"


def test_fetch_limits_without_a_server(web: Web):
    """load_url itself, against the loopback server: the timeout, the size limit, the switch."""
    settings = Settings(fetch_images=True, media_timeout=1, max_media_bytes=4096)
    assert load_url(web.url + "/cat.png", "p", settings) == SMALL
    for path, limits, words in (("/slow", settings, "media_timeout"), ("/big.png", settings, "max_media_bytes"),
                                ("/cat.png", Settings(), "fetch_images")):
        with pytest.raises(InvalidRequest) as info:
            load_url(web.url + path, "messages.0.content.1.image_url.url", limits)
        assert info.value.param == "messages.0.content.1.image_url.url" and words in info.value.message


def test_file_urls_only_under_the_media_folder(fetching: Server, media: Path):
    by_data = answer(fetching, uri(SMALL)).json()
    inside = answer(fetching, (media / "cat.png").as_uri())
    assert inside.status_code == 200, inside.text
    assert _same(inside.json(), by_data)
    for url, words in ((f"file://{media}/../secret.png", "outside the media folder"),
                       ((media.parent / "secret.png").as_uri(), "outside the media folder"),
                       ((media / "link.png").as_uri(), "outside the media folder"),  # a link out of it
                       ((media / "nope.png").as_uri(), "no such file"),
                       ("file://otherhost/x.png", "absolute path"),
                       ("file:///etc/passwd", "outside the media folder")):
        r = answer(fetching, url)
        assert r.status_code == 400, (url, r.text)
        assert r.json()["error"]["param"] == "messages.0.content.1.image_url.url" and words in r.json()["error"]["message"]


def test_urls_on_the_other_protocols(fetching: Server, web: Web):
    """Anthropic's `{type: url}` image source and Responses' input_image URL are fetched too:
    the prompt is the one the same image makes as a data: URI."""
    expected = answer(fetching, uri(SMALL)).json()["usage"]["prompt_tokens"]
    client = anthropic.Anthropic(base_url=fetching.url, api_key="unused", max_retries=0)
    message = client.messages.create(model="tiny-vision", max_tokens=2, messages=[{"role": "user", "content": [
        {"type": "text", "text": "What is it?"}, {"type": "image", "source": {"type": "url", "url": web.url + "/cat.png"}}]}])
    assert message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) == expected
    r = httpx.post(fetching.url + "/v1/responses", timeout=60, json={
        "model": "tiny-vision", "max_output_tokens": 2, "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "What is it?"}, {"type": "input_image", "image_url": web.url + "/cat.png"}]}]})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["input_tokens"] == expected
    bad = httpx.post(fetching.url + "/v1/messages", timeout=60, json={
        "model": "tiny-vision", "max_tokens": 2, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": web.url + "/missing"}}]}]})
    assert bad.status_code == 400 and bad.json()["error"]["message"].startswith("messages.0.content.0.source.url: ")


def test_images_are_not_fetched_by_default(http: httpx.Client, web: Web):
    """The session's server has neither fetch_images nor a media folder."""
    for url, words in ((web.url + "/cat.png", "fetch_images"), (f"file://{Path.cwd()}/x.png", "media_folder")):
        r = http.post("/v1/chat/completions", json=ask("Look:", url))
        assert r.status_code == 400 and words in r.json()["error"]["message"], r.text
