"""`localchat pull` and Ollama's /api/pull and /api/delete, against a local stand-in for the
Hugging Face Hub (fakehub.py) serving tiny real GGUF files. No real network host is reached: the
hub is HF_ENDPOINT, Xet is off, and every other host goes through a proxy that does not exist."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import openai
import pytest

from conftest import Server
from fakehub import FakeHub, Served
from localchat.families import FAMILIES
from test_repl import STATS, Chat
from localchat.devtools.tinymodels import write_tiny_mmproj, write_tiny_model

MiB = 1 << 20
CHUNK = 10 * MiB  # huggingface_hub writes a download to disk 10 MiB at a time


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("hubfiles")
    chatml = FAMILIES["chatml"]
    split = write_tiny_model(d / "Split-Q4_K_M.gguf", chatml, n_ctx=4096, split_tensors=10)
    return {"q4": write_tiny_model(d / "q4.gguf", chatml, n_ctx=4096),
            "q8": write_tiny_model(d / "q8.gguf", chatml, n_ctx=4096, seed=1),
            "mmproj": write_tiny_mmproj(d / "mmproj.gguf"),  # a tiny vision projector: the pulled model loads it
            "big": write_tiny_model(d / "big.gguf", chatml, n_ctx=4096, padding=12 * MiB),
            **{f"split{i}": p for i, p in enumerate(sorted(split.parent.glob("Split-Q4_K_M-*.gguf")), 1)}}


@pytest.fixture
def hub(files: dict[str, Path]) -> Iterator[FakeHub]:
    h = FakeHub().start()
    h.add("me/Tiny-GGUF", {"README.md": b"# tiny", "Tiny-Q8_0.gguf": files["q8"], "Tiny-Q4_K_M.gguf": files["q4"],
                           "mmproj-Tiny-F16.gguf": files["mmproj"]})
    h.add("me/Split-GGUF", {f"Q4_K_M/Split-Q4_K_M-0000{i}-of-00003.gguf": files[f"split{i}"] for i in (1, 2, 3)})
    h.add("me/Big-GGUF", {"Big-Q4_K_M.gguf": Served(files["big"].read_bytes(), cut_after=CHUNK + MiB)})
    h.add("me/Stall-GGUF", {"Stall-Q4_K_M.gguf": Served(files["big"].read_bytes(), stall_after=CHUNK + MiB)})
    h.add("me/Broken-GGUF", {"Broken-Q4_K_M.gguf": b"this is not a GGUF file" * 100})
    h.add("me/Corrupt-GGUF", {"Corrupt-Q4_K_M.gguf": Served(files["q4"].read_bytes(), corrupt=True)})
    h.add("me/Gated-GGUF", {"Gated-Q4_K_M.gguf": files["q4"]}, gated=True)
    yield h
    h.stop()


@pytest.fixture
def env(hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment of a pull: this hub, a fresh Hugging Face cache and registry, no token."""
    values = {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_XET": "1",
              "HF_HUB_DISABLE_TELEMETRY": "1", "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
              "NO_PROXY": "127.0.0.1,localhost", "LOCALCHAT_CONFIG_DIR": str(tmp_path / "config"),
              "LOCALCHAT_DATA_DIR": str(tmp_path / "data"), "COLUMNS": "200"}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return {**os.environ}


