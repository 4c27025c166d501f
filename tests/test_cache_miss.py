"""The access log says why a prompt missed the cache (issue 46): when a cached sequence held 64 or
more tokens it did not serve, `cache_miss="…"` names where the prompt first differs from the closest
cached one — the message (by role and number) and the character — or that a slot busy with another
request held it. Real llama.cpp, a tiny model; the prompts are the client's, the reasons the server's."""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from conftest import Server
from localchat.engine.cache.prefix_cache import DIFF_TOKENS, MISS_MIN, PrefixCache
from localchat.engine.cache.prompt_store import RESTORE_MIN, SAVE_MIN

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


def test_a_prompt_whose_slot_went_to_another_is_said_evicted(server: Server):
    """One slot: a second conversation takes it; the first one's next request is told its slot went
    (its prompt is under RESTORE_MIN tokens, so it was not saved to the store first)."""
    first = [{"role": "user", "content": "Name the rivers of Europe and where each rises. " * 2}]
    send(server, first)
    send(server, [{"role": "user", "content": "Write a haiku about compilers and their error messages. " * 2}])
    line = send(server, first)
    prompt = int(re.search(r"prompt=(\d+)", line)[1])
    assert MISS_MIN < prompt < RESTORE_MIN, line  # (the case this test is about)
    assert reason(line) is not None and reason(line).startswith("evicted: the slot that held"), line


def test_prompts_saved_for_another_version_of_the_model_file_are_named(tiny_models: dict[str, Path], tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch):
    model = tmp_path / "model.gguf"
    shutil.copyfile(tiny_models["chatml"], model)
    config = tmp_path / "models.toml"
    config.write_text(f'[models.mine]\npath = "{model}"\ncontext_length = 2048\n')
    monkeypatch.setenv("LOCALCHAT_PROMPT_CACHE_DIR", str(tmp_path / "prompts"))
    messages = [{"role": "user", "content": "Say what each of these files holds: " + ", ".join(
        f"src/module_{i}.py" for i in range(80))}]
    s = Server(config, "--model", "mine")
    try:
        r = httpx.post(s.url + "/v1/chat/completions", timeout=300,
                       json={"model": "mine", "messages": messages, "max_tokens": 1, "temperature": 0})
        assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] > SAVE_MIN, r.text
        deadline = time.monotonic() + 60
        while not list((tmp_path / "prompts").glob("*/*.kv")) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert list((tmp_path / "prompts").glob("*/*.kv"))  # saved
    finally:
        s.stop()
    os.utime(model, (time.time() + 60, time.time() + 60))  # the model file changed (re-downloaded, edited)
    s = Server(config, "--model", "mine")
    try:
        r = httpx.post(s.url + "/v1/chat/completions", timeout=300,
                       json={"model": "mine", "messages": messages, "max_tokens": 1, "temperature": 0})
        assert r.status_code == 200 and r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        deadline = time.monotonic() + 30
        while "cache_miss=" not in s.output() and time.monotonic() < deadline:
            time.sleep(0.05)
        line = next(line for line in s.output().splitlines() if "POST /v1/chat/completions" in line)
        assert "another version of this model file" in (reason(line) or ""), line
        assert "1 prompts saved for another version of model.gguf are not used" in s.output()
    finally:
        s.stop()


def test_reasoning_dropped_from_an_earlier_answer_is_named(server: Server):
    """A client that sends an earlier answer back without its reasoning (opencode#19081): the
    message, and that the cached prompt had the family's reasoning there."""
    thought = "<think>\n" + "The user wants the files listed, so I will list them one by one. " * 3 + "</think>\n\n"
    answer = "a.py holds the code and b.py holds the tests."
    base = [{"role": "system", "content": SYSTEM}, TASK]
    send(server, [*base, {"role": "assistant", "content": thought + answer}, {"role": "user", "content": "Sizes?"}])
    line = send(server, [*base, {"role": "assistant", "content": answer}, {"role": "user", "content": "Sizes?"}])
    assert (reason(line) or "").endswith("assistant message 1, char 0: reasoning dropped (the cached prompt has "
                                         "<think>… there)"), line


@pytest.mark.fast
def test_the_verdicts():
    job = SimpleNamespace(cached=10, tokens=list(range(500)))
    theirs = list(range(1000, 1600))

    def missed(*seen):
        return PrefixCache._missed([(n, held, kind, tuple(theirs[n:n + DIFF_TOKENS])) for n, held, kind in seen],
                                  len(job.tokens), job.cached)
    assert missed() is None  # nothing cached (or no cache wanted)
    assert missed((400, 450, "busy")) == ("busy", 400, 450, ())  # a busy slot held 400 of it
    assert missed((400, 450, "idle")) == ("unused", 400, 450, ())
    # where they part: the cached sequence's next tokens from there
    assert missed((10, 10 + MISS_MIN, "idle")) == ("differs", 10, 10 + MISS_MIN, tuple(theirs[10:10 + DIFF_TOKENS]))
    assert missed((10, 10 + MISS_MIN - 1, "idle")) is None  # the cached sequence held little more
    job.tokens = list(range(10 + MISS_MIN - 1))
    assert missed((10, 600, "idle")) is None
    job.tokens = list(range(500))
    # gone: a slot given to another prompt, the store's eviction, another version of the model file
    for kind in ("evicted", "dropped", "stale"):
        assert missed((10, 600, "idle"), (400, 450, kind)) == (kind, 400, 450, ())
        assert missed((400, 450, "idle"), (400, 450, kind)) == ("unused", 400, 450, ())  # still held: said so
        assert missed((10, 10, "idle"), (10 + MISS_MIN - 1, 450, kind)) is None  # little more
