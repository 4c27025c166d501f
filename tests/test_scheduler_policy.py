"""The scheduler's decisions with no model: a Scheduler made with a scripted executor (what it
asks of llama.cpp — sequences, the cells a prompt finds, a decode — played by plain Python: a
prompt is read in one step, each sequence writes one token a step until its budget) and stepped
by the test. Admission (first come, first served; n > 1 waits for n free slots), the queue's
limit, a cancel (queued: never starts; running: freed at the next step, its prompt kept), slot
choice (the longest shared prefix, else an empty slot, else the least recently used one; the
conversation's own slot by prompt_cache_key), a request the executor cannot start, and a step
that fails. The same scheduler with llama.cpp's executor: tests/test_scheduler_step.py."""

from __future__ import annotations

import pytest

from localchat.engine.core.decoder import Row, StepPlan
from localchat.engine.params import Done, Generate, SamplingParams, Started, Text
from localchat.engine.cache.prefix_cache import Placement
from localchat.engine.core.scheduler import Scheduler
from localchat.engine.state.slot import Slot
from localchat.errors import EngineError, InvalidRequest, QueueFull

pytestmark = pytest.mark.fast


class Writer:
    """A scripted sequence: one token a step, "length" at its budget."""

    def __init__(self, index: int, slot: Slot, budget: int, emit) -> None:
        self.index, self.slot, self.budget, self.emit = index, slot, budget, emit
        self.generated, self.finish = 0, None

    def write(self) -> None:
        self.generated += 1
        self.slot.cells.append(1000 + self.generated)
        self.emit(Text(f"t{self.generated}", self.index, (), self.generated))
        if self.generated >= self.budget:
            self.finish = "length"

    def cancel(self) -> None:
        self.finish = "cancelled"

    def done(self, prompt_tokens: int, cached_tokens: int) -> Done:
        return Done(self.finish or "cancelled", prompt_tokens, self.generated, cached_tokens, self.index)