def pull(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "localchat", "pull", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def registry(env: dict[str, str]) -> dict:
    file = Path(env["LOCALCHAT_CONFIG_DIR"]) / "models.toml"
    return tomllib.loads(file.read_text()).get("models", {}) if file.exists() else {}


def test_pull_takes_the_default_quant_and_its_mmproj(env: dict[str, str], hub: FakeHub, files: dict[str, Path]):
    r = pull(env, "me/Tiny-GGUF")
    assert r.returncode == 0, r.stderr
    assert "pulled tiny" in r.stdout and "from hf.co/me/Tiny-GGUF:Q4_K_M" in r.stdout
    assert "Tiny-Q4_K_M.gguf" in r.stdout and "529.4/529.4 kB" in r.stdout  # the progress bar
    entry = registry(env)["tiny"]
    cache = Path(env["HF_HOME"]) / "hub" / "models--me--Tiny-GGUF" / "snapshots"
    assert Path(entry["path"]).parent.parent == cache and entry["path"].endswith("/Tiny-Q4_K_M.gguf")
    assert Path(entry["path"]).read_bytes() == files["q4"].read_bytes()
    assert entry["mmproj"].endswith("/mmproj-Tiny-F16.gguf") and Path(entry["mmproj"]).is_file()
    assert entry["source"] == "hf.co/me/Tiny-GGUF:Q4_K_M"
    assert entry["aliases"] == ["hf.co/me/Tiny-GGUF:Q4_K_M", "me/Tiny-GGUF"]  # the names it was pulled by
    assert hub.gets("Tiny-Q8_0.gguf") == [] and len(hub.gets("Tiny-Q4_K_M.gguf")) == 1
    again = pull(env, "hf.co/me/Tiny-GGUF:q4_k_m")  # the same model: nothing downloaded again
    assert again.returncode == 0, again.stderr
    assert len(hub.gets("Tiny-Q4_K_M.gguf")) == 1
    assert registry(env)["tiny"] == {**entry, "aliases": [*entry["aliases"], "hf.co/me/Tiny-GGUF:q4_k_m"]}
    r = pull(env, f"{hub.url}/me/Tiny-GGUF/resolve/main/Tiny-Q8_0.gguf", "--name", "tiny-q8")  # a URL on the hub
    assert r.returncode == 0, r.stderr
    assert registry(env)["tiny-q8"]["path"].endswith("/Tiny-Q8_0.gguf") and registry(env)["tiny-q8"]["mmproj"]
    listing = subprocess.run([sys.executable, "-m", "localchat", "models"], env=env, capture_output=True, text=True)
    assert any("tiny-q8" in line and "present" in line for line in listing.stdout.splitlines())


def test_a_dropped_connection_resumes_where_it_stopped(env: dict[str, str], hub: FakeHub, files: dict[str, Path]):
    r = pull(env, "me/Big-GGUF")
    assert r.returncode == 0, r.stderr
    assert "resuming Big-Q4_K_M.gguf" in r.stdout
    assert hub.gets("Big-Q4_K_M.gguf") == [None, f"bytes={CHUNK}-"]  # the second GET asks only for the rest
    assert Path(registry(env)["big"]["path"]).read_bytes() == files["big"].read_bytes()


def test_a_gguf_at_a_url_resumes_too(env: dict[str, str], files: dict[str, Path]):
    elsewhere = FakeHub().start()  # another host: a plain file server, not the hub
    try:
        elsewhere.add("files/x", {"big-q4_k_m.gguf": Served(files["big"].read_bytes(), cut_after=CHUNK + MiB)})
        url = f"{elsewhere.url}/files/x/resolve/main/big-q4_k_m.gguf"
        r = pull(env, url)
        assert r.returncode == 0, r.stderr
        assert elsewhere.gets("big-q4_k_m.gguf") == [None, f"bytes={CHUNK}-"]
        entry = registry(env)["big-q4_k_m"]
        assert entry["source"] == url and Path(entry["path"]).read_bytes() == files["big"].read_bytes()
        assert Path(entry["path"]).is_relative_to(Path(env["LOCALCHAT_DATA_DIR"]) / "models")
    finally:
        elsewhere.stop()


def test_ctrl_c_registers_nothing_and_the_next_pull_resumes(env: dict[str, str], hub: FakeHub, files: dict[str, Path]):
    p = subprocess.Popen([sys.executable, "-m", "localchat", "pull", "me/Stall-GGUF"], env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    blobs = Path(env["HF_HOME"]) / "hub" / "models--me--Stall-GGUF" / "blobs"
    deadline = time.monotonic() + 60
    while not [f for f in blobs.glob("*.incomplete") if f.stat().st_size >= CHUNK] and time.monotonic() < deadline:
        time.sleep(0.1)  # the server has sent 11 MiB and waits; 10 MiB of it are on disk
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 1 and "interrupted: nothing was registered; pull again to resume" in err, err
    assert "stall" not in registry(env)
    assert [f.stat().st_size for f in blobs.glob("*.incomplete")] == [CHUNK]
    hub.repos["me/Stall-GGUF"].files["Stall-Q4_K_M.gguf"].stall_after = None
    r = pull(env, "me/Stall-GGUF")
    assert r.returncode == 0, r.stderr
    assert hub.gets("Stall-Q4_K_M.gguf") == [None, f"bytes={CHUNK}-"]
    assert Path(registry(env)["stall"]["path"]).read_bytes() == files["big"].read_bytes()


def test_a_missing_quant_lists_the_repositorys_quants(env: dict[str, str]):
    r = pull(env, "me/Tiny-GGUF:Q5_K_S")
    assert r.returncode == 1 and "me/Tiny-GGUF has no Q5_K_S file; its quantizations: Q4_K_M, Q8_0" in r.stderr
    assert "Traceback" not in r.stderr and registry(env) == {}
    assert "no repository me/Nothing-GGUF" in pull(env, "me/Nothing-GGUF").stderr
    assert "not something to pull" in pull(env, "llama3.2").stderr


@pytest.mark.parametrize("repo, message", [("me/Broken-GGUF", "Broken-Q4_K_M.gguf is not a usable GGUF file"),
                                           ("me/Corrupt-GGUF", "arrived corrupt (its sha256 is not the hub's)")])
def test_a_corrupt_file_is_refused_and_nothing_registered(env: dict[str, str], repo: str, message: str):
    r = pull(env, repo)
    assert r.returncode == 1 and message in r.stderr, r.stderr
    assert registry(env) == {}
    cache = Path(env["HF_HOME"]) / "hub" / f"models--{repo.replace('/', '--')}"
    assert not [f for f in cache.rglob("*") if f.is_file() and f.parent.name in ("blobs", "snapshots")]


def test_a_gated_repo_needs_a_token(env: dict[str, str], hub: FakeHub):
    r = pull(env, "me/Gated-GGUF")
    assert r.returncode == 1 and "me/Gated-GGUF is gated: accept its terms at" in r.stderr
    assert "HF_TOKEN" in r.stderr and registry(env) == {}
    assert "gated and your token (HF_TOKEN or `hf auth login`) has no access" in \
        pull({**env, "HF_TOKEN": "hf_other"}, "me/Gated-GGUF").stderr
    r = pull({**env, "HF_TOKEN": "hf_allowed"}, "me/Gated-GGUF")
    assert r.returncode == 0, r.stderr
    assert ("GET", "/me/Gated-GGUF/resolve/main/Gated-Q4_K_M.gguf", None, "Bearer hf_allowed") in hub.requests


def test_pull_a_split_model_then_chat_with_it(env: dict[str, str], tmp_path: Path, registry_file: Path):
    r = pull(env, "me/Split-GGUF", "--name", "tiny-split")
    assert r.returncode == 0, r.stderr
    entry = registry(env)["tiny-split"]
    assert entry["path"].endswith("/Q4_K_M/Split-Q4_K_M-00001-of-00003.gguf")  # kept split: llama.cpp loads all 3
    assert all((Path(entry["path"]).parent / f"Split-Q4_K_M-0000{i}-of-00003.gguf").is_file() for i in (2, 3))
    chat = Chat("--config", str(registry_file), "--model", "tiny-split", home=tmp_path)
    try:
        chat.say("/set max_tokens 5")
        chat.ask("hello")
        chat.wait(STATS)
        chat.ready()
        assert "tiny-split" in chat.say("/show")
    finally:
        chat.close()


@pytest.mark.real  # its server loads the shipped default
def test_ollamas_pull_and_delete(env: dict[str, str], hub: FakeHub, registry_file: Path):
    s = Server(registry_file)
    try:
        client = ollama.Client(host=s.url)
        events = list(client.pull("hf.co/me/Tiny-GGUF:Q8_0", stream=True))
        assert events[0].status == "pulling manifest" and events[-1].status == "success"
        progress = [e for e in events if e.status == "pulling Tiny-Q8_0.gguf"]
        assert progress and progress[-1].completed == progress[-1].total == len(hub.repos["me/Tiny-GGUF"].files[
            "Tiny-Q8_0.gguf"].data)
        assert "tiny" in [m.model for m in client.list().models]  # the server sees it at once
        answer = openai.OpenAI(base_url=s.url + "/v1", api_key="x").chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=3, seed=1)
        assert answer.choices[0].finish_reason in ("stop", "length")
        again = client.chat(model="hf.co/me/Tiny-GGUF:Q8_0", messages=[{"role": "user", "content": "hi"}],
                            options={"num_predict": 2, "seed": 1})  # the name it was pulled by names it too
        assert again.done and again.model == "hf.co/me/Tiny-GGUF:Q8_0"
        assert client.pull("me/Tiny-GGUF:Q8_0", stream=False).status == "success"  # again: already there
        with pytest.raises(ollama.ResponseError, match="its quantizations: Q4_K_M, Q8_0"):
            list(client.pull("hf.co/me/Tiny-GGUF:Q2_K", stream=True))
        with pytest.raises(ollama.ResponseError) as gated:
            client.pull("me/Gated-GGUF", stream=False)
        assert gated.value.status_code == 403 and "gated" in gated.value.error
        client.delete("tiny")
        assert "tiny" not in [m.model for m in client.list().models]
        assert registry(env) == {}
        r = httpx.request("DELETE", s.url + "/api/delete", json={"model": "tiny"})
        assert r.status_code == 404 and "tiny" in r.json()["error"]
        r = httpx.request("DELETE", s.url + "/api/delete", json={"model": "gemma-3-270m"})
        assert r.status_code == 400 and "shipped model" in r.json()["error"]
    finally:
        s.stop()


@pytest.mark.real  # its server loads the shipped default
def test_a_client_that_leaves_stops_the_pull_and_the_next_resumes(env: dict[str, str], hub: FakeHub,
                                                                    registry_file: Path):
    s = Server(registry_file)
    try:
        with httpx.stream("POST", s.url + "/api/pull", json={"model": "me/Stall-GGUF"}, timeout=60) as r:
            for line in r.iter_lines():  # until 10 MiB are on the server's disk; then the hub stalls
                if '"completed":' in line and int(line.split('"completed":')[1].split("}")[0]) >= CHUNK:
                    break
        hub.repos["me/Stall-GGUF"].files["Stall-Q4_K_M.gguf"].stall_after = None
        hub.release.set()  # the stalled download breaks off; it resumes, finds its client gone, and stops
        deadline = time.monotonic() + 30
        while len(hub.gets("Stall-Q4_K_M.gguf")) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2)  # were it not stopped, that download would be over and registered by now
        assert hub.gets("Stall-Q4_K_M.gguf") == [None, f"bytes={CHUNK}-"] and "stall" not in registry(env)
        done = httpx.post(s.url + "/api/pull", json={"model": "me/Stall-GGUF", "stream": False}, timeout=120)
        assert done.status_code == 200 and done.json() == {"status": "success"}
        assert hub.gets("Stall-Q4_K_M.gguf") == [None, f"bytes={CHUNK}-", f"bytes={CHUNK}-"]  # resumed again
        assert "stall" in registry(env)
    finally:
        s.stop()
