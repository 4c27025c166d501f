"""Localhost safety: browser requests from foreign pages are refused before any work (CSRF),
allowed origins keep CORS working, a non-loopback bind needs a key, and keys are checked."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from conftest import Server, free_port

HELLO = [{"role": "user", "content": "hello"}]
CHAT = {"model": "", "messages": HELLO, "max_tokens": 1}
KEY = "s3cret-key"


def _error(r: httpx.Response, status: int, kind: str) -> str:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["type"] == kind and err["message"]
    return err["message"]


@pytest.fixture(scope="module")
def web(registry_file: Path) -> Iterator[httpx.Client]:
    """A server with extra origins given both ways: repeated and comma-separated."""
    s = Server(registry_file, "--model", "tiny-chatml", "--cors-origins", "https://app.example",
               "--cors-origins", "https://b.example, http://192.168.1.5:3000/")
    try:
        with httpx.Client(base_url=s.url, timeout=60) as c:
            yield c
    finally:
        s.stop()


@pytest.fixture(scope="module")
def keyed(registry_file: Path) -> Iterator[Server]:
    s = Server(registry_file, "--model", "tiny-chatml", "--api-key", KEY)
    yield s
    s.stop()


# -- CSRF: refused before any work -------------------------------------------------------------

def test_foreign_origin_json_post_is_403(web: httpx.Client):
    message = _error(web.post("/v1/chat/completions", json=CHAT, headers={"Origin": "https://evil.example"}),
                     403, "permission_error")
    assert "https://evil.example" in message and "--cors-origins" in message


def test_foreign_origin_text_plain_simple_request_is_403(web: httpx.Client):
    """The CSRF hole: a cross-site form/fetch with no preflight used to be answered 200."""
    import json

    r = web.post("/v1/chat/completions", content=json.dumps(CHAT),
                 headers={"Origin": "https://evil.example", "Content-Type": "text/plain;charset=UTF-8"})
    _error(r, 403, "permission_error")
    assert "access-control-allow-origin" not in r.headers


def test_sec_fetch_site_cross_site_is_403(web: httpx.Client):
    # A no-cors subresource or navigation sends no Origin; the browser still marks it cross-site.
    message = _error(web.get("/v1/models", headers={"Sec-Fetch-Site": "cross-site"}), 403, "permission_error")
    assert "cross-site" in message
    _error(web.post("/v1/chat/completions", json=CHAT, headers={"Sec-Fetch-Site": "cross-site"}),
           403, "permission_error")
    assert web.get("/v1/models", headers={"Sec-Fetch-Site": "same-site"}).status_code == 200
    assert web.get("/v1/models", headers={"Sec-Fetch-Site": "none"}).status_code == 200


def test_foreign_origin_get_and_null_origin_are_403(web: httpx.Client):
    _error(web.get("/v1/models", headers={"Origin": "http://localhost.evil.example"}), 403, "permission_error")
    _error(web.get("/v1/models", headers={"Origin": "http://127.0.0.1.evil.example:8000"}), 403, "permission_error")
    assert "null" in _error(web.get("/v1/models", headers={"Origin": "null"}), 403, "permission_error")


def test_allowed_localhost_origin_with_json_is_200(web: httpx.Client):
    for origin in ("http://localhost:5173", "http://127.0.0.1:3000", "http://[::1]:8080", "https://localhost",
                   "vscode-webview://1abc2def"):
        r = web.post("/v1/chat/completions", json=CHAT, headers={"Origin": origin})
        assert r.status_code == 200, (origin, r.text)
        assert r.json()["choices"][0]["finish_reason"]
        assert r.headers["access-control-allow-origin"] == origin
        assert "access-control-allow-credentials" not in r.headers
    r = web.get("/v1/models", headers={"Origin": "http://localhost:5173"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://localhost:5173"


def test_allowed_origin_wins_over_sec_fetch_site(web: httpx.Client):
    # localhost:5173 → 127.0.0.1:port is cross-site to a browser, and allowed.
    r = web.post("/v1/chat/completions", json=CHAT,
                 headers={"Origin": "http://localhost:5173", "Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 200, r.text


def test_allowed_origin_must_still_send_json(web: httpx.Client):
    import json

    r = web.post("/v1/chat/completions", content=json.dumps(CHAT),
                 headers={"Origin": "http://localhost:5173", "Content-Type": "text/plain"})
    assert "application/json" in _error(r, 403, "permission_error")
    assert r.headers["access-control-allow-origin"] == "http://localhost:5173", "the page may read why"
    r = web.post("/v1/chat/completions", content=json.dumps(CHAT), headers={"Origin": "http://localhost:5173"})
    _error(r, 403, "permission_error")  # no Content-Type at all (a Blob body) is not JSON either
    r = web.post("/v1/chat/completions", content=json.dumps(CHAT),
                 headers={"Origin": "http://localhost:5173", "Content-Type": "application/json; charset=utf-8"})
    assert r.status_code == 200, r.text


def test_curl_style_clients_keep_working_with_any_content_type(web: httpx.Client):
    import json

    for kind in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"Content-Type": kind} if kind else {}
        r = web.post("/v1/chat/completions", content=json.dumps(CHAT), headers=headers)
        assert r.status_code == 200, (kind, r.text)
        assert r.json()["object"] == "chat.completion"


def test_preflight_from_allowed_origin_gets_cors_headers(web: httpx.Client):
    r = web.options("/v1/chat/completions", headers={
        "Origin": "http://localhost:5173", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, authorization, x-api-key"})
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] == "http://localhost:5173"
    assert "POST" in r.headers["access-control-allow-methods"]
    assert "x-api-key" in r.headers["access-control-allow-headers"]
    assert "access-control-allow-credentials" not in r.headers


def test_preflight_from_foreign_origin_is_403(web: httpx.Client):
    r = web.options("/v1/chat/completions", headers={"Origin": "https://evil.example",
                                                     "Access-Control-Request-Method": "POST"})
    _error(r, 403, "permission_error")
    assert "access-control-allow-origin" not in r.headers


def test_cors_origins_adds_origins(web: httpx.Client):
    for origin in ("https://app.example", "https://b.example", "http://192.168.1.5:3000"):
        r = web.post("/v1/chat/completions", json=CHAT, headers={"Origin": origin, "Sec-Fetch-Site": "cross-site"})
        assert r.status_code == 200, (origin, r.text)
        assert r.headers["access-control-allow-origin"] == origin
        pre = web.options("/v1/chat/completions", headers={"Origin": origin, "Access-Control-Request-Method": "POST",
                                                           "Access-Control-Request-Private-Network": "true"})
        assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == origin
    # Exactly those: not another port, scheme or a longer name.
    for origin in ("https://app.example:8443", "http://app.example", "https://app.example.evil.example"):
        _error(web.post("/v1/chat/completions", json=CHAT, headers={"Origin": origin}), 403, "permission_error")


def test_loopback_host_headers_pass_and_others_do_not(web: httpx.Client):
    for host in ("localhost:8000", "127.0.0.2:8000", "[::1]:8000", "127.0.0.1"):
        assert web.get("/v1/models", headers={"Host": host}).status_code == 200, host
    _error(web.get("/v1/models", headers={"Host": "localhost.evil.example"}), 403, "permission_error")


def test_any_origin_star_is_allowed_without_credentials(registry_file: Path):
    s = Server(registry_file, "--model", "tiny-chatml", "--cors-origins", "*")
    try:
        assert "--cors-origins '*'" in s.output() and "WARNING" in s.output()
        r = httpx.post(s.url + "/v1/chat/completions", json=CHAT, headers={"Origin": "https://anywhere.example"})
        assert r.status_code == 200, r.text
        assert r.headers["access-control-allow-origin"] == "*"
        assert "access-control-allow-credentials" not in r.headers
        pre = httpx.options(s.url + "/v1/chat/completions", headers={"Origin": "https://anywhere.example",
                                                                      "Access-Control-Request-Method": "POST"})
        assert pre.headers["access-control-allow-origin"] == "*"
        assert "access-control-allow-credentials" not in pre.headers
        # Still no simple (preflight-free) requests from pages.
        r = httpx.post(s.url + "/v1/chat/completions", content=b"{}",
                       headers={"Origin": "https://anywhere.example", "Content-Type": "text/plain"})
        _error(r, 403, "permission_error")
    finally:
        s.stop()


# -- API keys ----------------------------------------------------------------------------------

def test_x_api_key_is_accepted(keyed: Server):
    r = httpx.post(keyed.url + "/v1/chat/completions", json=CHAT, headers={"x-api-key": KEY})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "tiny-chatml"


@pytest.mark.parametrize("headers", [
    {},
    {"x-api-key": "wrong"},
    {"x-api-key": KEY + "x"},
    {"x-api-key": KEY[:-1]},
    {"Authorization": f"Bearer {KEY}x"},
    {"Authorization": KEY},  # no scheme
    {"Authorization": f"Basic {KEY}"},
    {"x-api-key": b"\xff\xfe" * 40},  # odd bytes, another length: refused, never a crash
], ids=["none", "wrong", "longer", "shorter", "bearer-longer", "no-scheme", "basic", "odd-bytes"])
def test_wrong_or_missing_key_is_401(keyed: Server, headers: dict):
    r = httpx.post(keyed.url + "/v1/chat/completions", json=CHAT, headers=headers)
    message = _error(r, 401, "authentication_error")
    assert r.json()["error"]["code"] == "invalid_api_key"
    assert "Authorization: Bearer" in message and "x-api-key" in message
    assert _error(httpx.get(keyed.url + "/v1/models", headers=headers), 401, "authentication_error")


def test_bearer_is_still_accepted(keyed: Server):
    ok = openai.OpenAI(base_url=keyed.url + "/v1", api_key=KEY, max_retries=0)
    assert ok.chat.completions.create(model="", messages=HELLO, max_tokens=1).model == "tiny-chatml"
    assert httpx.get(keyed.url + "/v1/models", headers={"Authorization": f"bearer {KEY}"}).status_code == 200
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=keyed.url + "/v1", api_key="wrong", max_retries=0).models.list()


def test_health_is_public_with_a_key(keyed: Server):
    r = httpx.get(keyed.url + "/health")
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_preflight_needs_no_key_and_401_is_readable_by_allowed_pages(keyed: Server):
    pre = httpx.options(keyed.url + "/v1/chat/completions", headers={
        "Origin": "http://localhost:5173", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == "http://localhost:5173"
    r = httpx.post(keyed.url + "/v1/chat/completions", json=CHAT, headers={"Origin": "http://localhost:5173"})
    _error(r, 401, "authentication_error")
    assert r.headers["access-control-allow-origin"] == "http://localhost:5173"
    # The CSRF check comes first: a foreign page learns nothing about the key.
    _error(httpx.post(keyed.url + "/v1/chat/completions", json=CHAT,
                      headers={"Origin": "https://evil.example", "x-api-key": KEY}), 403, "permission_error")


# -- binding beyond loopback ------------------------------------------------------------------

def _serve(registry_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`localchat serve` that is expected to stop before serving anything."""
    env = {k: v for k, v in os.environ.items() if k not in ("LOCALCHAT_API_KEY", "LOCALCHAT_CORS_ORIGINS")}
    r = subprocess.run([sys.executable, "-m", "localchat", "serve", "--port", str(free_port()),
                        "--config", str(registry_file), *args], capture_output=True, text=True, timeout=60, env=env)
    r.stderr = " ".join(r.stderr.split())  # the error console wraps lines
    return r


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::"])
def test_non_loopback_host_without_a_key_is_refused(registry_file: Path, host: str):
    r = _serve(registry_file, "--host", host)
    assert r.returncode != 0
    assert "not a loopback address" in r.stderr and "--api-key" in r.stderr and "LOCALCHAT_API_KEY" in r.stderr
    assert "--insecure-no-key" in r.stderr
    assert "loading" not in r.stderr, "refused before loading anything"


def test_insecure_no_key_warns_and_goes_on(registry_file: Path):
    # An unknown model stops it right after the safety checks, before anything is bound or served.
    r = _serve(registry_file, "--host", "0.0.0.0", "--insecure-no-key", "--model", "no-such-model")
    assert "WARNING" in r.stderr and "without an API key" in r.stderr
    assert "not a loopback address" not in r.stderr
    assert r.returncode == 1 and "'no-such-model' does not exist" in r.stderr


def test_other_loopback_addresses_need_no_key(registry_file: Path):
    r = _serve(registry_file, "--host", "127.0.0.2", "--model", "no-such-model")
    assert r.returncode == 1 and "'no-such-model' does not exist" in r.stderr
    assert "loopback" not in r.stderr and "WARNING" not in r.stderr


def test_bad_cors_origin_is_refused(registry_file: Path):
    r = _serve(registry_file, "--cors-origins", "https://app.example/some/path")
    assert r.returncode == 1 and "is not an origin" in r.stderr and "https://app.example/some/path" in r.stderr
