"""Fixtures: tiny GGUF models for every family, a registry naming them beside the shipped
models, and a real `localchat serve` process on a free loopback port."""

from __future__ import annotations

import json
import signal
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import httpx
import pytest

from localchat.families import FAMILIES
from localchat.models import shipped_config
from localchat.devtools import isolate_home
from localchat.devtools.tinymodels import write_tiny_lora, write_tiny_mmproj, write_tiny_model
from localchat.serve_process import Server, free_port  # noqa: F401  (the launcher the tests share with launch and scripts/)

if TYPE_CHECKING:  # imported where used: the scripts that import this file start faster without it
    import openai

    from localchat.engine import LocalEngine

# A test run started in the background by a non-interactive shell inherits SIGINT ignored (POSIX
# does that to background jobs), and so would every process it starts: the Ctrl-C tests (the
# REPL, `localchat pull`) would press keys no one hears. The children get the default back.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

TINY_CTX = 2048
# The shipped models a test may mean, by name: most real-model tests use Gemma 3 270M (a base model:
# it rambles, so streams run long). A request without a model gets the shipped default.
GEMMA = "gemma-3-270m"
SMOLLM = "smollm2-135m"
DEFAULT = tomllib.loads(shipped_config().read_text())["default"]
# A Qwen3-style template: the generation prompt opens a think block.
THINKING_TEMPLATE = FAMILIES["chatml"].template.replace(
    "<|im_start|>assistant\n{% endif -%}", "<|im_start|>assistant\n<think>\n{% endif -%}")

# A template that prints what a request gives it beyond the messages (a test model's, tiny-kwargs).
KWARGS_TEMPLATE = (
    "{%- if documents is defined %}<|im_start|>system\nDOCS:{% for d in documents %} [{{ d.title }}] {{ d.text }}"
    "{% endfor %}<|im_end|>{{ '\\n' }}{% endif -%}"
    "{%- if greeting is defined %}<|im_start|>system\n{{ greeting }}<|im_end|>{{ '\\n' }}{% endif -%}"
    "{%- for m in messages -%}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{{ '\\n' }}{%- endfor -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant{{ '\\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>{{ '\\n\\n' }}</think>{{ '\\n\\n' }}"
    "{% else %}<think>{{ '\\n' }}{% endif %}{% endif -%}")

# Keep the tests (and the servers they start) away from the user's own registry and history.
_HOME = isolate_home()


def tiny_engine(tmp_path_factory: pytest.TempPathFactory, n_ctx: int = 1024, costs: bool = False,
                **options) -> Iterator[LocalEngine]:
    """A real engine on a tiny ChatML model of its own, for a test module's `engine` fixture
    (`yield from tiny_engine(...)`); costs: its step costs kept in a file of its own, not the user's."""
    from localchat.engine import LocalEngine

    path = write_tiny_model(tmp_path_factory.mktemp("engine") / "m.gguf", FAMILIES["chatml"], n_ctx=n_ctx)
    if costs:
        options["step_costs"] = str(tmp_path_factory.mktemp("costs") / "c.json")
    engine = LocalEngine(path, n_ctx=n_ctx, **options)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("models")
    models = {name: write_tiny_model(folder / f"tiny-{name}.gguf", family, n_ctx=TINY_CTX)
              for name, family in FAMILIES.items()}
    models["qwen3"] = write_tiny_model(folder / "tiny-qwen3.gguf", FAMILIES["chatml"], n_ctx=TINY_CTX,
                                       chat_template=THINKING_TEMPLATE)
    # a code model (fill-in-the-middle tokens) and an embedding model (declares mean pooling)
    models["coder"] = write_tiny_model(folder / "tiny-coder.gguf", FAMILIES["chatml"], n_ctx=TINY_CTX, fim=True)
    models["embed"] = write_tiny_model(folder / "tiny-embed.gguf", FAMILIES["llama3"], n_ctx=TINY_CTX, pooling=1)
    # a reranker (Qwen3-Reranker's shape: rank pooling, a yes/no classifier head)
    models["reranker"] = write_tiny_model(folder / "tiny-reranker.gguf", FAMILIES["chatml"], n_ctx=TINY_CTX,
                                          reranker=True)
    return models


