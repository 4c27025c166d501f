"""Loop detection (engine/sampling/repetition.py): the rule on token lists, and a looping answer ending as
each protocol's "out of tokens" over the scripted engine (each piece a token), with the knob
`repetition_stop` set per request in each protocol's way and per model in models.toml.
The real engine's side is in test_runaway.py."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import httpx
import pytest

from conftest import TINY_CTX
from test_protocols import post as scripted_post
from localchat.engine.params import SamplingParams
from localchat.engine.sampling.repetition import MAX_PERIOD, LoopDetector, detector
from localchat.models import ModelSpec, Registry, Settings
from localchat.models.catalog import SamplingDefaults

pytestmark = pytest.mark.fast  # the fast tier (scripts/test --fast)

DEFAULT = SamplingParams().repetition_stop
HI = [{"role": "user", "content": "Hi"}]


def trips_at(tokens: list[int], min_span: int = DEFAULT) -> int | None:
    """How many tokens the detector had read when it tripped (None: it never did)."""
    d = LoopDetector(min_span)
    return next((i + 1 for i, t in enumerate(tokens) if d.push(t)), None)


# -- the rule ------------------------------------------------------------------------------------------

def test_a_loop_ends_once_it_spans_min_span_tokens():
    assert trips_at([7] * 500) == DEFAULT  # period 1
    assert trips_at([1, 2, 3] * 200) == DEFAULT  # period 3
    assert trips_at(list(range(50)) + [4, 5] * 200) == 50 + DEFAULT  # counted from where the loop starts


def test_a_long_period_needs_three_whole_periods():
    unit = list(range(100))
    assert trips_at(unit * 5) == 300  # more than min_span: three periods
    assert trips_at(list(range(MAX_PERIOD + 1)) * 4) is None  # longer than any period looked for


def test_min_span_is_the_knob():
    assert trips_at([1, 2] * 100, 40) == 40
    assert trips_at([1, 2] * 100, 2) == 6  # never fewer than three periods
    assert detector(0) is None and detector(5) is not None


def test_what_changes_inside_the_span_never_trips():
    assert trips_at(list(range(5000))) is None
    rng = random.Random(1)
    assert trips_at([rng.randrange(8) for _ in range(5000)]) is None  # a small alphabet, no loop
    # a numbered list: "1. x\n2. x\n…" — the same line but for its number
    assert trips_at([t for i in range(300) for t in (i, 1000, 1001, 1002)]) is None
    # code whose lines repeat but for one name, a table whose rows differ in one cell
    assert trips_at([t for i in range(200) for t in (10, 11, 12, 2000 + i, 13, 14)]) is None


def test_legitimate_repetition_below_the_span_does_not_trip():
    # a separator row written 3 times, an 8-column table row of ones 5 times: short spans
    row = [20, 21, 22, 21, 22, 21, 22, 21, 22, 23]
    assert trips_at([1, 2, 3] + row * 5 + [4, 5, 6] * 10 + list(range(30, 200))) is None
    # the same 40-token line twice (a line written twice is not a loop yet)
    line = list(range(300, 340))
    assert trips_at(line * 2 + list(range(400, 600))) is None
    # an 8 × 8 matrix of zeros: 8 identical 25-token rows (Qwen2.5's tokens), a 200-token span
    assert trips_at([1, 2] + list(range(500, 525)) * 8 + list(range(600, 700))) is None


# -- every protocol: a loop ends as "out of tokens" --------------------------------------------------

LOOP = ["x"] + ["ab", " "] * 1000  # one piece, then a loop of period 2 pieces


@pytest.fixture(scope="module")
def registry(tiny_models: dict[str, Path]) -> Registry:
    spec = {"path": tiny_models["chatml"], "context_length": TINY_CTX, "parallel": 2}
    specs = {"chatml": ModelSpec(name="chatml", **spec),
             "looser": ModelSpec(name="looser", sampling=SamplingDefaults(repetition_stop=0), **spec),
             "stricter": ModelSpec(name="stricter", sampling=SamplingDefaults(repetition_stop=20), **spec)}
    return Registry(specs, "chatml", settings=Settings(worker=False))


def post(registry: Registry, path: str, body: dict) -> httpx.Response:
    """One request to an app whose every model plays the looping script."""
    return scripted_post(registry, lambda r, i: LOOP, path, body)


def ask(registry: Registry, protocol: str, budget: int, model: str = "chatml", **knob: int) -> tuple[str, int]:
    """(the protocol's finish, completion tokens) for the looping script."""
    if protocol == "chat":
        r = post(registry, "/v1/chat/completions", {"model": model, "messages": HI, "max_tokens": budget, **knob}).json()
        return r["choices"][0]["finish_reason"], r["usage"]["completion_tokens"]
    if protocol == "completions":
        r = post(registry, "/v1/completions", {"model": model, "prompt": "x", "max_tokens": budget, **knob}).json()
        return r["choices"][0]["finish_reason"], r["usage"]["completion_tokens"]
    if protocol == "messages":
        r = post(registry, "/v1/messages", {"model": model, "messages": HI, "max_tokens": budget, **knob}).json()
        return r["stop_reason"], r["usage"]["output_tokens"]
    if protocol == "responses":
        r = post(registry, "/v1/responses", {"model": model, "input": "Hi", "max_output_tokens": budget, **knob}).json()
        return (r["incomplete_details"] or {}).get("reason", r["status"]), r["usage"]["output_tokens"]
    r = post(registry, "/api/chat", {"model": model, "messages": HI, "stream": False,
                                     "options": {"num_predict": budget, **knob}}).json()
    return r["done_reason"], r["eval_count"]


LENGTH = {"chat": "length", "completions": "length", "messages": "max_tokens", "responses": "max_output_tokens",
          "ollama": "length"}


@pytest.mark.parametrize("protocol", list(LENGTH))
def test_a_loop_ends_as_out_of_tokens(registry: Registry, protocol: str, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="localchat.access")
    assert ask(registry, protocol, 1000) == (LENGTH[protocol], 1 + DEFAULT)
    assert "finish=length reason=repetition" in caplog.text


@pytest.mark.parametrize("protocol", list(LENGTH))
def test_the_request_sets_the_span_or_turns_it_off(registry: Registry, protocol: str,
                                                   caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="localchat.access")
    assert ask(registry, protocol, 1000, repetition_stop=30) == (LENGTH[protocol], 1 + 30)
    assert ask(registry, protocol, 300, repetition_stop=0) == (LENGTH[protocol], 300)
    lines = [r.getMessage() for r in caplog.records if r.name == "localchat.access"]
    assert "reason=repetition" in lines[0] and "reason=" not in lines[1] and "finish=length" in lines[1]


def test_the_model_sets_the_default_a_request_overrides_it(registry: Registry):
    assert ask(registry, "chat", 300, "looser") == ("length", 300)
    assert ask(registry, "ollama", 300, "stricter") == ("length", 1 + 20)
    assert ask(registry, "messages", 300, "looser", repetition_stop=50) == ("max_tokens", 1 + 50)


def test_models_toml_reads_it(tmp_path: Path, tiny_models: dict[str, Path]):
    config = tmp_path / "models.toml"
    config.write_text(f'[models.a]\npath = "{tiny_models["chatml"]}"\n[models.a.sampling]\nrepetition_stop = 0\n'
                      f'[models.b]\npath = "{tiny_models["chatml"]}"\n')
    registry = Registry.load(config, tmp_path / "none.toml")
    assert registry.resolve("a").sampling.repetition_stop == 0
    assert registry.resolve("b").sampling.repetition_stop == DEFAULT


@pytest.mark.parametrize("path, body, where", [
    ("/v1/chat/completions", {"messages": HI, "repetition_stop": -1}, "repetition_stop"),
    ("/api/chat", {"messages": HI, "options": {"repetition_stop": -1}}, "repetition_stop"),
])
def test_a_negative_span_is_refused(registry: Registry, path: str, body: dict, where: str):
    r = post(registry, path, body)
    assert r.status_code == 400 and where in r.text
