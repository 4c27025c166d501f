"""The hand-written GBNF building blocks in the top-level grammars/ folder."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

_FILES = ("json.gbnf", "formats.gbnf")


def _folder() -> Path:
    here = Path(__file__).resolve().parent.parent
    for candidate in (here.parent / "grammars", here / "_data" / "grammars"):
        if (candidate / _FILES[0]).is_file():
            return candidate
    raise FileNotFoundError("the grammars/ folder is missing from this installation")


@lru_cache(maxsize=1)
def rules() -> dict[str, str]:
    """name → body, one rule per line."""
    out: dict[str, str] = {}
    for name in _FILES:
        for line in (_folder() / name).read_text().splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                rule, _, body = line.partition("::=")
                out[rule.strip()] = body.strip()
    return out


_STRIP = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]')


def references(body: str) -> set[str]:
    """Rule names a body refers to (string literals and character classes removed first)."""
    return set(re.findall(r"[a-zA-Z0-9-]+", _STRIP.sub(" ", body)))


def closure(names: set[str]) -> dict[str, str]:
    """The library rules `names` need, with everything they refer to."""
    lib = rules()
    todo, out = [n for n in names if n in lib], {}
    while todo:
        name = todo.pop()
        if name not in out:
            out[name] = lib[name]
            todo += [r for r in references(lib[name]) if r in lib and r not in out]
    return out
