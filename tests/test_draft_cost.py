"""The cost model of drafts (engine/draft_cost.py): a step's cost from a few measured points, the
draft lengths it picks on a CPU and on a GPU, one slot's draft never making the others wait more
than LATE allows, and the measurement kept in a file and read back at the next load."""

from __future__ import annotations

import json

import pytest

from localchat.engine import draft_cost
from localchat.engine.draft_cost import LATE, StepCost, geometric, lengths, split_cost

CPU = draft_cost.DEFAULT  # measured on a 2-core CPU (the 1.5B): 64 tokens cost 17.5 steps of one
GPU = StepCost({1: 0.010, 2: 0.0101, 4: 0.0102, 8: 0.0103, 16: 0.0105, 32: 0.0108, 64: 0.0115})


@pytest.mark.fast
def test_a_step_cost_is_read_between_and_past_the_measured_points():
    cost = StepCost({1: 2.0, 4: 5.0, 8: 14.0})  # seconds: relative to one token's step
    assert cost(1) == 1.0 and cost(4) == 2.5 and cost(8) == 7.0
    assert cost(2) == pytest.approx(1.5) and cost(6) == pytest.approx(4.75)
    assert cost(12) == pytest.approx(11.5)  # past the last point: the last segment's slope


def g(p: float, most: int = 64) -> list[float]:
    return geometric(p, most)


def alone(cost: StepCost, survival: list[float]) -> int:
    """The length one sequence drafts when it is the only one generating (slot 0)."""
    return lengths(cost, [(0, survival)], {0: 1}, writers=1)[0]


@pytest.mark.fast
def test_a_step_is_a_pass_per_ubatch_of_consecutive_slots_with_as_many_tokens_each():
    assert split_cost(CPU, {0: 4}) == CPU(4)
    assert split_cost(CPU, {0: 1, 1: 1, 2: 1, 3: 1}) == CPU(4)
    assert split_cost(CPU, {0: 3, 1: 1, 2: 1, 3: 1}) == CPU(4) + CPU(2)  # slot 0's draft: a pass of its own
    assert split_cost(CPU, {0: 17, 1: 17}) == CPU(34)  # as long as each other: one pass
    assert split_cost(CPU, {0: 1, 2: 1}) == 2 * CPU(1)  # slots 0 and 2 are not consecutive


@pytest.mark.fast
def test_a_copy_drafts_long_on_a_cpu_and_longer_on_a_gpu():
    assert alone(CPU, g(0.97)) >= 15  # a step of 16 costs 7.3 here: long drafts are what pays on a CPU
    assert alone(GPU, g(0.97)) == 64  # a step of 65 costs about one
    assert alone(GPU, g(0.9, 5)) == 5  # never more than the text offers
    # a draft whose first tokens are the risk and the rest follows (a copy, once it holds): long
    assert alone(CPU, [0.8 * 0.999 ** i for i in range(64)]) >= 31


@pytest.mark.fast
def test_drafts_that_do_not_pay_are_not_made():
    assert alone(CPU, g(0.5)) == 0  # prose-like odds: a step of 2 costs 1.83 here
    assert alone(CPU, g(0.3)) == 0
    assert alone(GPU, g(0.3)) > 0  # where a step of 65 costs one, even these pay
    assert alone(CPU, []) == 0


@pytest.mark.fast
def test_one_slots_draft_never_makes_the_others_wait_more_than_late():
    four = {0: 1, 1: 1, 2: 1, 3: 1}
    # four streams: two copying, two writing prose (no draft)
    a, b = lengths(CPU, [(0, g(0.97)), (1, g(0.97))], four, writers=4)
    assert split_cost(CPU, {**four, 0: 1 + a, 1: 1 + b}) <= LATE * CPU(4)
    # all four have drafts, the prose ones guesses (their first token kept 6 times in 10): no excuse
    chosen = lengths(CPU, [(0, g(0.97)), (1, g(0.97)), (2, g(0.6)), (3, g(0.6))], four, writers=4)
    assert split_cost(CPU, {slot: 1 + d for slot, d in enumerate(chosen)}) <= LATE * CPU(4)
    # a prompt chunk in the step (slot 1): it is waiting too
    [with_prompt] = lengths(CPU, [(0, g(0.97))], {0: 1, 1: 256}, writers=1)
    assert split_cost(CPU, {0: 1 + with_prompt, 1: 256}) <= LATE * split_cost(CPU, {0: 1, 1: 256})
    # two copies: drafting as long as each other, one pass; neither waits past LATE per token
    a, b = lengths(CPU, [(0, g(0.97)), (1, g(0.97))], {0: 1, 1: 1}, writers=2)
    assert a == b > 15


@pytest.mark.fast
def test_the_measured_costs_are_kept_per_model_machine_and_threads(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    key = draft_cost.machine_key(model, 2, 0)
    assert key != draft_cost.machine_key(model, 4, 0) and key != draft_cost.machine_key(model, 2, 99)
    store = tmp_path / "cache" / "step-costs.json"
    assert draft_cost.load(store, key) is None
    draft_cost.save(store, key, {1: 0.05, 2: 0.09, 64: 0.8})
    draft_cost.save(store, "another", {1: 1.0})
    cost = draft_cost.load(store, key)
    assert cost is not None and cost.measured and cost(64) == pytest.approx(16.0)
    assert set(json.loads(store.read_text())) == {key, "another"}
    store.write_text("{not json")
    assert draft_cost.load(store, key) is None  # a torn file: measured again, never an error


def test_an_engine_measures_while_idle_once_and_reads_the_figures_back(tmp_path, monkeypatch):
    import time

    from localchat.engine import LocalEngine
    from localchat.families import FAMILIES
    from localchat.devtools.tinymodels import write_tiny_model

    path = write_tiny_model(tmp_path / "m.gguf", FAMILIES["chatml"], n_ctx=256)
    store = tmp_path / "step-costs.json"
    engine = LocalEngine(path, n_ctx=256, parallel=1, step_costs=str(store))
    try:
        deadline = time.monotonic() + 60
        while not store.exists() and time.monotonic() < deadline:  # measured while it has nothing to do
            time.sleep(0.05)
        assert engine.scheduler.executor.decoder.cost.measured
        figures = engine.scheduler.executor.decoder.cost.points
    finally:
        engine.close()
    assert [k for k, _ in figures] == list(draft_cost.KS)

    def never(*_: object) -> None:
        raise AssertionError("measured again")
    monkeypatch.setattr(draft_cost, "probe", never)
    engine = LocalEngine(path, n_ctx=256, parallel=1, step_costs=str(store))
    try:
        assert engine.scheduler.executor.decoder.cost.measured and engine.scheduler.executor.decoder.cost.points == figures
    finally:
        engine.close()
