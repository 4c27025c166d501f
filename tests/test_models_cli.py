"""`localchat models`: list, show, add, rm — on real GGUF files, never corrupting the registry."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DEFAULT, GEMMA, SMOLLM
from localchat.families import FAMILIES
from localchat.devtools.tinymodels import write_tiny_model


def run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOCALCHAT_CONFIG_DIR": str(home), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "localchat", "models", *args], env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "config"


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    return write_tiny_model(tmp_path / "My Model.Q8.gguf", FAMILIES["mistral"])


@pytest.mark.real  # lists Gemma 3 270M as present
def test_add_show_list_rm(home: Path, gguf: Path):
    r = run(home, "add", str(gguf))
    assert r.returncode == 0, r.stderr
    assert "added my-model.q8" in r.stdout
    listing = run(home).stdout
    row = next(line for line in listing.splitlines() if "my-model.q8" in line)
    assert "mistral" in row and "present" in row and "KB" in row and "512" in row
    assert any(line.lstrip().startswith("*") and DEFAULT in line for line in listing.splitlines())
    assert any(GEMMA in line and "present" in line for line in listing.splitlines())

    shown = run(home, "show", "my-model.q8").stdout
    assert "architecture    llama" in shown
    assert "family          mistral (detected)" in shown
    assert "in the GGUF" in shown and "[INST]" in shown and "parameters" in shown

    r = run(home, "rm", "my-model.q8")
    assert r.returncode == 0 and "my-model.q8" not in run(home).stdout


def test_add_with_name_family_and_default(home: Path, gguf: Path):
    r = run(home, "add", str(gguf), "--name", "mine", "--family", "chatml", "--default")
    assert r.returncode == 0, r.stderr
    listing = run(home).stdout
    assert any(line.lstrip().startswith("*") and "mine" in line and "chatml" in line for line in listing.splitlines())
    assert "family          chatml (set in models.toml)" in run(home, "show", "mine").stdout
    run(home, "rm", "mine")
    assert any(line.lstrip().startswith("*") and DEFAULT in line for line in run(home).stdout.splitlines())


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "missing.gguf", "no file at"),
    (lambda d: (d / "notes.txt").write_text("hello, not a model") and d / "notes.txt", "not a GGUF file"),
    (lambda d: d, "is not a file"),
])
def test_bad_files_are_refused_and_the_registry_is_untouched(home: Path, gguf: Path, tmp_path: Path, make, message):
    assert run(home, "add", str(gguf), "--name", "keep").returncode == 0
    before = (home / "models.toml").read_bytes()
    r = run(home, "add", str(make(tmp_path)), "--name", "bad")
    assert r.returncode == 1
    assert message in r.stderr and "Traceback" not in r.stderr
    assert (home / "models.toml").read_bytes() == before
    assert list(home.iterdir()) == [home / "models.toml"]  # no temporary file left behind


def test_truncated_gguf_is_refused(home: Path, gguf: Path, tmp_path: Path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(gguf.read_bytes()[:200])
    r = run(home, "add", str(cut))
    assert r.returncode == 1 and "GGUF" in r.stderr
    assert not (home / "models.toml").exists()


def test_refusals(home: Path, gguf: Path):
    assert "unknown family" in run(home, "add", str(gguf), "--family", "klingon").stderr
    assert "shipped model" in run(home, "add", str(gguf), "--name", GEMMA).stderr
    assert "shipped model" in run(home, "add", str(gguf), "--name", SMOLLM).stderr
    assert "not a usable model name" in run(home, "add", str(gguf), "--name", "a b/c").stderr
    assert "shipped model and cannot be removed" in run(home, "rm", GEMMA).stderr
    assert "no model named" in run(home, "rm", "ghost").stderr
    assert "does not exist" in run(home, "show", "ghost").stderr
    assert not (home / "models.toml").exists()


def test_the_server_sees_models_added_by_the_user(home: Path, gguf: Path):
    from localchat.models import Registry

    run(home, "add", str(gguf), "--name", "mine")
    registry = Registry.load(user_path=home / "models.toml")
    assert registry.resolve("mine").path == gguf.resolve()
    assert registry.resolve("").name == DEFAULT
