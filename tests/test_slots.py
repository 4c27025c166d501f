"""llama-server's slot routes (api/llamacpp/slots.py): GET /slots, and POST /slots/{id}?action=save,
restore, erase, whose files are the prompt store's (engine/cache/prompt_store.py). The fast part runs over
the scripted engine (the routes' checks, the 501s); the rest over a real server with a tiny model: a
slot saved, erased and restored serves the same prompt again from its cache, with the same tokens;
a torn, corrupt or another model's file is a 400 and never reaches llama.cpp."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import TINY_CTX, Server, same_greedy_tokens, serve_in_thread
from localchat.api import create_app
from localchat.engine.fake import FakeEngine
from localchat.engine.remote.upstream import Link, Peer
from localchat.errors import NotSupported
from localchat.generation import Chat, ModelHost
from localchat.models import ModelSpec, Registry, Settings

MODEL = "tiny-chatml"
# A prompt of a few hundred tokens (under the prompt store's SAVE_MIN: only the slot routes save it).
PROMPT = " ".join(f"line {i}: the sea." for i in range(12))


# -- the routes over the scripted engine ---------------------------------------------------------

@pytest.fixture(scope="module")
def fake(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Settings]]:
    settings = Settings(worker=False, slot_save_path=tmp_path_factory.mktemp("slots"))
    registry = Registry({"chatml": ModelSpec(name="chatml", path=tiny_models["chatml"], context_length=TINY_CTX,
                                             parallel=2)}, "chatml", settings=settings)
    host = ModelHost(registry, engine=lambda path, *, n_ctx, parallel, name, **_: FakeEngine(
        lambda request, i: ["Hi"], n_ctx=n_ctx, parallel=parallel, name=name))
    for url in serve_in_thread(create_app(Chat(host), webui=False)):
        yield url, settings
    host.close()


def error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    return r.json()["error"]


@pytest.mark.fast
def test_slots_are_listed_once_the_model_is_loaded(fake: tuple[str, Settings]):
    url, _ = fake
    r = httpx.get(url + "/slots")
    assert r.status_code == 200 and r.json() == []  # nothing loaded yet: no slots
    assert httpx.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}).status_code == 200
    slots = httpx.get(url + "/slots", params={"model": "chatml"}).json()
    assert [s["id"] for s in slots] == [0, 1]
    assert all(s["n_ctx"] == TINY_CTX and s["is_processing"] is False and s["n_prompt_tokens"] == 0
               and "id_task" in s for s in slots)
    error(httpx.get(url + "/slots", params={"model": "nope"}), 404)


@pytest.mark.fast
def test_slot_actions_are_checked_before_the_engine(fake: tuple[str, Settings]):
    url, _ = fake
    for name in ("../x", "a/b", "a\\b", "..", ".", "", " x", "x.", "a\x01b", "x" * 256):
        e = error(httpx.post(url + "/slots/0?action=save", json={"filename": name}), 400)
        assert e["param"] == "filename" and e["message"].startswith("filename:"), (name, e)
    assert error(httpx.post(url + "/slots/0?action=restore", json={}), 400)["param"] == "filename"
    assert error(httpx.post(url + "/slots/0?action=restore", json={"filename": 3}), 400)["param"] == "filename"
    assert error(httpx.post(url + "/slots/x?action=erase"), 400)["param"] == "id_slot"
    assert error(httpx.post(url + "/slots/0?action=nap"), 400)["param"] == "action"
    assert error(httpx.post(url + "/slots/0"), 400)["param"] == "action"


@pytest.mark.fast
def test_a_scripted_model_refuses_slot_actions_and_without_a_folder_they_are_not_supported(
        fake: tuple[str, Settings], monkeypatch: pytest.MonkeyPatch):
    url, settings = fake
    e = error(httpx.post(url + "/slots/0?action=save", json={"filename": "a.bin"}), 501)
    assert e["type"] == "not_supported_error" and "not supported for this model" in e["message"], e
    monkeypatch.setattr(settings, "slot_save_path", None)
    for action in ("save", "restore", "erase"):
        e = error(httpx.post(url + f"/slots/0?action={action}", json={"filename": "a.bin"}), 501)
        assert e["type"] == "not_supported_error"
        assert e["message"].startswith("This server does not support slots action."), e


@pytest.mark.fast
def test_a_model_that_runs_upstream_refuses_slots():
    link = Link(Peer("http://127.0.0.1:9", "m"), "big", httpx.Client())
    try:
        for call in (link.slots(), link.slot_action("save", 0, "/tmp/x.bin")):
            with pytest.raises(NotSupported, match="not supported for this model: big runs upstream"):
                asyncio.run(call)
    finally:
        link.close()


# -- a real server -------------------------------------------------------------------------------

def ask(url: str, **extra) -> dict:
    r = httpx.post(url + "/v1/chat/completions", timeout=300, json={
        "model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 4, "temperature": 0,
        "logprobs": True, "top_logprobs": 2, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def slots(url: str, **params) -> list[dict]:
    r = httpx.get(url + "/slots", params={"model": MODEL, **params})
    assert r.status_code == 200, r.text
    return r.json()


def act(url: str, slot: int, action: str, filename: str | None = None, model: str = MODEL) -> httpx.Response:
    return httpx.post(url + f"/slots/{slot}", params={"action": action, "model": model}, timeout=120,
                      json={"filename": filename} if filename is not None else None)


@pytest.fixture(scope="module")
def real(registry_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    folder = tmp_path_factory.mktemp("slot-files")
    prompts = tmp_path_factory.mktemp("prompt-store")  # the automatic store: empty, and this module's own
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCALCHAT_PROMPT_CACHE_DIR", str(prompts))
        server = Server(registry_file, "--model", MODEL, "--parallel", "2", "--slot-save-path", str(folder))
    yield server, folder
    alive = server.proc.poll() is None
    server.stop()
    assert alive, "the server died during the tests"


def test_a_slot_saved_erased_and_restored_serves_its_prompt_again(real: tuple[Server, Path]):
    server, folder = real
    url = server.url
    cold = ask(url)
    prompt_tokens = cold["usage"]["prompt_tokens"]
    assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    (held,) = [s for s in slots(url) if s["n_prompt_tokens"]]
    assert held["n_prompt_tokens"] >= prompt_tokens and held["is_processing"] is False and held["id_task"] >= 1

    r = act(url, held["id"], "save", "a.bin")
    assert r.status_code == 200, r.text
    saved = r.json()
    assert saved["id_slot"] == held["id"] and saved["filename"] == "a.bin"
    assert saved["n_saved"] == held["n_prompt_tokens"]
    assert saved["n_written"] == (folder / "a.bin").stat().st_size and saved["timings"]["save_ms"] >= 0

    for s in slots(url):
        r = act(url, s["id"], "erase")
        assert r.status_code == 200 and r.json() == {"id_slot": s["id"], "n_erased": s["n_prompt_tokens"]}
    assert all(s["n_prompt_tokens"] == 0 for s in slots(url))

    other = 1 - held["id"]  # restored into the other slot: the cells go wherever they are put
    r = act(url, other, "restore", "a.bin")
    assert r.status_code == 200, r.text
    restored = r.json()
    assert restored["id_slot"] == other and restored["n_restored"] == saved["n_saved"]
    assert restored["n_read"] == saved["n_written"] and restored["timings"]["restore_ms"] >= 0
    assert [s["n_prompt_tokens"] for s in slots(url)][other] == saved["n_saved"]

    warm = ask(url)
    usage = warm["usage"]
    assert usage["prompt_tokens"] == prompt_tokens
    assert usage["prompt_tokens_details"]["cached_tokens"] == prompt_tokens - 1  # only the last token is read
    same_greedy_tokens(cold, warm)
    assert f"POST /slots/{other} 200 model={MODEL}" in server.output()  # the access log has each action


def test_bad_files_are_refused_and_the_server_still_serves(real: tuple[Server, Path]):
    server, folder = real
    url = server.url
    ask(url)
    (held,) = [s for s in slots(url) if s["n_prompt_tokens"]][:1]
    assert act(url, held["id"], "save", "good.bin").status_code == 200
    data = (folder / "good.bin").read_bytes()
    flipped = bytearray(data)
    flipped[-100] ^= 0xFF  # inside the cells: the checksum fails
    bad = {"flipped.bin": bytes(flipped), "torn.bin": data[:-10], "garbage.bin": b"\x00" * 300,
           "empty.bin": b""}
    for name, content in bad.items():
        (folder / name).write_bytes(content)
    for name, why in (("flipped.bin", "checksum"), ("torn.bin", "torn"), ("garbage.bin", "not a localchat"),
                      ("empty.bin", "not a localchat"), ("missing.bin", "no file")):
        e = error(act(url, held["id"], "restore", name), 400)
        assert e["param"] == "filename" and why in e["message"], (name, e)
    e = error(act(url, held["id"], "restore", "../good.bin"), 400)
    assert e["param"] == "filename"
    e = error(act(url, 7, "erase"), 400)
    assert e["param"] == "id_slot"
    assert server.proc.poll() is None
    again = ask(url)  # the server serves, and the slot kept its cache (a refused restore touches nothing)
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == again["usage"]["prompt_tokens"] - 1


def test_a_file_saved_with_another_model_is_refused(real: tuple[Server, Path]):
    server, folder = real
    url = server.url
    r = act(url, 0, "save", "llama3.bin", model="tiny-llama3")  # another model file (an empty slot saves too)
    assert r.status_code == 200, r.text
    assert r.json()["n_saved"] == 0
    e = error(act(url, 0, "restore", "llama3.bin"), 400)
    assert e["param"] == "filename" and "another model file" in e["message"], e
    assert ask(url)["choices"][0]["message"]["content"] is not None


def test_a_busy_slot_is_refused(real: tuple[Server, Path]):
    server, _ = real
    url = server.url
    # busy for all of its 1500 tokens: neither drafts (a greedy loop is drafted 64 tokens a step) nor
    # the loop stop end it early
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 1500, "ignore_eos": True, "stream": True,
            "ngram_draft": 0, "repetition_stop": 0, "temperature": 0}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=300) as stream:
        lines = stream.iter_lines()
        next(line for line in lines if line.startswith("data:"))  # it generates
        (busy,) = [s for s in slots(url) if s["is_processing"]]
        e = error(act(url, busy["id"], "erase"), 409)
        assert e["param"] == "id_slot" and e["code"] == "slot_busy" and "processing" in e["message"]
        e = error(act(url, busy["id"], "save", "busy.bin"), 409)
    assert server.proc.poll() is None


def test_slot_actions_in_process(registry_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The same actions with llama.cpp in the server's own process (serve --in-process)."""
    monkeypatch.setenv("LOCALCHAT_PROMPT_CACHE_DIR", str(tmp_path / "prompts"))
    server = Server(registry_file, "--model", MODEL, "--parallel", "1", "--in-process",
                    "--slot-save-path", str(tmp_path / "slots"))
    try:
        url = server.url
        n = ask(url)["usage"]["prompt_tokens"]
        (slot,) = slots(url)
        assert act(url, 0, "save", "a.bin").json()["n_saved"] == slot["n_prompt_tokens"] >= n
        assert act(url, 0, "erase").json()["n_erased"] == slot["n_prompt_tokens"]
        assert act(url, 0, "restore", "a.bin").json()["n_restored"] == slot["n_prompt_tokens"]
        assert ask(url)["usage"]["prompt_tokens_details"]["cached_tokens"] == n - 1
        assert error(act(url, 1, "erase"), 400)["param"] == "id_slot"
        assert server.proc.poll() is None
    finally:
        server.stop()
