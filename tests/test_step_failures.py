"""A bug in a step is one request's error, never a hung request or a stuck slot: a drafter that
raises costs its answer the drafts (the same greedy tokens without them); anything else a step
raises ends the running requests with an error, and the next request is served (tiny model, real
llama.cpp)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator

import pytest

from localchat.engine import Done, Generate, LocalEngine, SamplingParams, Text
from localchat.engine.params import SpeedParams
from localchat.engine.core.decoder import Decoder
from localchat.engine.drafting.drafts import TextDrafter
from localchat.errors import EngineError
from localchat.families import FAMILIES, render_prompt
from conftest import tiny_engine


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> Iterator[LocalEngine]:
    yield from tiny_engine(tmp_path_factory, parallel=2)


def ask(engine: LocalEngine, draft: int = 0) -> tuple[list[int], Done | None, BaseException | None]:
    """The tokens, the Done event and the error of one greedy request (within 60 s: a hang fails)."""
    tokens = engine.tokenizer.tokenize(render_prompt(FAMILIES["chatml"].template, [
        {"role": "user", "content": "Tell me about the sea and the world, the sea and the world."}]).segments)
    params = SamplingParams(max_tokens=24, temperature=0, repetition_stop=0, ignore_eos=True)

    async def go():
        ids, done, error = [], None, None
        try:
            async for event in engine.generate(Generate(tokens, params, frozenset(), logprobs=0,
                                                        speed=SpeedParams(ngram_draft=draft))):
                if isinstance(event, Text):
                    ids += [t.id for t in event.logprobs]
                elif isinstance(event, Done):
                    done = event
        except EngineError as exc:
            error = exc
        return ids, done, error
    return asyncio.run(asyncio.wait_for(go(), 60))


def test_a_drafter_that_raises_costs_the_answer_its_drafts_only(engine: LocalEngine, monkeypatch, caplog):
    plain, done, error = ask(engine)
    assert error is None and len(plain) == 24
    calls = []

    def broken(self, room):
        calls.append(room)
        raise RuntimeError("a bug in the drafter")
    monkeypatch.setattr(TextDrafter, "available", broken)
    with caplog.at_level(logging.WARNING, logger="localchat.engine"):
        ids, done, error = ask(engine, draft=8)
    assert error is None and done is not None and ids == plain and done.drafted == 0
    assert len(calls) == 1  # once failed, no more drafting for that answer
    assert sum("a drafter failed" in r.getMessage() for r in caplog.records) == 1


def test_a_step_that_raises_ends_its_requests_with_an_error_and_the_next_is_served(engine: LocalEngine, monkeypatch):
    real = Decoder.plan
    raised = []

    def once(self, *args, **kwargs):
        if not raised:
            raised.append(True)
            raise RuntimeError("a bug in the step")
        return real(self, *args, **kwargs)
    monkeypatch.setattr(Decoder, "plan", once)
    ids, done, error = ask(engine)
    assert raised and isinstance(error, EngineError) and "a bug in the step" in error.message and done is None
    deadline = time.monotonic() + 10  # (the error reaches the client first; the slots are freed right after it)
    while any(s.busy for s in engine.scheduler.slots) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(not s.busy for s in engine.scheduler.slots)
    for _ in range(3):  # both slots free again, the engine's thread alive
        ids, done, error = ask(engine)
        assert error is None and len(ids) == 24
