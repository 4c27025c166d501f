"""The user's own registry (`localchat models add/rm`): merged over the shipped models.toml,
written atomically, and never touched by a command that fails."""

from __future__ import annotations

import os
import re
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from . import paths
from ..families import FAMILIES
from .catalog import ModelSpec, Registry
from .gguf import inspect

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")


class RegistryEditError(ValueError):
    pass


def add(path: Path, *, name: str | None = None, family: str | None = None, default: bool = False,
        base: Path | None = None, mmproj: Path | None = None, source: str | None = None,
        aliases: list[str] | None = None) -> ModelSpec:
    """Check that `path` is a readable GGUF file, then record it (replacing an entry of that name
    you added before). Returns the new entry."""
    path = absolute(path)
    if not path.exists():
        raise RegistryEditError(f"no file at {path}")
    if not path.is_file():
        raise RegistryEditError(f"{path} is not a file")
    inspect(path)  # raises ModelUnavailable (not a GGUF, truncated, unreadable)
    if family is not None and family not in FAMILIES:
        raise RegistryEditError(f"unknown family {family!r}; choose one of: {', '.join(FAMILIES)}")
    name = name or name_from(path)
    if not NAME.match(name):
        raise RegistryEditError(f"{name!r} is not a usable model name: letters, digits and . _ : - only")
    current = Registry.load(base)
    if name in current.models and name not in current.user_models:
        raise RegistryEditError(f"{name!r} is a shipped model; choose another name with --name")
    doc = _load()
    entry: dict[str, Any] = {"path": str(path)}
    if family:
        entry["family"] = family
    if mmproj is not None:
        inspect(absolute(mmproj))
        entry["mmproj"] = str(absolute(mmproj))
    if source:
        entry["source"] = source
    if aliases:
        entry["aliases"] = aliases
    doc.setdefault("models", {})[name] = entry
    if default:
        doc["default"] = name
    _save(doc, base)
    return Registry.load(base).models[name]


def remove(name: str, *, base: Path | None = None) -> None:
    current = Registry.load(base)
    spec = current.models.get(name)
    if spec is None:
        raise RegistryEditError(f"no model named {name!r}; `localchat models` lists them")
    if name not in current.user_models:
        raise RegistryEditError(f"{name!r} is a shipped model and cannot be removed")
    doc = _load()
    del doc["models"][name]
    if doc.get("default") == name:
        del doc["default"]
    _save(doc, base)


def absolute(path: Path) -> Path:
    """Absolute, without following symlinks (the Hugging Face cache links each file by its name)."""
    return Path(os.path.abspath(path.expanduser()))


def entry(name: str) -> dict[str, Any] | None:
    """Your registry's entry of that name, as written."""
    return _load().get("models", {}).get(name)


def name_from(path: Path) -> str:
    stem = re.sub(r"[^A-Za-z0-9._:-]+", "-", path.stem).strip("-.").lower()
    return stem or "model"


def _load() -> dict[str, Any]:
    file = paths.user_registry()
    if not file.is_file():
        return {}
    try:
        return tomllib.loads(file.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise RegistryEditError(f"cannot read your registry {file}: {exc}") from exc


def _save(doc: dict[str, Any], base: Path | None) -> None:
    """Validate the result as a whole, then replace the file in one step."""
    file = paths.user_registry()
    file.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=".models.", suffix=".toml")
    try:
        with os.fdopen(fd, "wb") as f:
            tomli_w.dump(doc, f)
            f.flush()
            os.fsync(f.fileno())
        Registry.load(base, user_path=Path(tmp))  # refuses anything the registry could not read back
        os.replace(tmp, file)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
