"""The suite's own rules: every test is in exactly one tier (`fast`, `tiny`, `real`: tests/conftest.py
gives `tiny` to a test that names none), and every test can fail: it asserts, expects an exception
or calls a helper of tests/ that does."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from conftest import TIERS_SEEN

pytestmark = pytest.mark.fast

TESTS = Path(__file__).resolve().parent
# Calls that fail a test by themselves: pytest.raises / warns / fail, Playwright's expect(…),
# jsonschema.validate.
FAILING_CALLS = ("raises", "warns", "fail", "expect", "validate")


def test_every_collected_test_is_in_exactly_one_tier(request: pytest.FixtureRequest):
    seen = request.config.stash[TIERS_SEEN]
    assert request.node.nodeid in seen and seen[request.node.nodeid] == ["fast"]
    wrong = {nodeid: tiers for nodeid, tiers in seen.items() if len(tiers) != 1}
    assert not wrong, f"tests in more than one tier (keep one of their markers): {wrong}"


@functools.cache
def _parsed() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(), str(path)) for path in sorted(TESTS.glob("*.py"))}


@functools.cache
def _helpers() -> dict[str, list[ast.AST]]:
    """Every function and method defined in tests/, by name; not the fixtures (a test names them
    as arguments: they set up, a check of theirs is not the test's)."""
    found: dict[str, list[ast.AST]] = {}
    for tree in _parsed().values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    and not any("fixture" in ast.unparse(d) for d in node.decorator_list):
                found.setdefault(node.name, []).append(node)
    return found


def _can_fail(node: ast.AST, seen: set[str] | None = None) -> bool:
    """Whether the function asserts, raises, calls pytest.raises & co., or names a helper of tests/
    (called, or passed on to be called) that can fail."""
    helpers, seen = _helpers(), seen if seen is not None else set()
    names = []
    for x in ast.walk(node):
        if isinstance(x, (ast.Assert, ast.Raise)):
            return True
        name = x.attr if isinstance(x, ast.Attribute) else x.id if isinstance(x, ast.Name) else None
        if name in FAILING_CALLS:
            return True
        if name in helpers and name not in seen:
            seen.add(name)
            names.append(name)
    return any(_can_fail(f, seen) for name in names for f in helpers[name])


def test_every_test_can_fail():
    mute = [f"{path.name}:{node.lineno} {node.name}" for path, tree in _parsed().items() if path.name.startswith("test_")
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")
            and not _can_fail(node, {node.name})]
    assert not mute, f"tests that assert nothing (no assert, raise, pytest.raises, expect or helper that does): {mute}"


def test_the_check_finds_a_test_that_asserts_nothing():
    quiet = ast.parse("def test_quiet(client):\n    client.get('/health')\n    print('done')\n").body[0]
    loud = ast.parse("def test_loud(client):\n    same_greedy_tokens({}, {})\n").body[0]  # conftest's, asserts
    assert not _can_fail(quiet)
    assert _can_fail(loud)
