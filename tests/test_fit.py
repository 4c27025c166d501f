"""Sizes that fit the machine: the memory estimate against what llama.cpp allocates, the sizes
chosen for a given free memory, and a server on a machine that pretends to have little memory."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest

from conftest import Server, free_port
from localchat.families import FAMILIES
from localchat.models import Registry, inspect, shipped_config
from localchat.models import fit
from localchat.errors import ModelTooLarge
from localchat.models.fit import F16, Memory, MemoryShape, choose, largest_context, need
from localchat.devtools.tinymodels import write_tiny_model

MiB = 1 << 20
GEMMA = "gemma-3-270m"  # shipped; Gemma 3 has sliding-window layers


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model trained on 32768 tokens: 2 layers × 4 KV heads × (16 + 16) values, f16: 512 bytes a token."""
    return write_tiny_model(tmp_path_factory.mktemp("fit") / "tiny-fit.gguf", FAMILIES["chatml"], n_ctx=32768)


# What llama.cpp logs when it makes a context as the engine makes it: the KV cache (one line per
# cache; Gemma 3 has two, global and sliding-window layers) and the compute and output buffers.
# The step costs are given, as a server that measured them once reads them back: the measurement
# (draft_cost.probe) makes a small context of its own for a while, which is not the slots' memory.
MEASURE = r"""
import ctypes, json, re, sys, tempfile
from pathlib import Path
import llama_cpp as C
from localchat.engine.drafting import draft_cost
from localchat.engine.llama.model import Model
from localchat.engine.core.scheduler import Scheduler
lines = []
@C.llama_log_callback
def log(level, text, _):
    lines.append(text.decode(errors="replace"))
C.llama_log_set(log, ctypes.c_void_p(0))
model = Model(Path(sys.argv[1]))
costs = Path(tempfile.mkdtemp()) / "step-costs.json"
draft_cost.save(costs, draft_cost.machine_key(model.path, 1, model.n_gpu_layers), {1: 1e-6, 64: 1e-5})
out = []
for ctx, slots, cache in json.loads(sys.argv[2]):
    lines.clear()
    s = Scheduler(model, n_ctx=ctx, parallel=slots, max_queue=1, n_threads=1, step_costs=costs, cache_types=tuple(cache))
    assert s.executor.decoder.cost.measured, "the step costs given were not read"
    text = "".join(lines)
    mib = lambda what: sum(float(x) for x in re.findall(what + r" buffer size =\s+([\d.]+) MiB", text))
    out.append({"kv": mib("KV"), "compute": mib("compute") + mib("output")})
    s.close()
print(json.dumps(out))
"""