@pytest.fixture(scope="session")
def registry_file(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped registry plus one tiny model per family (family left to detection)."""
    path = tmp_path_factory.mktemp("config") / "models.toml"
    lines = [shipped_config().read_text()]
    for name, model in tiny_models.items():
        lines.append(f'\n[models."tiny-{name}"]\npath = "{model}"\ncontext_length = {TINY_CTX}\n')
    lines.append('\n[models.ghost]\npath = "/nonexistent/ghost.gguf"\n')  # listed, but its file is gone
    # a chat model with two LoRA adapters, both off by default
    one, two = (write_tiny_lora(path.parent / f"lora-{name}.gguf", seed=seed) for name, seed in (("one", 1), ("two", 2)))
    lines.append(f'\n[models.tiny-lora]\npath = "{tiny_models["chatml"]}"\ncontext_length = {TINY_CTX}\n'
                 f'loras = [{{name = "one", path = "{one}", scale = 0}}, {{name = "two", path = "{two}", scale = 0}}]\n')
    # a Gemma-style model with a vision projector (mmproj); the same with a small context
    vision = write_tiny_model(path.parent / "tiny-vision.gguf", FAMILIES["gemma"], n_ctx=TINY_CTX,
                              extra=("<start_of_image>", "<end_of_image>"))
    mmproj = write_tiny_mmproj(path.parent / "tiny-vision-mmproj.gguf")
    for name, n_ctx in (("tiny-vision", TINY_CTX), ("tiny-vision-small", 64)):
        lines.append(f'\n[models.{name}]\npath = "{vision}"\nmmproj = "{mmproj}"\ncontext_length = {n_ctx}\n')
    # a template that reads what a request may give it: documents, a variable of the client's own
    # (`greeting`, from chat_template_kwargs), Qwen 3's enable_thinking
    lines.append(f'\n[models.tiny-kwargs]\npath = "{tiny_models["chatml"]}"\ncontext_length = {TINY_CTX}\n'
                 f"template = {json.dumps(KWARGS_TEMPLATE)}\n")
    # a chat model that reranks by answering yes or no
    lines.append(f'\n[models.tiny-judge]\npath = "{tiny_models["chatml"]}"\ncontext_length = {TINY_CTX}\nrerank = true\n')
    path.write_text("".join(lines))
    return path


def same_greedy_tokens(cold: dict, warm: dict) -> None:
    """Two greedy chat completions (with `logprobs`, `top_logprobs` >= 2) wrote the same tokens,
    each log-probability within 0.01, up to the first token where they part — which must be a
    near-tie in the first one (another CPU's kernels, or another batch shape, may break it the
    other way)."""
    a, b = (c["choices"][0]["logprobs"]["content"] for c in (cold, warm))
    for x, y in zip(a, b):
        assert abs(x["logprob"] - y["logprob"]) < 0.01
        if x["token"] != y["token"]:
            top = x["top_logprobs"]
            assert top[0]["logprob"] - top[1]["logprob"] < 0.02, (x, y)
            return


def serve_in_thread(app) -> Iterator[str]:
    """An ASGI app on a loopback port, uvicorn in a thread of this process: its URL while it runs."""
    import threading

    import uvicorn
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started, "the loopback server did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def shipped(fixture: Callable) -> Callable:
    """Under @pytest.fixture: the fixture loads a shipped model (a server without a tiny `--model`
    loads the shipped default as it starts), so every test that uses it is in the `real` tier."""
    fixture.shipped_model = True  # type: ignore[attr-defined]
    return fixture


@pytest.fixture(scope="session")
@shipped
def server(registry_file: Path) -> Iterator[Server]:
    s = Server(registry_file)
    yield s
    alive = s.proc.poll() is None
    s.stop()
    assert alive, "the server died during the tests"


@pytest.fixture(scope="session")
def client(server: Server) -> openai.OpenAI:
    import openai
    return openai.OpenAI(base_url=server.url + "/v1", api_key="anything", max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=120) as c:
        yield c


TIERS = ("fast", "tiny", "real")
# Every collected test's tiers, by node id, before `-m` deselects any (tests/test_tiers.py checks: one each).
TIERS_SEEN = pytest.StashKey[dict[str, list[str]]]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fast: the fast tier: protocols, framing and splitting over the scripted "
                            "engine, no model pulled or loaded, no llama.cpp (scripts/test --fast)")
    config.addinivalue_line("markers", "tiny: the tiny-model tier: llama.cpp on tiny synthetic GGUFs only, no shipped "
                            "model (scripts/test --tiny); a test that names no tier and uses no @shipped fixture")
    config.addinivalue_line("markers", "real: the real-model tier: a shipped model (Qwen2.5-Coder 0.5B, SmolLM2 135M, "
                            "Gemma 3 270M) is loaded (scripts/test --real)")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: `-m tiny` selects the tests given it here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test in no tier of its own (its marker, its class's or its module's `pytestmark`) is in
    `real` when it uses a fixture marked @shipped (the `server` below, directly or through `client`
    and `http`: it loads the shipped default as it starts). Otherwise it is in `tiny`: it runs
    llama.cpp on the tiny GGUFs, or nothing. A test that loads a shipped model in its own body (a
    server without a tiny `--model`, a request naming one) says `real`; one on the scripted engine
    alone says `fast`."""
    seen = config.stash.setdefault(TIERS_SEEN, {})
    for item in items:
        tiers = [t for t in TIERS if item.get_closest_marker(t) is not None]
        if not tiers:
            tiers = ["real" if _uses_a_shipped_fixture(item) else "tiny"]
            item.add_marker(getattr(pytest.mark, tiers[0]))
        seen[item.nodeid] = tiers


def _uses_a_shipped_fixture(item: pytest.Item) -> bool:
    """Whether a fixture the test uses, directly or through another, is marked @shipped (the one
    that serves the test: a module may define its own fixture of a name conftest.py uses)."""
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(getattr(defs[-1].func, "shipped_model", False)
                                    for name, defs in info.name2fixturedefs.items() if defs)


def pytest_collection_finish(session: pytest.Session) -> None:
    """A test module with a `start_early()` has it called once its tests are collected to run, so
    what it starts (tests/test_scripts.py: every wrapper's --help) runs beside the tests before it."""
    if session.config.option.collectonly:
        return
    for module in {getattr(item, "module", None) for item in session.items}:
        if callable(start := getattr(module, "start_early", None)):
            start()


@pytest.fixture(scope="module")
def looping(tiny_models: dict[str, Path]) -> Iterator[SimpleNamespace]:
    """A server whose model (the scripted engine) calls server_time whenever it is offered tools, as the
    shipped Qwen2.5-Coder 0.5B and 1.5B do on "what time is it on the server?", even after its result."""
    from localchat.api import create_app
    from localchat.engine.fake import FakeEngine, prompt_text
    from localchat.generation import Chat, ModelHost
    from localchat.models import ModelSpec, Registry, Settings

    def play(request: object, choice: int) -> list[str]:
        offered = "<tools>" in prompt_text(request)
        return [LOOPED_CALL] if offered else ["It is ", "noon."]

    specs = {name: ModelSpec(name=name, path=tiny_models["chatml"], context_length=TINY_CTX)
             for name in ("looping", "looping-too")}  # two: the page's model list is ready with more than one
    host = ModelHost(Registry(specs, "looping", settings=Settings(worker=False)),
                     engine=lambda path, **kw: FakeEngine(play, **{k: kw[k] for k in ("n_ctx", "parallel", "name")}))
    for url in serve_in_thread(create_app(Chat(host))):
        yield SimpleNamespace(url=url)
    host.close()


LOOPED_CALL = '<tool_call>\n{"name": "server_time", "arguments": {}}\n</tool_call>'
