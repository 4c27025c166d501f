"""What a registered model is and can do, from its GGUF file: the same answer in /v1/models,
/health, Ollama's /api/show and `localchat models`, before and after the model loads; a file
that is missing, not a GGUF or not fetched yet is described as such (and nothing is fetched)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import TINY_CTX, Server, shipped
from localchat.models import ModelSpec, describe as describe_module
from localchat.models.describe import Describer
from localchat.models import wheel

# what each tiny model can do, told by its file (conftest's registry)
EXPECTED = {
    "tiny-coder": ("chatml", ["completion", "tools", "fim"]),
    "tiny-embed": ("llama3", ["embedding"]),
    "tiny-reranker": ("chatml", ["rerank"]),
    "tiny-qwen3": ("chatml", ["completion", "tools", "reasoning"]),
    "tiny-vision": ("gemma", ["completion", "tools", "vision"]),
    "tiny-judge": ("chatml", ["completion", "tools", "rerank"]),
    "tiny-chatml": ("chatml", ["completion", "tools"]),
}


def spec(name: str, path: Path, **fields: Any) -> ModelSpec:
    return ModelSpec(name=name, path=path, context_length=TINY_CTX, **fields)


def test_capabilities_from_the_file(tiny_models: dict[str, Path]):
    describer = Describer()
    for name, (family, caps) in EXPECTED.items():
        if name in ("tiny-vision", "tiny-judge"):
            continue  # (their registry entries say more than the file: see the server test)
        d = describer.describe(spec(name, tiny_models[name.removeprefix("tiny-")]))
        assert (d.file, d.family, list(d.capabilities), d.reason) == ("present", family, caps, None), name
    embedding = describer.describe(spec("e", tiny_models["chatml"], embedding=True))
    assert embedding.capabilities == ("completion", "tools", "embedding")
    forced = describer.describe(spec("f", tiny_models["coder"], family="llama3"))
    assert forced.family == "llama3" and "fim" in forced.capabilities


def test_missing_unreadable_and_unfetched_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    describer = Describer()
    ghost = describer.describe(spec("ghost", tmp_path / "ghost.gguf", family="chatml"))
    assert (ghost.file, ghost.family, ghost.capabilities) == ("missing", "chatml", ())
    assert ghost.reason and "no file at" in ghost.reason
    (tmp_path / "notes.gguf").write_text("hello, not a model")
    bad = describer.describe(spec("bad", tmp_path / "notes.gguf"))
    assert (bad.file, bad.family, bad.capabilities) == ("invalid", None, ())
    assert bad.reason and "not a GGUF file" in bad.reason
    assert bad.card() == {"family": None, "capabilities": [], "file": "invalid", "reason": bad.reason}

    def no_fetching(*args: object) -> None:
        raise AssertionError("describing a model fetched it")

    monkeypatch.setenv("LOCALCHAT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(wheel, "fetch_parts", no_fetching)
    monkeypatch.setattr(wheel, "fetch", no_fetching)
    later = describer.describe(ModelSpec(name="later", parts=["some-part==1.0", "other-part==1.0"]))
    assert (later.file, later.capabilities) == ("on_demand", ())
    assert later.reason and "on first use" in later.reason and "localchat models pull later" in later.reason
    assert not (tmp_path / "cache").exists()


def test_a_header_is_read_once_per_version_of_the_file(tiny_models: dict[str, Path], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch):
    reads: list[Path] = []
    real = describe_module.inspect

    def counted(path: Path) -> Any:
        reads.append(path)
        return real(path)

    monkeypatch.setattr(describe_module, "inspect", counted)
    model = tmp_path / "coder.gguf"
    model.write_bytes(tiny_models["coder"].read_bytes())
    describer = Describer()
    first = describer.describe(spec("a", model))
    assert describer.describe(spec("a", model)) == describer.describe(spec("b", model)) == first
    assert len(reads) == 1
    os.utime(model, ns=(1, 1))  # a new version of the file: read again
    assert describer.describe(spec("a", model)) == first and len(reads) == 2


LATER = ["localchat-test-no-such-part==0.0.1", "localchat-test-no-such-part2==0.0.1"]


@pytest.fixture(scope="module")
@shipped
def fresh(registry_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A server of its own, so that no other test has loaded the models yet; its registry also
    has a model fetched on first use (never fetched here) and a file that is not a GGUF."""
    folder = tmp_path_factory.mktemp("describe")
    (folder / "notes.gguf").write_text("hello, not a model")
    config = folder / "models.toml"
    config.write_text(registry_file.read_text() + f'\n[models.later]\nparts = {LATER!r}\ncontext_length = 4096\n'
                      f'\n[models.notes]\npath = "{folder / "notes.gguf"}"\n'.replace("'", '"'))
    s = Server(config)
    try:
        with httpx.Client(base_url=s.url, timeout=120) as c:
            yield c
    finally:
        s.stop()