@pytest.mark.parametrize("which", [pytest.param(GEMMA, marks=pytest.mark.real), "tiny"])
def test_the_estimate_is_what_llama_cpp_allocates(which: str, tiny: Path):
    path = Registry.load(shipped_config()).resolve(GEMMA).file() if which == GEMMA else tiny
    # f16 cells, then (Gemma: heads of 256 values, which the blocks of 32 divide) quantized ones (models.toml's
    # cache_type_k / cache_type_v): K and V each in its type
    sizes = [(4096, 1, F16), (8192, 4, F16), (2048, 3, F16)]
    if which == GEMMA:
        sizes += [(4096, 2, ("q8_0", "q8_0")), (2048, 1, ("q4_0", "f16"))]
    r = subprocess.run([sys.executable, "-c", MEASURE, str(path), json.dumps(sizes)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    measured = json.loads(r.stdout.strip().splitlines()[-1])
    shape = MemoryShape.of(inspect(path))
    for (ctx, slots, cache), got in zip(sizes, measured):
        estimate = need(shape, ctx, slots, cache=cache)
        assert got["kv"] == pytest.approx(estimate.kv / MiB, abs=0.01), (ctx, slots)  # to the byte, in MiB
        assert got["compute"] <= estimate.compute / MiB  # an upper bound: it never needs more than said


@pytest.mark.real  # Gemma 3 270M
def test_sliding_window_layers_are_known_and_kept_whole(monkeypatch: pytest.MonkeyPatch):
    shape = MemoryShape.of(inspect(Registry.load(shipped_config()).resolve(GEMMA).file()))
    assert sum(swa for _, _, swa in shape.layers) == 15 and len(shape.layers) == 18 and shape.window == 512
    assert shape.kv_per_token() == 18 * 1 * (256 + 256) * 2  # every layer whole: the engine's swa_full
    whole = shape.kv_bytes(32768, 1)
    monkeypatch.setattr(fit, "SWA_FULL", False)  # were they windowed, they would hold 1024 cells, not 32768
    assert shape.kv_bytes(32768, 1) == 3 * 512 * 2 * 32768 + 15 * 512 * 2 * 1024 < whole


def test_sizes_chosen_for_the_free_memory(tiny: Path):
    shape = MemoryShape.of(inspect(tiny))
    assert shape.kv_per_token() == 512 and shape.trained == 32768
    budget = lambda b: Memory(int(b / (1 - fit.HEADROOM)) + 1, "RAM")  # noqa: E731 - free memory giving this budget
    plenty = choose(shape, budget(1 << 40))
    assert (plenty.context, plenty.slots) == (8192, 4)  # the cap: 4 × 8192 tokens of cache, even with room for more
    assert "the default" in plenty.reason
    for want in ((8192, 2), (8192, 1), (4096, 1)):
        got = choose(shape, budget(need(shape, *want).total))
        assert (got.context, got.slots) == want and "4 slots × 8192 tokens would need" in got.reason
        assert got.need.total <= got.memory.budget
    with pytest.raises(ModelTooLarge) as exc:
        choose(shape, budget(need(shape, 4096, 1).total - 1))
    assert "needs" in exc.value.message and "1 slot of 4096 tokens" in exc.value.message and exc.value.status == 503
    one = choose(shape, budget(1 << 40), slots=1)  # one slot may have the whole cache
    assert (one.context, one.slots) == (32768, 1)
    kept = choose(shape, budget(1), context=16384, slots=3)  # given values stay, and the reason warns
    assert (kept.context, kept.slots) == (16384, 3) and "may swap or fail" in kept.reason


def test_models_show_estimates_a_context_and_slots(tiny: Path, tmp_path: Path):
    config = tmp_path / "models.toml"
    config.write_text(f'default = "tiny-fit"\n[models.tiny-fit]\npath = "{tiny}"\n')
    env = {**os.environ, "COLUMNS": "250", "LOCALCHAT_CONFIG_DIR": str(tmp_path / "home")}
    r = subprocess.run([sys.executable, "-m", "localchat", "models", "show", "tiny-fit", "--config", str(config),
                        "--ctx-size", "4096", "-np", "2"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    n = need(MemoryShape.of(inspect(tiny)), 4096, 2)
    assert "0.5 KB per token (f16, 2 layers)" in r.stdout and "32768 tokens trained" in r.stdout
    assert f"2 × 4096 tokens  {fit.human(n.total)} = weights" in r.stdout and "fits in the" in r.stdout
    assert re.search(r"sizes here +4 slots × 8192 tokens: the default", r.stdout)
    small = subprocess.run([sys.executable, "-m", "localchat", "models", "show", "tiny-fit", "--config", str(config)],
                           capture_output=True, text=True, env={**env, "LOCALCHAT_FAKE_FREE_MEMORY": "1M"}, timeout=120)
    assert small.returncode == 0 and "tiny-fit does not fit in memory: the model needs" in small.stdout, small.stderr
    listing = subprocess.run([sys.executable, "-m", "localchat", "models", "--config", str(config)],
                             capture_output=True, text=True, env={**env, "LOCALCHAT_FAKE_FREE_MEMORY": "1M"}, timeout=120)
    assert any("tiny-fit" in line and "too big" in line for line in listing.stdout.splitlines()), listing.stderr


def test_a_server_on_a_small_machine_fits_what_it_loads(tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    heavy = write_tiny_model(tmp_path / "heavy.gguf", FAMILIES["chatml"], n_ctx=32768, padding=40 * MiB)
    config = tmp_path / "models.toml"
    config.write_text(f'default = "tiny-fit"\n[models.tiny-fit]\npath = "{tiny}"\n'
                      f'[models.tiny-heavy]\npath = "{heavy}"\n')
    shape = MemoryShape.of(inspect(tiny))
    # free memory between what 2 and what 4 slots of 8192 tokens need: the server must choose 2
    free = int((need(shape, 8192, 2).total + need(shape, 8192, 4).total) / 2 / (1 - fit.HEADROOM))
    monkeypatch.setenv("LOCALCHAT_FAKE_FREE_MEMORY", str(free))
    s = Server(config)
    try:
        assert "localchat: tiny-fit: 2 slots × 8192 tokens: 4 slots × 8192 tokens would need" in s.output()
        card = httpx.get(s.url + "/health").json()["loaded"][0]
        assert (card["name"], card["context_length"], card["slots"]) == ("tiny-fit", 8192, 2)
        sizing = card["sizing"]
        assert (sizing["context_length"], sizing["slots"]) == (8192, 2)
        assert sizing["memory_needed_bytes"] <= free * (1 - fit.HEADROOM) and sizing["memory_free_bytes"] == free
        assert sizing["memory"] == "RAM (LOCALCHAT_FAKE_FREE_MEMORY)"
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        answer = client.chat.completions.create(model="tiny-fit", messages=[{"role": "user", "content": "hello"}],
                                                max_tokens=3, seed=1)
        assert answer.choices[0].finish_reason in ("stop", "length")
        shown = httpx.post(s.url + "/api/show", json={"model": "tiny-fit"}).json()["model_info"]
        assert shown["llama.context_length"] == 8192 and shown["localchat.slots"] == 2
        ps = subprocess.run([sys.executable, "-m", "localchat", "ps", "--url", s.url], capture_output=True, text=True,
                            env={**os.environ, "COLUMNS": "250"}, timeout=60)
        assert "0/2" in ps.stdout and "tiny-fit: 2 × 8192 tokens: 4 slots × 8192 tokens would need" in ps.stdout
        # a model that does not fit even with 1 slot of 4096 tokens: a 503 naming the memory, before llama.cpp
        r = httpx.post(s.url + "/v1/chat/completions", timeout=60,
                       json={"model": "tiny-heavy", "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 503, r.text
        message = r.json()["error"]["message"]
        assert "tiny-heavy does not fit in memory" in message and "1 slot of 4096 tokens" in message
        assert r.json()["error"]["code"] == "model_too_large"
    finally:
        s.stop()


def test_serve_takes_llama_server_flags(tiny_models: dict[str, Path], registry_file: Path):
    s = Server(registry_file, "-m", str(tiny_models["chatml"]), "-c", "1024", "-np", "2", "--alias", "mine")
    try:
        card = httpx.get(s.url + "/health").json()["loaded"][0]
        assert (card["name"], card["context_length"], card["slots"]) == ("mine", 1024, 2)
        assert card["sizing"]["reason"].startswith("as set")
        models = {m["id"]: m for m in httpx.get(s.url + "/v1/models").json()["data"]}
        assert models["mine"]["default"] and models["mine"]["context_length"] == 1024
        assert models[next(iter(models))]["context_length"]  # the registry's models are still there
    finally:
        s.stop()


@pytest.mark.real  # Gemma 3 270M
def test_serve_takes_the_cache_types(tiny_models: dict[str, Path], registry_file: Path):
    """llama-server's -ctk / -ctv: the model answers from quantized cells, /health says which, and
    `localchat ps` shows them; a type llama.cpp is not given here is refused at start naming it."""
    s = Server(shipped_config(), "--model", GEMMA, "-c", "1024", "-np", "1", "-ctk", "q8_0", "--cache-type-v", "q4_0")
    try:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        for _ in range(2):  # the second reads its prompt from the quantized cells
            answer = client.chat.completions.create(model=GEMMA, max_tokens=4, seed=1,
                                                    messages=[{"role": "user", "content": "hello there"}])
            assert answer.choices[0].finish_reason in ("stop", "length")
        assert answer.usage.prompt_tokens_details.cached_tokens > 0
        sizing = httpx.get(s.url + "/health").json()["loaded"][0]["sizing"]
        assert (sizing["cache_type_k"], sizing["cache_type_v"]) == ("q8_0", "q4_0")
        ps = subprocess.run([sys.executable, "-m", "localchat", "ps", "--url", s.url], capture_output=True, text=True,
                            timeout=60, env={**os.environ, "COLUMNS": "200"})
        assert "q8_0/q4_0" in ps.stdout, ps.stdout
    finally:
        s.stop()
    bad = subprocess.run([sys.executable, "-m", "localchat", "serve", "--config", str(registry_file), "-ctv", "q5_1"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "cache_type_v" in bad.stderr and "q8_0" in bad.stderr, bad.stderr
    # the tiny model's heads are 16 values: no block of 32 divides them
    small = subprocess.run([sys.executable, "-m", "localchat", "serve", "--config", str(registry_file), "--model",
                            "tiny-chatml", "-ctk", "q8_0", "--port", str(free_port())],
                           capture_output=True, text=True, timeout=120)
    assert small.returncode != 0 and 'set cache_type_k and cache_type_v to "f16"' in small.stderr, small.stderr


@pytest.mark.real  # Gemma 3 270M
def test_a_quantized_cache_fits_a_longer_context(tiny: Path):
    """q8_0 cells take 34 bytes per 32 values where f16 take 64: in the memory Gemma 3 270M needs
    for 32k tokens of f16 cells, at least 1.8 times the context; the sizing says which types it counted."""
    shape = MemoryShape.of(inspect(tiny))
    assert shape.kv_per_token(("q8_0", "q8_0")) == 512 * 34 // 64 and shape.kv_per_token(("q4_0", "f16")) == 256 + 72
    gemma = MemoryShape.of(inspect(Registry.load(shipped_config()).resolve(GEMMA).file()))
    budget = need(gemma, 32768, 1).total
    f16, q8 = (largest_context(gemma, budget, 1, cache) for cache in (F16, ("q8_0", "q8_0")))
    assert f16 == 32768 and 1.8 * f16 <= q8 <= 1.89 * f16  # (the compute buffer's peak is the logits' here)
    assert gemma.kv_bytes(q8, 1, ("q8_0", "q8_0")) <= budget - need(gemma, q8, 1, cache=("q8_0", "q8_0")).compute
    sized = choose(shape, Memory(1 << 40, "RAM"), slots=1, cache=("q8_0", "q8_0"))
    assert sized.as_dict()["cache_type_k"] == sized.as_dict()["cache_type_v"] == "q8_0" and "q8_0/q8_0" in sized.describe()
