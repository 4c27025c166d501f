"""The scripts no test runs end to end (they take minutes to hours) still load: every module of
scripts/ imports, as its wrapper runs it, so a name moved in localchat shows here, not the next
time someone needs the script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


@pytest.mark.fast
def test_every_script_module_imports():
    """In a fresh interpreter with the checkout, tests/ and scripts/ on the path, as the scripts set it."""
    modules = sorted(p.stem for p in SCRIPTS.glob("*.py"))
    assert {"acceptance", "bench", "families", "families_routes"} <= set(modules)
    root = SCRIPTS.parent
    code = (f"import importlib, sys; sys.path[:0] = [{str(root)!r}, {str(root / 'tests')!r}, {str(SCRIPTS)!r}]\n"
            f"for name in {modules!r}:\n"
            "    try:\n        importlib.import_module(name)\n"
            "    except Exception as exc:\n        sys.exit(f'scripts/{name}.py: {type(exc).__name__}: {exc}')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