def cards(http: httpx.Client) -> dict[str, dict[str, Any]]:
    return {m["id"]: m for m in http.get("/v1/models").json()["data"]}


def described(http: httpx.Client) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in http.get("/health").json()["models"]}


def load(http: httpx.Client, name: str) -> None:
    if name == "tiny-embed":
        r = http.post("/v1/embeddings", json={"model": name, "input": "hello"})
    elif name == "tiny-reranker":
        r = http.post("/v1/rerank", json={"model": name, "query": "q", "documents": ["d"]})
    else:
        r = http.post("/v1/completions", json={"model": name, "prompt": "hi", "max_tokens": 1})
    assert r.status_code == 200, r.text


def test_the_server_describes_models_before_and_after_they_load(fresh: httpx.Client):
    before, health = cards(fresh), described(fresh)
    for name, (family, caps) in EXPECTED.items():
        assert not before[name]["loaded"], name
        assert (before[name]["family"], before[name]["capabilities"], before[name]["file"]) == (family, caps, "present")
        assert {k: health[name][k] for k in ("family", "capabilities", "file", "loaded")} == \
            {k: before[name][k] for k in ("family", "capabilities", "file", "loaded")}
    assert (before["ghost"]["file"], before["ghost"]["capabilities"], before["ghost"]["family"]) == ("missing", [], None)
    assert "no file at /nonexistent/ghost.gguf" in before["ghost"]["reason"] == health["ghost"]["reason"]
    for name in EXPECTED:
        load(fresh, name)
        after = cards(fresh)[name]
        assert after["loaded"] and described(fresh)[name]["loaded"], name
        assert {**after, "loaded": False} == before[name], name  # llama.cpp's answer is the file's
        assert described(fresh)[name]["capabilities"] == before[name]["capabilities"]


def test_files_not_there_or_not_gguf_are_described_as_such(fresh: httpx.Client):
    listed, health = cards(fresh), described(fresh)
    later, notes = listed["later"], listed["notes"]
    assert (later["file"], later["capabilities"], later["family"], later["context_length"]) == \
        ("on_demand", [], None, 4096)
    assert "fetched from the package index on first use" in later["reason"] == health["later"]["reason"]
    assert not wheel.parts_path(LATER, "later").exists()
    assert (notes["file"], notes["capabilities"], notes["context_length"]) == ("invalid", [], None)
    assert "not a GGUF file" in notes["reason"] == health["notes"]["reason"]


def test_ollamas_show_says_the_same(fresh: httpx.Client):
    ollama = {"fim": "insert", "reasoning": "thinking", "rerank": None}
    for name, (_, caps) in EXPECTED.items():
        shown = fresh.post("/api/show", json={"model": name}).json()["capabilities"]
        assert sorted(shown) == sorted(c2 for c in caps if (c2 := ollama.get(c, c))), name
    assert fresh.post("/api/show", json={"model": "ghost"}).json()["capabilities"] == []


def models_cli(registry_file: Path, *args: str) -> str:
    env = {**os.environ, "COLUMNS": "400"}
    r = subprocess.run([sys.executable, "-m", "localchat", "models", *args, "--config", str(registry_file)],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_localchat_models_shows_them(registry_file: Path):
    rows = {line.lstrip(" *").split()[0]: line for line in models_cli(registry_file).splitlines()[1:] if line.strip()}
    for name, (family, caps) in EXPECTED.items():
        assert f" {family} " in rows[name] and f" {' '.join(caps)} " in rows[name] and "present" in rows[name], name
    assert "missing" in rows["ghost"]
    shown = models_cli(registry_file, "show", "tiny-coder")
    assert "capabilities    completion, tools, fim" in shown and "family          chatml (detected)" in shown
