"""A request that waits — in the queue, or while its prompt is read — is never silent: every
streaming protocol sends a keepalive at least every 10 seconds before its first token (agents
drop a stream that stays silent for a few minutes). One slot, so a long answer makes the others
wait; the real default interval, so this module takes about 15 seconds."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import Server, shipped
from localchat.api.sse import KEEPALIVE

MODEL = "gemma-3-270m"
ASK = [{"role": "user", "content": "Say hi."}]
FIRST_TOKEN = re.compile(r'"(content|text)":"[^"]|output_text\.delta|content_block_delta')


@pytest.fixture(scope="module")
@shipped
def one_slot(registry_file: Path) -> Iterator[Server]:
    s = Server(registry_file, "--parallel", "1", "--model", MODEL)
    yield s
    s.stop()


def first_lines(url: str, path: str, body: dict, key: str, out: dict) -> None:
    """The stream's lines up to its first content, each with the seconds it came at."""
    import time

    start, lines = time.monotonic(), []
    with httpx.Client(base_url=url, timeout=120) as http, http.stream("POST", path, json=body) as r:
        out[key + ".status"] = r.status_code
        for line in r.iter_lines():
            lines.append((round(time.monotonic() - start, 1), line))
            if FIRST_TOKEN.search(line):
                break
    out[key] = lines


def test_waiting_streams_get_keepalives_before_their_first_token(one_slot: Server):
    with httpx.Client(base_url=one_slot.url, timeout=120) as http:
        # it must hold the slot: no end at EOS, and no early end when the base model's text loops (repetition_stop)
        long = {"model": MODEL, "messages": ASK, "max_tokens": 2000, "ignore_eos": True, "repetition_stop": 0,
                "seed": 1, "stream": True}
        with http.stream("POST", "/v1/chat/completions", json=long) as running:
            lines = running.iter_lines()  # kept: a closed iterator would close the stream
            next(lines)  # it holds the only slot now
            out: dict = {}
            waiting = [
                ("/v1/chat/completions", {"model": MODEL, "messages": ASK, "max_tokens": 2, "stream": True}, "chat"),
                ("/v1/responses", {"model": MODEL, "input": "Say hi.", "max_output_tokens": 2, "stream": True}, "responses"),
                ("/v1/messages", {"model": MODEL, "messages": ASK, "max_tokens": 2, "stream": True}, "messages"),
                ("/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 2, "stream": True}, "completions"),
            ]
            threads = [threading.Thread(target=first_lines, args=(one_slot.url, *w, out)) for w in waiting]
            for t in threads:
                t.start()
            threads[0].join(KEEPALIVE + 3)  # they all wait past one keepalive interval
        for t in threads:  # the long answer is cancelled: the waiting ones run
            t.join(120)
    for _, _, key in waiting:
        assert out[key + ".status"] == 200
        kept = [(t, line) for t, line in out[key] if line in (": keepalive", "event: ping", "event: response.in_progress")]
        late = [t for t, line in kept if t >= KEEPALIVE - 1]
        assert late, (key, out[key])  # a keepalive came while it waited, before its first token
    # Anthropic's keepalive is its own `ping` event, the Responses API's a repeated response.in_progress (a
    # real event: the Codex CLI times a stream out on events, not bytes); chat and completions send a comment
    assert any(line == "event: ping" and t >= KEEPALIVE - 1 for t, line in out["messages"])
    assert any(line == "event: response.in_progress" and t >= KEEPALIVE - 1 for t, line in out["responses"])
