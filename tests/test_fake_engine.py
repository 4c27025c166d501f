"""The scripted engine itself (engine/fake.py): it fails as the real engines fail, as the
generation layer sees them — an error in the stream, a worker's death for every started request,
a model marked failed, a full queue — and never leaves a stream hanging."""

from __future__ import annotations

import asyncio
import time

import pytest

from localchat.engine.base import Stream
from localchat.engine.fake import Crash, FakeEngine, Wait, prompt_text
from localchat.engine.params import Done, Generate, Media, SamplingParams, Text
from localchat.errors import EngineCrashed, EngineError, ModelUnavailable, QueueFull

pytestmark = pytest.mark.fast


def request(prompt: str = "Hi", n: int = 1, **media: Media) -> Generate:
    return Generate(list(prompt.encode()), SamplingParams(), n=n, media=tuple(media.values()))


async def drain(stream: Stream) -> tuple[str, list, BaseException | None]:
    text, ends = [], []
    try:
        async for event in stream:
            if isinstance(event, Text):
                text.append(event.text)
            elif isinstance(event, Done):
                ends.append(event)
    except Exception as exc:  # noqa: BLE001 - what the stream ended with
        return "".join(text), ends, exc
    return "".join(text), ends, None


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))  # a hung stream fails here, not forever


def play(engine: FakeEngine, req: Generate | None = None) -> tuple[str, list, BaseException | None]:
    async def go():
        return await drain(engine.submit(req or request()))  # submit runs on the event loop
    return run(go())


def test_an_error_ends_the_stream_and_the_script_keeps_its_own():
    failure = EngineError("llama_decode returned -3")
    engine = FakeEngine(lambda r, i: ["Hello", failure])

    async def go():
        return [await drain(engine.submit(request())) for _ in range(2)]

    for text, ends, error in run(go()):
        assert text == "Hello" and ends == [] and isinstance(error, EngineError) and error is not failure
        assert error.message == "llama_decode returned -3"


def test_a_script_that_raises_ends_the_stream():
    def script(r, i):
        yield "a"
        raise KeyError("oops")

    text, _, error = play(FakeEngine(script))
    assert text == "a" and isinstance(error, KeyError)


def test_a_crash_fails_every_started_request_and_spares_the_queued_one():
    engine = FakeEngine(lambda r, i: ["Hel", Crash()] if "crash" in prompt_text(r) else ["x", Wait(0.2), "y"],
                        parallel=2, crash_limit=None, name="m")

    async def go():
        waiting = engine.submit(request("wait"))
        crashing = engine.submit(request("crash"))
        queued = engine.submit(request("wait"))  # no slot left: it waits, as a worker's queue
        return await asyncio.gather(drain(waiting), drain(crashing), drain(queued))

    (_, _, first), (text, _, second), (after, ends, third) = run(go())
    for error in (first, second):
        assert isinstance(error, EngineCrashed) and error.code == "engine_crashed"
        assert error.message.startswith("the model m crashed (signal SIGSEGV) while generating")
    assert text == "Hel" and third is None and after == "xy" and ends[0].finish_reason == "stop"
    assert engine.crashes == 1 and engine.state == "ready" and engine.stats().busy == 0


def test_the_crash_limit_marks_the_model_failed():
    engine = FakeEngine(lambda r, i: [Crash("signal SIGABRT")], crash_limit=2, name="m")

    async def go():
        for _ in range(2):
            assert isinstance((await drain(engine.submit(request())))[2], EngineCrashed)
        with pytest.raises(ModelUnavailable, match="the model m is marked failed.*SIGABRT"):
            engine.submit(request())

    run(go())
    assert engine.state == "failed"


def test_a_full_queue_refuses_at_submit():
    engine = FakeEngine(lambda r, i: [Wait(0.1), "x"], parallel=1, max_queue=1)

    async def go():
        streams = [engine.submit(request()), engine.submit(request())]  # one runs, one waits
        with pytest.raises(QueueFull):
            engine.submit(request())
        return await asyncio.gather(*map(drain, streams))

    assert [text for text, _, _ in run(go())] == ["x", "x"]


def test_a_slow_prompt_delays_the_first_token():
    engine = FakeEngine(lambda r, i: ["x"], prompt_delay=0.2)
    started = time.monotonic()
    assert play(engine)[0] == "x"
    assert time.monotonic() - started >= 0.2


def test_a_request_with_media_is_prepared_first():
    image = Media(at=1, kind="image", data=b"\0" * 12, id="i", width=2, height=2)
    engine = FakeEngine(lambda r, i: ["a picture"])

    async def go():
        stream = engine.submit(request("Hi", image=image))
        return await stream.prepared(), await drain(stream)

    n_prompt, (text, ends, _) = run(go())
    assert n_prompt == 3 and text == "a picture" and ends[0].prompt_tokens == 3


def test_cancelling_frees_the_slots():
    engine = FakeEngine(lambda r, i: ["x"] + [Wait(0.05), "x"] * 100, parallel=2)

    async def go():
        stream = engine.submit(request(n=2))
        async for _ in stream:
            break  # the client left
        await asyncio.sleep(0.01)
        return engine.stats()

    assert run(go()).busy == 0
