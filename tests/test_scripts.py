"""Every script in scripts/ is started here: each wrapper as a user runs it, with --help (its usage,
quickly, nothing pulled or installed), and every module of scripts/ imports as its wrapper runs it,
so a name moved in localchat or a broken wrapper shows here, not the next time someone needs the
script. (The scripts themselves take minutes to hours; scripts/families runs whole in CI, .ci/run.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
# The wrappers: scripts/NAME, executable, no extension (the _*.sh files are sourced by them).
WRAPPERS = sorted(p.name for p in SCRIPTS.iterdir() if p.is_file() and "." not in p.name and not p.name.startswith("_"))
# The wrappers start from _bootstrap.sh, which installs into .venv when pyproject.toml changed since
# the last install: run them only where the tests run in that .venv, as scripts/test runs them.
IN_VENV = Path(sys.prefix).resolve() == (ROOT / ".venv").resolve()
needs_venv = pytest.mark.skipif(not IN_VENV, reason="the wrappers in scripts/ use the checkout's .venv: run the "
                                "tests in it (scripts/test does)")


def wrapper_env(tmp: Path) -> dict[str, str]:
    """The tests' environment, where a wrapper that pulled a model would fail: an empty model cache
    and no package index; where one that set up Chromium would find one named."""
    return {**os.environ, "LOCALCHAT_CACHE_DIR": str(tmp / "cache"), "PIP_NO_INDEX": "1",
            "LOCALCHAT_CHROMIUM": str(tmp / "no-chromium")}


class Helps:
    """`scripts/NAME --help` for every wrapper, all at once, niced, started as the session's tests
    start (conftest.py calls `start_early`): most import localchat, seconds of CPU that the
    second core spends beside the other tests. Each one's output goes to a file of its own."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="localchat-wrappers-"))
        env = wrapper_env(self.folder)
        self.started = time.monotonic()
        self.procs = {}
        for name in WRAPPERS:
            with open(self.folder / f"{name}.out", "w") as out:
                self.procs[name] = subprocess.Popen(["nice", str(SCRIPTS / name), "--help"], stdout=out,
                                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                                    cwd=ROOT)

    def result(self, name: str) -> tuple[int | None, str]:
        """Its exit status (None: killed after 120 s) and output."""
        proc = self.procs[name]
        try:
            proc.wait(timeout=max(1.0, 120 - (time.monotonic() - self.started)))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return None, (self.folder / f"{name}.out").read_text() + "\n(killed: no usage within 120 s)"
        return proc.returncode, (self.folder / f"{name}.out").read_text()


_early: list[Helps] = []


def start_early() -> None:
    """Called by conftest.py once the tests are collected, when some of this module's will run."""
    if IN_VENV and not _early:
        _early.append(Helps())


@pytest.fixture(scope="module")
def helps() -> Iterator[Helps]:
    start_early()
    yield _early[0]
    for proc in _early[0].procs.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    shutil.rmtree(_early[0].folder, ignore_errors=True)


def test_the_wrappers_are_all_found():
    assert {"acceptance", "bench", "eval-schemas", "families", "schema-conformance", "screenshots", "serve", "soak",
            "test", "tool-tally", "two-folders", "vendor-web"} <= set(WRAPPERS)
    for name in WRAPPERS:
        assert os.access(SCRIPTS / name, os.X_OK), f"scripts/{name} is not executable"


@needs_venv
@pytest.mark.parametrize("name", WRAPPERS)
def test_a_wrapper_prints_its_usage(helps: Helps, name: str):
    status, out = helps.result(name)
    assert status == 0, out[-3000:]
    assert "usage" in out.lower(), out[-3000:]
    assert "fetching" not in out and "installing" not in out, out[-3000:]


@needs_venv
def test_scripts_test_help_names_the_three_tiers(helps: Helps):
    out = helps.result("test")[1]
    for tier in ("--fast", "--tiny", "--real"):
        assert f"scripts/test {tier}" in out


def test_vendor_web_refuses_arguments_it_does_not_know():
    """It empties localchat/web/vendor/ first: a stray argument must not start it."""
    done = subprocess.run([str(SCRIPTS / "vendor-web"), "--dry-run"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "usage" in done.stderr


@needs_venv
def test_schema_conformance_through_its_wrapper(tmp_path: Path):
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "n.json").write_text(json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}}))
    done = subprocess.run([str(SCRIPTS / "schema-conformance"), str(tmp_path / "schemas")], capture_output=True,
                          text=True, timeout=120, env=wrapper_env(tmp_path), stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "enforced :" in done.stdout and "1 " in done.stdout.split("enforced :")[1].split("\n")[0], done.stdout


def test_every_script_module_imports():
    """In a fresh interpreter with the checkout, tests/ and scripts/ on the path, as the scripts set it:
    the modules no wrapper starts (the wrappers' --help above imports theirs), or all of them where
    the wrappers do not run."""
    modules = sorted(p.stem for p in SCRIPTS.glob("*.py"))
    assert {"acceptance", "bench", "families", "families_routes"} <= set(modules)
    if IN_VENV:
        started = "\n".join((SCRIPTS / name).read_text() for name in WRAPPERS)
        modules = [m for m in modules if f"scripts/{m}.py" not in started]
        assert "families_routes" in modules and "acceptance" not in modules
    root = SCRIPTS.parent
    code = (f"import importlib, sys; sys.path[:0] = [{str(root)!r}, {str(root / 'tests')!r}, {str(SCRIPTS)!r}]\n"
            f"for name in {modules!r}:\n"
            "    try:\n        importlib.import_module(name)\n"
            "    except Exception as exc:\n        sys.exit(f'scripts/{name}.py: {type(exc).__name__}: {exc}')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
