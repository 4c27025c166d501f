"""The engine core's step, on its own: a Scheduler made without its thread (no `deliver`) on a tiny
GGUF, stepped by the test, every step seen. What the model writes is not asserted (random
weights); what the scheduler does with the requests is: when they are admitted, how many tokens a
step gives each, that they share a step, that a cancel frees the slot at the next step and keeps
its prompt, that a full queue refuses, and that the thread-less scheduler's between-steps calls
run at once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localchat.engine.params import Done, Generate, SamplingParams, Started
from localchat.errors import QueueFull

pytestmark = pytest.mark.tiny  # the tiny-GGUF tier


@pytest.fixture(scope="module")
def model(tiny_models: dict[str, Path]) -> Iterator[object]:
    from localchat.engine.llama.model import Model

    yield Model(tiny_models["chatml"])


def make(model: object, tmp_path: Path, **kw: object) -> object:
    from localchat.engine.drafting import draft_cost
    from localchat.engine.core.scheduler import Scheduler

    costs = tmp_path / "step-costs.json"  # known step costs (faster than any step: never stale): no measuring decodes between the test's steps
    draft_cost.save(costs, draft_cost.machine_key(model.path, 1, model.n_gpu_layers), {1: 1e-6, 64: 1e-5})  # type: ignore[attr-defined]
    return Scheduler(model, n_ctx=256, n_threads=1, step_costs=str(costs), **{"parallel": 2, "max_queue": 1, **kw})


class Seen:
    def __init__(self) -> None:
        self.events: list[object] = []

    @property
    def done(self) -> Done | None:
        return next((e for e in self.events if isinstance(e, Done)), None)

    @property
    def ended(self) -> bool:
        return bool(self.events) and self.events[-1] is None


def step(s: object) -> bool:
    """One step, its outputs handed to the requests' Seen (each request's sink): whether it decoded."""
    output = s.step()  # type: ignore[attr-defined]
    for seen, items in output.events:
        seen.events.extend(items)
    return output.busy


def ask(tokens: int, max_tokens: int, **kw: object) -> Generate:
    return Generate(list(range(10, 10 + tokens)), SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True),
                    **kw)


def test_a_request_moves_only_when_stepped(model: object, tmp_path: Path):
    s = make(model, tmp_path)
    try:
        seen = Seen()
        s.submit(ask(20, 5), seen)
        assert seen.events == [] and s.stats()["queued"] == 1  # nothing runs until the caller steps
        assert step(s)  # admitted, the prompt read, the first token sampled
        assert isinstance(seen.events[0], Started) and s.stats()["busy"] == 1
        assert s.slots_info()[0].n_cells == 20  # the prompt is in the slot (the token sampled joins it next step)
        steps = 1
        while not seen.ended:
            assert step(s) and steps < 5  # a token a step (or more, when a draft is kept)
            steps += 1
        assert seen.done.finish_reason == "length" and seen.done.completion_tokens == 5
        assert seen.done.prompt_tokens == 20 and s.stats()["busy"] == 0
        assert not step(s)  # nothing left to do
    finally:
        s.close()


def test_two_requests_share_each_step_and_a_third_waits_for_a_slot(model: object, tmp_path: Path):
    s = make(model, tmp_path)
    try:
        a, b, c = Seen(), Seen(), Seen()
        s.submit(ask(12, 4), a)
        s.submit(ask(14, 4), b)
        s.submit(ask(16, 2), c)  # the queue holds it: both slots are taken at the next step
        with pytest.raises(QueueFull):
            s.submit(ask(8, 2), Seen())
        step(s)  # one decode reads both prompts and samples a token for each
        assert isinstance(a.events[0], Started) and isinstance(b.events[0], Started) and c.events == []
        assert sorted(slot.n_cells for slot in s.slots_info()) == [12, 14]
        while not (a.ended and b.ended):
            step(s)
            assert c.events == []
        assert a.done.completion_tokens == b.done.completion_tokens == 4
        step(s)  # a slot is free: the third is admitted now
        assert isinstance(c.events[0], Started)
        while not c.ended:
            step(s)
        assert c.done.completion_tokens == 2
    finally:
        s.close()


def test_a_cancel_frees_the_slot_at_the_next_step_and_keeps_the_prompt(model: object, tmp_path: Path):
    s = make(model, tmp_path, parallel=1)
    try:
        first = Seen()
        job = s.submit(ask(30, 50), first)
        step(s)
        step(s)
        s.cancel(job)
        step(s)
        assert first.ended and first.done is None and s.stats()["busy"] == 0  # ended, unfinished: the slot is free
        again = Seen()
        s.submit(ask(30, 1), again)  # the same prompt: read from the slot the cancel left
        while not again.ended:
            step(s)
        assert again.done.cached_tokens >= 29
        assert s.between_steps(lambda: "now") == "now"  # no thread: between two of the caller's steps
    finally:
        s.close()


def test_a_retry_sent_with_the_cancel_is_admitted_into_the_slot_the_cancel_frees(model: object, tmp_path: Path):
    """A client that leaves and asks again at once: both reach the scheduler before its next step.
    The cancelled request leaves first, so the retry finds its prompt (not the other, empty slot)."""
    s = make(model, tmp_path)  # two slots
    try:
        job = s.submit(ask(30, 50), Seen())
        step(s)
        step(s)
        s.cancel(job)
        again = Seen()
        s.submit(ask(30, 1), again)
        while not again.ended:
            step(s)
        assert again.done.cached_tokens >= 29
    finally:
        s.close()
