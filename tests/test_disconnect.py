"""A client that goes away stops the work: the engine is free for the next request at once."""

from __future__ import annotations

import time

import httpx
import openai

from conftest import GEMMA

LONG = {"model": GEMMA, "messages": [{"role": "user", "content": "Tell me a very long story."}],
        "max_tokens": 4000, "ignore_eos": True}  # ~80 s of decoding on 2 cores if it ran to the end


def assert_engine_free(client: openai.OpenAI, why: str) -> None:
    """A short request completes long before the abandoned one could have finished (~80 s)."""
    start = time.monotonic()
    r = client.chat.completions.create(model=GEMMA, messages=[{"role": "user", "content": "hi"}], max_tokens=3)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert time.monotonic() - start < 20, why


def test_closed_stream_frees_the_engine(server, client: openai.OpenAI):
    with httpx.Client(base_url=server.url, timeout=60) as h:
        with h.stream("POST", "/v1/chat/completions", json={**LONG, "stream": True}) as r:
            seen = 0
            for line in r.iter_lines():
                seen += line.startswith("data: ")
                if seen >= 5:
                    break
    assert_engine_free(client, "the abandoned stream kept the engine busy")


def test_abandoned_non_streaming_request_frees_the_engine(server, client: openai.OpenAI):
    try:
        httpx.post(server.url + "/v1/chat/completions", json=LONG, timeout=2)
    except httpx.TimeoutException:
        pass
    assert_engine_free(client, "the abandoned request kept the engine busy")


def test_queued_request_whose_client_left_never_starts(server, client: openai.OpenAI):
    """A runs; B queues behind it and its client gives up; when A is closed, B must not run."""
    import threading

    with httpx.Client(base_url=server.url, timeout=60) as h:
        with h.stream("POST", "/v1/chat/completions", json={**LONG, "stream": True}) as r:
            lines = r.iter_lines()
            next(lines)

            def queued() -> None:
                try:
                    httpx.post(server.url + "/v1/chat/completions", json=LONG, timeout=1.5)
                except httpx.TimeoutException:
                    pass

            t = threading.Thread(target=queued)
            t.start()
            t.join()
    assert_engine_free(client, "the abandoned queued request ran anyway")
