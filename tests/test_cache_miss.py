"""The access log says why a prompt missed the cache (issue 46): when a cached sequence held 64 or
more tokens it did not serve, `cache_miss="…"` names where the prompt first differs from the closest
cached one — the message (by role and number) and the character — or that a slot busy with another
request held it. Real llama.cpp, a tiny model; the prompts are the client's, the reasons the server's."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from conftest import Server
from localchat.engine.prefix_cache import MISS_MIN, PrefixCache

MODEL = "tiny-chatml"
SYSTEM = "You are a careful assistant. " * 6
TASK = {"role": "user", "content": "List every file in this folder and say what each one holds. " * 2}


@pytest.fixture(scope="module")
def server(registry_file: Path) -> Iterator[Server]:
    s = Server(registry_file, "--model", MODEL, "--parallel", "1")
    yield s
    s.stop()


def send(server: Server, messages: list[dict], **extra) -> str:
    """The request's access-log line."""
    r = httpx.post(server.url + "/v1/chat/completions", timeout=300,
                   json={"model": MODEL, "messages": messages, "max_tokens": 1, "temperature": 0, **extra})
    assert r.status_code == 200, r.text
    cached = r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        lines = [line for line in server.output().splitlines() if "POST /v1/chat/completions" in line]
        if lines and f"cached={cached} " in lines[-1]:
            return lines[-1]
        time.sleep(0.05)
    raise AssertionError("no access log line")


def reason(line: str) -> str | None:
    found = re.search(r'cache_miss="([^"]*)"', line)
    return found[1] if found else None


def test_a_turn_that_adds_to_the_cache_says_nothing(server: Server):
    messages = [{"role": "system", "content": SYSTEM}, TASK]
    send(server, messages)
    line = send(server, [*messages, {"role": "assistant", "content": "Sure."}, {"role": "user", "content": "Go."}])
    assert reason(line) is None


def test_a_changed_system_message_is_named_with_its_character(server: Server):
    send(server, [{"role": "system", "content": SYSTEM}, TASK])
    changed = SYSTEM[:40] + "X" + SYSTEM[41:]
    line = send(server, [{"role": "system", "content": changed}, TASK])
    assert reason(line) is not None and reason(line).endswith("system message 1, char 40"), line


def test_an_earlier_answer_sent_back_otherwise_is_named(server: Server):
    """A client that replays an answer otherwise than it was written (reasoning stripped where the
    template keeps it, a call re-serialized): the assistant message and the character."""
    said = "Here they are: " + "a.py holds the code, b.py holds the tests. " * 3
    base = [{"role": "system", "content": SYSTEM}, TASK]
    send(server, [*base, {"role": "assistant", "content": said}, {"role": "user", "content": "And the sizes?"}])
    line = send(server, [*base, {"role": "assistant", "content": said[:20] + said[21:]},
                         {"role": "user", "content": "And the sizes?"}])
    assert reason(line) is not None and reason(line).endswith("assistant message 1, char 20"), line


def test_a_changed_tool_is_named_as_the_tools(server: Server):
    def tool(description: str) -> dict:
        return {"type": "function", "function": {"name": "ls", "description": description,
                                                 "parameters": {"type": "object", "properties": {}}}}
    messages = [{"role": "system", "content": "Be brief."}, TASK]
    send(server, messages, tools=[tool("List the files of a folder, with their sizes and dates.")])
    line = send(server, messages, tools=[tool("List the files of a folder, with their owners and modes.")])
    # the tools are listed in the system message (by the family's codec) or by the template, in its own text
    assert reason(line) is not None and ("the tools" in reason(line) or "the template's text" in reason(line)), line


@pytest.mark.fast
def test_the_verdicts():
    job = SimpleNamespace(cached=10, tokens=list(range(500)))
    missed = PrefixCache._missed
    assert missed([], job) is None  # nothing cached (or no cache wanted)
    assert missed([(400, 450, True)], job) == ("busy", 400, 450)  # a busy slot held 400 of it
    assert missed([(400, 450, False)], job) == ("unused", 400, 450)
    assert missed([(10, 10 + MISS_MIN, False)], job) == ("differs", 10, 10 + MISS_MIN)
    assert missed([(10, 10 + MISS_MIN - 1, False)], job) is None  # the cached sequence held little more
    assert missed([(10, 600, False)], SimpleNamespace(cached=10, tokens=list(range(10 + MISS_MIN - 1)))) is None
