"""The engine core's step, on its own: a Scheduler made without its thread (`run=False`) on a tiny
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
    from localchat.engine.model import Model

    yield Model(tiny_models["chatml"])


def make(model: object, tmp_path: Path, **kw: object) -> object:
    from localchat.engine import draft_cost
    from localchat.engine.scheduler import Scheduler

    costs = tmp_path / "step-costs.json"  # known step costs: no measuring decodes between the test's steps
    draft_cost.save(costs, draft_cost.machine_key(model.path, 1, model.n_gpu_layers), {1: 0.01, 64: 0.1})  # type: ignore[attr-defined]
    return Scheduler(model, n_ctx=256, n_threads=1, step_costs=str(costs), run=False, **{"parallel": 2, "max_queue": 1, **kw})


class Seen:
    def __init__(self) -> None:
        self.events: list[object] = []

    def __call__(self, event: object) -> None:
        self.events.append(event)

    @property
    def done(self) -> Done | None:
        return next((e for e in self.events if isinstance(e, Done)), None)

    @property
    def ended(self) -> bool:
        return bool(self.events) and self.events[-1] is None


def ask(tokens: int, max_tokens: int, **kw: object) -> Generate:
    return Generate(list(range(10, 10 + tokens)), SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True),
                    **kw)


def test_a_request_moves_only_when_stepped(model: object, tmp_path: Path):
    s = make(model, tmp_path)
    try:
        seen = Seen()
        s.submit(ask(20, 5), seen)
        assert seen.events == [] and s.stats()["queued"] == 1  # nothing runs until the caller steps
        assert s.step()  # admitted, the prompt read, the first token sampled
        assert isinstance(seen.events[0], Started) and s.stats()["busy"] == 1
        assert s.slots_info()[0].cached == 20  # the prompt is in the slot (the token sampled joins it next step)
        steps = 1
        while not seen.ended:
            assert s.step() and steps < 5  # a token a step (or more, when a draft is kept)
            steps += 1
        assert seen.done.finish_reason == "length" and seen.done.completion_tokens == 5
        assert seen.done.prompt_tokens == 20 and s.stats()["busy"] == 0
        assert not s.step()  # nothing left to do
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
        s.step()  # one decode reads both prompts and samples a token for each
        assert isinstance(a.events[0], Started) and isinstance(b.events[0], Started) and c.events == []
        assert sorted(slot.cached for slot in s.slots_info()) == [12, 14]
        while not (a.ended and b.ended):
            s.step()
            assert c.events == []
        assert a.done.completion_tokens == b.done.completion_tokens == 4
        s.step()  # a slot is free: the third is admitted now
        assert isinstance(c.events[0], Started)
        while not c.ended:
            s.step()
        assert c.done.completion_tokens == 2
    finally:
        s.close()


def test_a_cancel_frees_the_slot_at_the_next_step_and_keeps_the_prompt(model: object, tmp_path: Path):
    s = make(model, tmp_path, parallel=1)
    try:
        first = Seen()
        job = s.submit(ask(30, 50), first)
        s.step()
        s.step()
        s.cancel(job)
        s.step()
        assert first.ended and first.done is None and s.stats()["busy"] == 0  # ended, unfinished: the slot is free
        again = Seen()
        s.submit(ask(30, 1), again)  # the same prompt: read from the slot the cancel left
        while not again.ended:
            s.step()
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
        s.step()
        s.step()
        s.cancel(job)
        again = Seen()
        s.submit(ask(30, 1), again)
        while not again.ended:
            s.step()
        assert again.done.cached_tokens >= 29
    finally:
        s.close()
