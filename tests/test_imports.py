"""Import-time hygiene: importing the API, the CLI or the engine's plain data never loads
llama.cpp (only building an engine does), importing registers nothing, and no localchat module
imports another that imports it back, at any depth (an import inside a function or under
`if TYPE_CHECKING:` counts: it hides a cycle, it does not break one)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import deque
from pathlib import Path

import localchat
from localchat.grammars.compact import _cycles as strongly_connected

PACKAGE = Path(localchat.__file__).parent
REPO = PACKAGE.parent


def _run(code: str) -> subprocess.CompletedProcess[str]:
    """A fresh interpreter: this process has long imported whatever other tests needed."""
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_importing_the_api_the_cli_and_the_engine_data_does_not_load_llama_cpp():
    done = _run("import sys\n"
                "import localchat.engine.params, localchat.engine, localchat.api.app, localchat.cli, localchat.server\n"
                "loaded = sorted(m for m in sys.modules if m == 'llama_cpp' or m.startswith('llama_cpp.'))\n"
                "assert not loaded, loaded\n"
                "from localchat.engine import FakeEngine, WorkerEngine\n"  # the worker loads its model when built
                "assert 'llama_cpp' not in sys.modules\n"
                "from localchat.engine import LocalEngine\n"
                "assert 'llama_cpp' in sys.modules\n")
    assert done.returncode == 0, done.stderr


def test_error_shapes_live_on_the_app_not_in_a_module_global():
    done = _run("from localchat.api import errors\n"
                "from localchat.api.protocols import PROTOCOLS\n"
                "assert not [n for n, v in vars(errors).items() if isinstance(v, dict) and n.isupper() or n == 'register']\n"
                "shapes = errors.ErrorShapes(s for p in PROTOCOLS for s in p.ERRORS)\n"  # what create_app keeps
                "assert shapes.of('/api/chat').write is not errors.openai\n"  # Ollama's
                "assert shapes.of('/v1/messages').write is not errors.openai\n"  # Anthropic's
                "assert shapes.of('/v1/chat/completions') is errors.OPENAI\n"
                "assert errors.ErrorShapes([]).of('/api/chat') is errors.OPENAI\n")  # nothing shared between apps
    assert done.returncode == 0, done.stderr


# -- import cycles --------------------------------------------------------------------------------

def _modules() -> dict[str, tuple[Path, bool]]:
    """Every localchat module by dotted name: its file, and whether it is a package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {module it imports: the line of the first such import}, from every import
    statement at any depth. Importing `a.b.c` runs the packages `a.b` and `a` first, so those
    count too (except the importer's own packages, which are already running)."""
    modules = _modules()

    def known(name: str) -> str | None:  # the module itself, or the package it names a member of
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for name, (path, package) in modules.items():
        own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [known(alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if package else name.split(".")[:-1]
                    base = base[:len(base) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [known(f"{source}.{alias.name}") for alias in node.names]  # a submodule, else the source
            for target in targets:
                if target is None:
                    continue
                parts = target.split(".")
                for i in range(1, len(parts) + 1):
                    step = ".".join(parts[:i])
                    if step in modules and step != name and step not in own:
                        edges.setdefault(step, node.lineno)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle (its modules in import order, the first repeated last) per strongly connected
    group of modules (the grammar compactor's Tarjan, without recursion)."""
    groups = [sorted(group) for group in strongly_connected({m: sorted(e) for m, e in sorted(graph.items())})
              if len(group) > 1]
    found = []
    for group in groups:  # the shortest way from the group's first module back to itself
        members, start = set(group), group[0]
        parent: dict[str, str | None] = {start: None}
        queue, last = deque([start]), None
        while last is None:
            node = queue.popleft()
            if start in graph[node]:
                last = node
            for target in sorted(graph[node]):
                if target in members and target not in parent:
                    parent[target] = node
                    queue.append(target)
        path, step = [start], last
        while step is not None:
            path.append(step)
            step = parent[step]
        found.append(path[::-1])
    return found


def test_the_cycle_finder_names_each_cycle_once_in_import_order():
    graph = {"a": {"b": 3}, "b": {"c": 9}, "c": {"a": 40}, "d": {"a": 1}}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b": 1}, "b": {}}) == []


def test_the_graph_sees_imports_inside_functions_and_the_packages_they_run():
    graph = import_graph()
    assert "localchat.engine.engine" in graph["localchat.models.loaded"]  # inside make_engine
    assert "localchat.api.openai" in graph["localchat.api.llamacpp.template"]  # the package runs first
    assert "localchat.engine" not in graph["localchat.engine.base"]  # its own package is already running


def test_no_import_cycles_among_localchat_modules():
    graph = import_graph()
    described = ["  " + " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:])) + f" -> {cycle[-1]}"
                 for cycle in cycles(graph)]
    assert not described, "import cycles (each module with the line that imports the next):\n" + "\n".join(described)


# -- layers -----------------------------------------------------------------------------------------

def test_the_api_reaches_the_engine_only_through_generation():
    """api/ translates protocols onto generation's service; what it knows of an engine (its stats,
    its events) comes through generation, so an engine change never reaches a protocol module."""
    graph = import_graph()
    upward = sorted(f"{m} (line {line}) imports {target}" for m, edges in graph.items() if m.startswith("localchat.api")
                    for target, line in edges.items() if target.startswith("localchat.engine"))
    assert not upward, "api/ importing the engine:\n  " + "\n  ".join(upward)


def _script_imports(path: Path) -> list[tuple[str, int]]:
    """The top-level module of every import in a script, with its line (at any depth)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name.split(".")[0], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.module.split(".")[0], node.lineno))
    return found


def _scripts() -> list[Path]:
    """Every Python file of scripts/, the modules of its packages too (scripts/benchmarks/, which
    scripts/bench.py runs)."""
    found = sorted((REPO / "scripts").glob("**/*.py"))
    assert REPO / "scripts" / "benchmarks" / "common.py" in found
    return found


def test_scripts_import_nothing_from_the_tests():
    """scripts/ and tests/ share what they share through localchat/ (the launcher in
    serve_process.py, tiny models and the like in devtools/): a script never puts tests/ on its path."""
    tests = {p.stem for p in (REPO / "tests").glob("*.py")}
    scripts = _scripts()
    assert len(scripts) > 10 and "conftest" in tests
    wrong = [f"{p.relative_to(REPO)}:{line} imports {name} (tests/{name}.py)" for p in scripts
             for name, line in _script_imports(p) if name in tests]
    wrong += [f"{p.relative_to(REPO)} puts tests/ on sys.path" for p in scripts
              if re.search(r"sys\.path\.insert\(.*\btests\b", p.read_text(encoding="utf-8"))]
    assert not wrong, "\n".join(wrong)


def test_no_script_imports_another_runnable_script():
    """A script a user runs (one with a wrapper in scripts/: acceptance.py for scripts/acceptance) is
    nobody's library: what two scripts share lives in localchat/devtools/ (the agents' harness in
    devtools/clients.py); a script's own helper modules (families_checks.py) and packages
    (benchmarks/, bench.py's) have no wrapper."""
    runnable = {p.name.replace("-", "_") for p in (REPO / "scripts").iterdir() if p.is_file() and not p.suffix
                and not p.name.startswith("_")}
    scripts = _scripts()
    assert {"acceptance", "bench", "two_folders"} <= runnable
    wrong = [f"{p.relative_to(REPO)}:{line} imports {name} (scripts/{name.replace('_', '-')})" for p in scripts
             for name, line in _script_imports(p) if name in runnable and p != REPO / "scripts" / f"{name}.py"]
    assert not wrong, "\n".join(wrong)


# The engine's layers, lowest first: a module imports engine modules of its own layer or below, never
# above (the contract's plain data; llama.cpp wrapped; what a sequence writes and drafts; a request's and
# a slot's state; the cache; the step; the engines made of them; the worker process).
ENGINE_LAYERS = [
    ("params", "outputs", "base", "wire"),
    ("llama",),
    ("sampling", "drafting", "media"),
    ("state",),
    ("cache",),
    ("core",),
    ("engine", "fake", "remote"),
    ("worker",),
]


def engine_layer(module: str) -> int | None:
    """The layer of an engine module (or subpackage), None outside the engine or for the package itself."""
    parts = module.split(".")
    if parts[:2] != ["localchat", "engine"] or len(parts) < 3:
        return None
    return next(i for i, names in enumerate(ENGINE_LAYERS) if parts[2] in names)


def upward_engine_imports(graph: dict[str, dict[str, int]]) -> list[str]:
    return sorted(f"{m} (line {line}) imports {target}" for m, edges in graph.items()
                  if (low := engine_layer(m)) is not None
                  for target, line in edges.items() if (high := engine_layer(target)) is not None and high > low)


def test_every_engine_module_has_a_layer():
    modules = [m for m in _modules() if m.startswith("localchat.engine.")]
    assert len(modules) > 40
    assert all(engine_layer(m) is not None for m in modules)  # (a new subpackage gets a line in ENGINE_LAYERS)


def test_engine_modules_import_only_their_own_layer_or_below():
    made_up = {"localchat.engine.cache.prefix_cache": {"localchat.engine.core.scheduler": 7},
               "localchat.engine.core.scheduler": {"localchat.engine.cache.prefix_cache": 3}}
    assert upward_engine_imports(made_up) == [
        "localchat.engine.cache.prefix_cache (line 7) imports localchat.engine.core.scheduler"]
    upward = upward_engine_imports(import_graph())
    assert not upward, "engine modules importing a layer above their own:\n  " + "\n  ".join(upward)
