"""scripts/soak --agents judges a follow-up sent the first time by what it reads beyond the tokens no
prefix cache can hold; `unshared` counts them with the server's own /apply-template and /tokenize:
the tokens past the longest prefix a chat completions request shares with the request before it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import Server

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_soak_agents import soak  # noqa: E402  (the script, loaded once)

MODEL = "tiny-chatml"


@pytest.fixture(scope="module")
def server(registry_file: Path) -> Iterator[Server]:
    s = Server(registry_file, "--model", MODEL)
    yield s
    s.stop()


def test_the_tokens_past_the_prefix_a_follow_up_shares_with_the_turn_before(server):
    system = {"role": "system", "content": "You are a careful assistant. " * 20}
    ask = {"role": "user", "content": "Say hi."}
    answer = {"role": "assistant", "content": "Hi there."}
    then = {"role": "user", "content": "And now say bye."}
    reminder = {"role": "user", "content": "Remember: answer in one line. " * 5}
    fixture = soak.Fixture("x", [
        ("/v1/chat/completions", {"messages": [system, ask, reminder]}),
        ("/v1/chat/completions", {"messages": [system, ask, answer, then]}),  # grows after `ask`: the reminder moved
        ("/v1/chat/completions", {"messages": [system, ask, answer, then, answer, then]}),  # grows at the end
        ("/v1/messages", {"messages": [ask]})])  # another protocol: not counted
    news = soak.unshared(server.url, fixture, model=MODEL)

    def tokens(messages: list[dict]) -> list[int]:
        prompt = httpx.post(f"{server.url}/apply-template", json={"model": MODEL, "messages": messages}).json()["prompt"]
        return httpx.post(f"{server.url}/tokenize", json={"model": MODEL, "content": prompt}).json()["tokens"]

    whole = [tokens(body["messages"]) for _, body in fixture.requests[:3]]
    assert set(news) == {1, 2}
    assert news[1] > len(whole[1]) - len(whole[0])  # more than it grew
    # the longest prefix both share, and no more
    assert whole[1][:len(whole[1]) - news[1]] == whole[0][:len(whole[1]) - news[1]]
    assert whole[1][len(whole[1]) - news[1]] != whole[0][len(whole[1]) - news[1]]
    assert news[2] == len(whole[2]) - len(whole[1])  # it grew at the end: what it added
