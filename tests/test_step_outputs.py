"""What a scheduler step hands out (engine/outputs.py): each request's events in order, the
requests in the order of their first event, every event once; and the streams' side
(base.deliver): a step's events reach each stream in order, the event loop woken once a step."""

from __future__ import annotations

import asyncio
import threading

import pytest

from localchat.engine.base import Stream, deliver
from localchat.engine.outputs import Outbox
from localchat.engine.params import Done, Generate, SamplingParams, Text

pytestmark = pytest.mark.fast


class Request:  # (what the outbox needs of a scheduler's Job: itself, hashable, and its sink)
    def __init__(self, sink: object) -> None:
        self.sink = sink


def test_the_outbox_keeps_each_requests_events_in_order_and_hands_each_out_once():
    box = Outbox()
    a, b = Request("a"), Request("b")
    box.put(b, 1)
    box.put(a, 2)
    box.put(b, 3)
    box.put(a, None)
    assert box.take() == [("b", [1, 3]), ("a", [2, None])]
    assert box.take() == []
    same_sink = Request("a")  # another request that ended and one that started: apart
    box.put(a, 4)
    box.put(same_sink, 5)
    assert box.take() == [("a", [4]), ("a", [5])]


def test_events_put_from_two_threads_are_all_handed_out():
    box = Outbox()
    jobs = [Request(i) for i in range(2)]
    taken: list = []

    def put(job: Request) -> None:
        for i in range(5000):
            box.put(job, i)

    threads = [threading.Thread(target=put, args=(j,)) for j in jobs]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        taken += box.take()
    taken += box.take()
    for job in jobs:
        assert [i for sink, items in taken if sink == job.sink for i in items] == list(range(5000))


def test_a_steps_events_reach_their_streams_in_order_with_one_wake_of_the_loop():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        handles: list = []
        streams = [Stream(lambda request, sink: handles.append(sink) or sink, lambda handle: None,
                          Generate([1], SamplingParams())) for _ in range(2)]
        assert handles == streams  # the stream is what the engine's events go to
        wakes = []
        original = loop.call_soon_threadsafe
        loop.call_soon_threadsafe = lambda *a: wakes.append(a) or original(*a)  # type: ignore[method-assign]
        done = Done("stop", 1, 2, 0, 0)
        events = [(streams[0], [Text("a", 0, (), 1), Text("b", 0, (), 2), done, None]),
                  (streams[1], [Text("c", 0, (), 1), done, None])]
        await asyncio.to_thread(deliver, events)
        got = [[e.text if isinstance(e, Text) else e async for e in s] for s in streams]
        assert got == [["a", "b", done], ["c", done]]
        assert [w[0].__name__ for w in wakes].count("_arrive") == 1  # (to_thread's own wake aside)
        assert streams[0].generated == {0: 2}

    asyncio.run(main())