class Script:
    """The executor, scripted. `refuse`: start() raises for prompts of that length; `explode`:
    decode() raises at that step."""

    media = None
    probing = False
    adapters = ()

    def __init__(self, parallel: int) -> None:
        self.slots = [Slot(i) for i in range(parallel)]
        self.steps: list[list[int]] = []  # per decode: the first prompt token of each job decoded
        self.refuse: int | None = None
        self.explode: int | None = None
        self.closed = False

    def measure(self) -> None:
        raise AssertionError("nothing to measure")

    def start(self, job) -> list[Writer]:
        if len(job.tokens) == self.refuse:
            raise InvalidRequest("this grammar cannot be made", param="grammar")
        budget = job.request.params.max_tokens
        return [Writer(i, slot, budget, job.emit) for i, slot in enumerate(job.slots)]

    def place(self, job) -> Placement:
        lead = job.slots[0]
        n = 0
        if job.request.cache_prompt:
            while n < min(len(lead.cells), len(job.tokens) - 1) and lead.cells[n] == job.tokens[n]:
                n += 1
        return Placement(n, list(job.tokens[n:]), held=Slot(lead.seq_id, lead.cells[:n]))

    def land(self, job) -> None:
        return None

    def decode_media(self, adapters, jobs, fail) -> list:
        return []

    def plan(self, jobs) -> StepPlan:
        """A row per job: its whole prompt in one step, else its sequences' next tokens."""
        if self.explode is not None and len(self.steps) == self.explode:
            self.steps.append([])
            raise RuntimeError("a bug in a step")
        self.steps.append([job.tokens[0] for job in jobs])
        return StepPlan([Row(job.slots[0], list(job.pending), job if job.pending else None,
                             reads=job if job.pending else None) for job in jobs], [])

    def execute(self, adapters, plan: StepPlan) -> int:
        return 0  # (the scheduler adds each row's tokens to its slot's cells)

    def share(self, job) -> None:
        pass  # (the scheduler copies what the lead slot holds to the others)

    def update(self, plan: StepPlan, jobs, fail) -> None:
        for job in jobs:
            for seq in job.seqs:
                seq.write()

    def finish(self, job) -> None:
        pass

    def empty(self, slot: Slot) -> None:
        pass  # (the scheduler empties the slot)

    def release(self, job) -> None:
        pass

    def stop(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class Run:
    """A scheduler on a script, and what each request has been handed (StepOutput's events)."""

    def __init__(self, parallel: int = 2, max_queue: int | None = 2) -> None:
        self.script = Script(parallel)
        self.s = Scheduler(None, n_ctx=512, parallel=parallel, max_queue=max_queue, executor=self.script)  # type: ignore[arg-type]
        self.seen: dict[str, list] = {}

    def ask(self, name: str, prompt: list[int], max_tokens: int = 3, n: int = 1, **kw):
        self.seen[name] = []
        request = Generate(prompt, SamplingParams(max_tokens=max_tokens, temperature=0), n=n, **kw)
        return self.s.submit(request, name)

    def step(self) -> bool:
        output = self.s.step()
        for name, items in output.events:
            self.seen[name] += items
        return output.busy

    def started(self, name: str) -> Started | None:
        return next((e for e in self.seen[name] if isinstance(e, Started)), None)

    def ended(self, name: str) -> bool:
        return bool(self.seen[name]) and self.seen[name][-1] is None

    def done(self, name: str) -> list[Done]:
        return [e for e in self.seen[name] if isinstance(e, Done)]

    def until_ended(self, *names: str, steps: int = 20) -> None:
        for _ in range(steps):
            if all(self.ended(n) for n in names):
                return
            self.step()
        raise AssertionError(f"not ended after {steps} steps: {[n for n in names if not self.ended(n)]}")


PROMPT_A = list(range(100, 140))
PROMPT_B = list(range(200, 240))


def test_first_come_first_served_and_a_third_waits_for_a_free_slot():
    r = Run(parallel=2)
    r.ask("a", PROMPT_A, 2)
    r.ask("b", PROMPT_B, 4)
    r.ask("c", list(range(300, 340)), 1)
    assert not r.seen["a"] and r.s.stats()["queued"] == 3  # nothing moves until a step
    assert r.step()
    assert r.started("a") and r.started("b") and not r.seen["c"]
    assert r.script.steps[0] == [100, 200]  # both decoded in the one step
    r.until_ended("a")
    assert not r.started("c")  # a's slot is freed as a ends: c is admitted at the next step
    r.step()
    assert r.started("c")
    r.until_ended("b", "c")
    assert [d.completion_tokens for n in "abc" for d in r.done(n)] == [2, 4, 1]
    assert all(not slot.busy for slot in r.script.slots) and not r.step()


def test_n_completions_wait_for_n_free_slots_and_the_queue_stays_in_order():
    r = Run(parallel=2)
    r.ask("one", PROMPT_A, 5)
    r.ask("two", PROMPT_B, 1, n=2)  # needs both slots
    r.ask("after", list(range(300, 340)), 1)  # behind it, though a slot is free: first come, first served
    r.step()
    assert r.started("one") and not r.started("two") and not r.started("after")
    r.until_ended("one")
    r.step()
    assert r.started("two") and not r.started("after")
    r.until_ended("two", "after")
    assert sorted(d.index for d in r.done("two")) == [0, 1]
    with pytest.raises(InvalidRequest) as refused:
        r.ask("three", PROMPT_A, 1, n=3)
    assert refused.value.field == "n"


def test_the_queue_refuses_past_its_limit_beyond_the_free_slots():
    r = Run(parallel=1, max_queue=1)
    r.ask("a", PROMPT_A, 5)  # takes the free slot at the next step
    r.ask("b", PROMPT_B, 5)  # waits
    with pytest.raises(QueueFull):
        r.ask("c", PROMPT_B, 5)
    r.step()
    with pytest.raises(QueueFull):  # a runs, b waits: still one waiting
        r.ask("c", PROMPT_B, 5)
    r.until_ended("a")
    r.step()  # b takes the slot: the queue has room again
    r.ask("c", PROMPT_B, 1)


def test_a_cancelled_queued_request_never_starts():
    r = Run(parallel=1)
    r.ask("a", PROMPT_A, 3)
    waiting = r.ask("b", PROMPT_B, 3)
    r.step()
    r.s.cancel(waiting)
    r.until_ended("a", "b")
    assert r.seen["b"] == [None]  # ended, never started, no Done
    assert all(200 not in step for step in r.script.steps)


def test_a_cancel_frees_the_slot_at_the_next_step_and_the_retry_finds_its_prompt():
    r = Run(parallel=2)
    running = r.ask("a", PROMPT_A, 50)
    r.step()
    r.step()
    r.s.cancel(running)
    r.ask("retry", PROMPT_A, 1)  # sent with the cancel, before the next step
    r.step()
    assert r.ended("a") and not r.done("a")  # cancelled: ended, no Done
    assert r.started("retry").cached == len(PROMPT_A) - 1  # the slot the cancel left (the other is empty)
    r.until_ended("retry")


def test_a_prompt_goes_to_the_slot_that_holds_the_longest_prefix():
    r = Run(parallel=2)
    r.ask("a", PROMPT_A, 1)
    r.ask("b", PROMPT_B, 1)
    r.until_ended("a", "b")
    holder = next(s.seq_id for s in r.script.slots if s.cells[:1] == [200])
    job = r.ask("b2", PROMPT_B + [7, 8, 9], 1)  # b's conversation, a turn later
    r.step()
    assert job.slots[0].seq_id == holder and r.started("b2").cached == len(PROMPT_B)


def test_an_unrelated_prompt_takes_an_empty_slot_then_the_least_recently_used():
    r = Run(parallel=3)
    r.ask("a", PROMPT_A, 1)
    r.until_ended("a")
    first = r.ask("b", PROMPT_B, 1)
    r.step()
    assert not first.slots[0].cells[:1] == [100] and r.started("b").cached == 0  # a's cache is left alone
    r.until_ended("b")
    r.ask("c", list(range(300, 340)), 1)
    r.until_ended("c")  # every slot holds a prompt now; a's was used least recently
    job = r.ask("d", list(range(400, 440)), 1)
    r.step()
    assert r.started("d").cached == 0 and job.slots[0].cells[:1] == [400]
    assert not any(s.cells[:1] == [100] for s in r.script.slots)  # a's slot was the one given up


def test_a_conversation_goes_back_to_its_own_slot_by_its_cache_key():
    r = Run(parallel=2)
    r.ask("a", PROMPT_A, 1, cache_key="alice")
    r.ask("b", PROMPT_B, 1, cache_key="bob")
    r.until_ended("a", "b")
    alice = next(s for s in r.script.slots if s.key == "alice")
    job = r.ask("a2", list(range(500, 540)), 1, cache_key="alice")  # no prefix shared anywhere
    r.step()
    assert job.slots[0] is alice


def test_a_request_the_executor_cannot_start_fails_alone():
    r = Run(parallel=2)
    r.script.refuse = 7
    r.ask("bad", list(range(7)), 3)
    r.ask("good", PROMPT_A, 2)
    r.until_ended("bad", "good")
    assert isinstance(r.seen["bad"][0], InvalidRequest) and r.seen["bad"][-1] is None
    assert [d.completion_tokens for d in r.done("good")] == [2]
    assert all(not slot.busy for slot in r.script.slots)


def test_a_step_that_raises_ends_the_running_requests_with_an_error_and_the_next_is_served():
    r = Run(parallel=2)
    r.script.explode = 1
    r.ask("a", PROMPT_A, 5)
    r.step()
    assert r.step()  # the step raised: a ends with an error, its slot emptied
    assert isinstance(r.seen["a"][-2], EngineError) and r.ended("a")
    assert all(not slot.busy and not slot.cells for slot in r.script.slots)
    r.ask("b", PROMPT_B, 1)
    r.until_ended("b")
    assert [d.completion_tokens for d in r.done("b")] == [1]


def test_unloading_ends_what_runs_and_waits_with_an_error():
    r = Run(parallel=1)
    r.ask("a", PROMPT_A, 50)
    r.ask("b", PROMPT_B, 50)
    r.step()
    r.s.close()
    leftover = r.s.outbox.take()  # (no thread: what close() told them is still here)
    told = {name: items for name, items in leftover}
    assert [type(e) for e in told["a"]] == [EngineError, type(None)] == [type(e) for e in told["b"]]
    assert r.script.closed
    assert r.s.between_steps(lambda: "now") == "now"
