"""Prompts never read twice: a long prompt's K/V cells saved to disk and restored after a
restart; torn, corrupt and foreign cache files skipped (engine/cache/prompt_store.py). Faults through
real servers (a kill mid-save, a full disk, damaged files, a replaced model): test_store_faults.py."""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import stat
import time
import zlib
from pathlib import Path

import httpx
import numpy as np
import pytest

from conftest import Server, same_greedy_tokens
from localchat.engine.cache.prompt_store import (MAGIC, RESTORE_MIN, SAVE_MIN, BadFile, Entry, PromptStore, read_file,
                                                 write_file)

MODEL = "tiny-chatml"
# A prompt of well over SAVE_MIN tokens (the tiny models' vocabulary spells most words letter by letter).
LONG = " ".join(f"line {i}: the sea and the world." for i in range(60))


# -- the store alone (no llama.cpp context: a state is any bytes) ----------------------------

def store(tmp_path: Path, limit: int = 1 << 30) -> PromptStore:
    model = tmp_path / "model.gguf"
    if not model.exists():
        model.write_bytes(b"GGUF")
    return PromptStore(tmp_path / "prompts", model, limit)


@pytest.mark.fast
def test_entries_are_found_by_prefix_and_survive_a_new_store(tmp_path: Path):
    s = store(tmp_path)
    s._write(np.arange(100, dtype=np.int32), bytearray(b"state-a"))
    s._write(np.arange(50, 150, dtype=np.int32), bytearray(b"state-b"))
    s.close()
    again = store(tmp_path)
    entry, n = again.best([*range(80), 7, 7])
    assert n == 80 and len(entry.tokens) == 100
    assert again._read_state(entry) == bytearray(b"state-a")
    assert again.best([9999]) is None
    assert again.best(list(range(100)), room=99) is None  # a slot of 99 tokens cannot take it
    again.close()


@pytest.mark.fast
def test_a_longer_prompt_supersedes_its_prefix_and_the_limit_drops_the_least_recent(tmp_path: Path):
    s = store(tmp_path, limit=3 * (len(MAGIC) + 120 + 4 * 100 + 1000))
    s._write(np.arange(50, dtype=np.int32), bytearray(1000))
    s._write(np.arange(100, dtype=np.int32), bytearray(1000))  # the first is its prefix: gone
    assert [len(e.tokens) for e in s.entries] == [100]
    for k in range(1, 4):
        s._write(np.full(100, k, dtype=np.int32), bytearray(1000))
    kept = sorted(int(e.tokens[0]) for e in s.entries)
    assert len(kept) == 3 and 0 not in kept  # the least recently used (arange: starts at 0) went first
    assert len(list((tmp_path / "prompts" / s.key).glob("*.kv"))) == 3
    s.close()


@pytest.mark.fast
def test_the_folder_never_holds_more_than_the_limit_even_while_a_file_is_written(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch):
    """Room is made before a file is written (the soak saw the folder reach 2,117 MiB of 2,048 when
    the least recently used went only after the new file was on disk); a file larger than the limit
    is not written."""
    import localchat.engine.cache.prompt_store as P

    s = store(tmp_path, limit=3 * 2600)
    folder = tmp_path / "prompts"
    sizes = []
    real = P.write_file

    def watched(path, key, tokens, state, *header):
        written = real(path, key, tokens, state, *header)
        sizes.append(sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and f != path) + written)
        sizes.append(sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()))
        return written
    monkeypatch.setattr(P, "write_file", watched)
    for k in range(8):
        s._write(np.full(100 + k, k, dtype=np.int32), bytearray(2000))
    assert len(s.entries) == 3 and max(sizes) <= s.limit
    s._write(np.full(10, 99, dtype=np.int32), bytearray(s.limit))  # larger than the limit: not written
    assert len(s.entries) == 3 and len(list(folder.rglob("*.kv"))) == 3
    s.close()


@pytest.mark.fast
def test_a_save_is_found_and_restored_before_the_writer_has_written_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The next turn can come before the writer thread is done (CI, a loaded machine: a session's
    cells saved as a side request took its slot, then its next turn read everything again): the
    copy in memory is found and restored meanwhile, and the written file after."""
    import threading

    import localchat.engine.cache.prompt_store as P

    s = store(tmp_path)
    go, real = threading.Event(), P.write_file
    monkeypatch.setattr(P, "copy_state", lambda ctx, seq: bytearray(b"cells" * 100))
    monkeypatch.setattr(P, "write_file", lambda *a: (go.wait(30), real(*a))[1])
    put: list[bytes] = []
    monkeypatch.setattr(P, "put_state", lambda ctx, seq, state: put.append(bytes(state)) or True)
    tokens = list(range(300))
    assert s.save(None, 0, tokens)
    hit = s.best([*tokens, 7])
    assert hit is not None and hit[1] == 300 and not s.entries  # found, not yet written
    assert s.restore(hit[0], None, 0) == tokens and put == [b"cells" * 100]
    assert s.saved_prefix(tokens) == 300  # (so the same cells are not queued again)
    go.set()
    s.flush()
    assert len(s.entries) == 1 and not s._pending
    entry, n = s.best(tokens)
    assert n == 300 and entry.state is None and s._read_state(entry) == bytearray(b"cells" * 100)
    s.close()


@pytest.mark.fast
def test_the_limit_holds_for_every_models_prompts_together(tmp_path: Path):
    one = tmp_path / "one.gguf"
    one.write_bytes(b"GGUF one")
    gone = PromptStore(tmp_path / "prompts", one, 1 << 30)  # a model file since replaced: nobody restores these
    for k in range(2):
        gone._write(np.full(100, k, dtype=np.int32), bytearray(1000))
    gone.close()
    size = next((tmp_path / "prompts" / gone.key).glob("*.kv")).stat().st_size
    s = store(tmp_path, limit=3 * size)
    s._write(np.full(100, 7, dtype=np.int32), bytearray(1000))  # three in all: within the limit
    assert len(list((tmp_path / "prompts").glob("*/*.kv"))) == 3
    s._write(np.full(100, 8, dtype=np.int32), bytearray(1000))  # four: the least recent, the other model's, goes
    left = {p.parent.name: p for p in (tmp_path / "prompts").glob("*/*.kv")}
    assert len(list((tmp_path / "prompts").glob("*/*.kv"))) == 3 and len(s.entries) == 2
    s._write(np.full(100, 9, dtype=np.int32), bytearray(1000))
    assert not (tmp_path / "prompts" / gone.key).exists()  # its last prompt gone, its folder too
    assert sorted(int(e.tokens[0]) for e in s.entries) == [7, 8, 9] and gone.key in left
    s.close()


@pytest.mark.fast
def test_torn_corrupt_and_foreign_files_are_skipped_and_removed(tmp_path: Path):
    s = store(tmp_path)
    s._write(np.arange(100, dtype=np.int32), bytearray(b"x" * 5000))
    s.close()
    folder = tmp_path / "prompts" / s.key
    good = next(folder.glob("*.kv"))
    data = good.read_bytes()
    (folder / "torn.kv").write_bytes(data[:-10])
    (folder / "garbage.kv").write_bytes(b"\x00" * 300)
    header = json.loads(data[len(MAGIC):].split(b"\n", 1)[0])
    foreign = MAGIC + json.dumps({**header, "model": "another"}).encode() + b"\n" + data.split(b"\n", 2)[2]
    (folder / "foreign.kv").write_bytes(foreign)
    (folder / "half-written.tmp").write_bytes(b"...")
    flipped = bytearray(data)
    flipped[-7] ^= 0xFF
    (folder / "flipped.kv").write_bytes(bytes(flipped))  # reads as an entry; its checksum fails on restore
    again = store(tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == sorted([good.name, "flipped.kv", "model.json"])
    bad = next(e for e in again.entries if e.path.name == "flipped.kv")
    assert again._read_state(bad) is None
    again.close()


@pytest.mark.fast
def test_the_checksum_covers_the_tokens(tmp_path: Path):
    """A token flipped in a file whose header and state are intact: without a checksum over the
    tokens the file reads as a prompt it is not, and its cells would serve that prompt."""
    path = tmp_path / "p.kv"
    write_file(path, "key", np.arange(100, dtype=np.int32), bytearray(b"cells" * 100))
    tokens, state = read_file(path, "key")
    assert tokens.tolist() == list(range(100)) and state == bytearray(b"cells" * 100)
    data = bytearray(path.read_bytes())
    data[data.index(b"\n", len(MAGIC)) + 1 + 4 * 60] ^= 0x01  # token 60: 61
    path.write_bytes(bytes(data))
    with pytest.raises(BadFile, match="checksum"):
        read_file(path, "key")
    assert read_file(path, "key", state=False)[0][60] == 61  # (the index read at start does not check it)
    s = store(tmp_path)
    s._write(np.arange(300, dtype=np.int32), bytearray(b"x" * 5000))
    (entry,) = s.entries
    raw = bytearray(entry.path.read_bytes())
    raw[raw.index(b"\n", len(MAGIC)) + 1 + 4 * 7] ^= 0x01
    entry.path.write_bytes(bytes(raw))
    s.close()
    again = store(tmp_path)
    (entry,) = again.entries
    assert entry.tokens[7] == 6 and again._read_state(entry) is None
    again.close()


@pytest.mark.fast
def test_a_file_of_the_old_format_is_said_and_removed(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    """localchat-kv 1 (a CRC-32 of the state alone): skipped at start, said once, removed."""
    s = store(tmp_path)
    folder = s.folder
    s.close()
    tokens, state = np.arange(100, dtype=np.int32), b"y" * 1000
    header = {"model": s.key, "tokens": 100, "bytes": len(state), "crc32": zlib.crc32(state)}
    old = folder / "old.kv"
    old.write_bytes(b"localchat-kv 1\n" + json.dumps(header).encode() + b"\n" + tokens.tobytes() + state)
    with pytest.raises(BadFile, match="another version's format"):
        read_file(old, s.key)
    with caplog.at_level(logging.WARNING, logger="localchat.engine"):
        again = store(tmp_path)
    said = [r.getMessage() for r in caplog.records if "old.kv" in r.getMessage()]
    assert len(said) == 1 and "another version's format (localchat-kv 1" in said[0], said
    assert not old.exists() and not again.entries
    again.close()


@pytest.mark.fast
def test_a_save_is_synced_before_its_rename_and_the_folder_after(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append("fsync folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        real_fsync(fd)

    def replace(a, b) -> None:
        calls.append("rename")
        real_replace(a, b)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write_file(tmp_path / "p.kv", "key", np.arange(10, dtype=np.int32), b"state")
    assert calls == ["fsync file", "rename", "fsync folder"]
    assert [p.name for p in tmp_path.iterdir()] == ["p.kv"]


@pytest.mark.fast
def test_a_failed_save_leaves_no_file_and_is_said_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture):
    """A full disk (ENOSPC, as a sync of delayed writes reports it): the save is lost, nothing else;
    no temporary file stays; each failed save is one line of the log. (test_store_faults.py fills
    a real tmpfs.)"""
    s = store(tmp_path)
    s._write(np.arange(100, dtype=np.int32), bytearray(b"kept" * 100))

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with caplog.at_level(logging.WARNING, logger="localchat.engine"):
        for k in range(2):
            tokens = np.full(200, k, dtype=np.int32)
            s._queue.put(Entry(s._path_for(tokens), tokens, 0, 0.0, bytearray(5000)))
            s.flush()
    said = [r.getMessage() for r in caplog.records if "could not save" in r.getMessage()]
    assert len(said) == 2 and all("No space left on device" in m for m in said), said
    assert [p.name for p in s.folder.glob("*.kv")] == [s.entries[0].path.name] and len(s.entries) == 1
    s.close()


# -- through a real server: a restart, then a corrupt file -----------------------------------

def ask(url: str) -> dict:
    r = httpx.post(url + "/v1/chat/completions", timeout=300, json={
        "model": MODEL, "messages": [{"role": "user", "content": LONG}], "max_tokens": 4, "temperature": 0,
        "logprobs": True, "top_logprobs": 2})
    assert r.status_code == 200, r.text
    return r.json()


def logged(server: Server, text: str) -> str:
    """The server's output once it holds `text` (an access log line is written as its response
    ends, after the client has the response), or after 30 s."""
    deadline = time.monotonic() + 30
    while text not in (out := server.output()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return out


def saved(folder: Path) -> list[Path]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        files = list(folder.glob("*/*.kv"))
        if files:
            return files
        time.sleep(0.1)
    return []


def test_a_long_prompt_is_read_once_across_a_restart(registry_file: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch):
    """Served cold, saved; after a restart the same request reads only its last token and
    answers with the same tokens (up to a near-tie), each log-probability within 0.01 of the cold read's."""
    monkeypatch.setenv("LOCALCHAT_PROMPT_CACHE_DIR", str(tmp_path))
    first = Server(registry_file, "--model", MODEL)
    try:
        cold = ask(first.url)
        assert cold["usage"]["prompt_tokens"] > SAVE_MIN
        assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert len(saved(tmp_path)) == 1
    finally:
        first.stop()
    second = Server(registry_file, "--model", MODEL)
    try:
        warm = ask(second.url)
        usage = warm["usage"]
        assert usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_tokens"] - 1
        same_greedy_tokens(cold, warm)
        cached = f"cached={usage['prompt_tokens'] - 1}"
        assert cached in logged(second, cached)
    finally:
        second.stop()


def test_a_corrupt_cache_file_is_skipped_and_the_prompt_read_again(registry_file: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LOCALCHAT_PROMPT_CACHE_DIR", str(tmp_path))
    first = Server(registry_file, "--model", MODEL)
    try:
        ask(first.url)
        (path,) = saved(tmp_path)
    finally:
        first.stop()
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF  # inside the state: the checksum fails, llama.cpp never sees it
    path.write_bytes(bytes(data))
    second = Server(registry_file, "--model", MODEL)
    try:
        again = ask(second.url)
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert "could not restore" in second.output()
        assert second.proc.poll() is None and httpx.get(second.url + "/health").status_code == 200
        # read again, it is saved again (a fresh file under the same name)
        (fresh,) = saved(tmp_path)
        deadline = time.monotonic() + 30
        while fresh.read_bytes() == bytes(data) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert fresh.read_bytes() != bytes(data)
    finally:
        second.stop()


def test_a_slot_given_to_another_prompt_is_saved_first(registry_file: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch):
    """One slot, two chats taking turns: each takes the slot from the other. A chat shorter than
    SAVE_MIN is not saved when its request ends, but when the other takes its slot, so its next
    turn restores it and reads only what is new (before: it read the whole chat again)."""
    monkeypatch.setenv("LOCALCHAT_PROMPT_CACHE_DIR", str(tmp_path))
    server = Server(registry_file, "--model", MODEL, "--parallel", "1")

    def chat(topic: str, turns: int) -> list[dict]:
        messages = [{"role": "user", "content": " ".join(f"{topic} {i}: the sea and the world." for i in range(25))}]
        for i in range(turns):
            messages += [{"role": "assistant", "content": f"Noted, {topic}."}, {"role": "user", "content": f"And {i}?"}]
        return messages

    def send(messages: list[dict]) -> dict:
        r = httpx.post(server.url + "/v1/chat/completions", timeout=300, json={
            "model": MODEL, "messages": messages, "max_tokens": 2, "temperature": 0})
        assert r.status_code == 200, r.text
        return r.json()["usage"]

    try:
        first = send(chat("lamp", 0))
        assert RESTORE_MIN + 64 < first["prompt_tokens"] < SAVE_MIN
        send(chat("boat", 0))  # takes the slot: the lamp chat is saved first
        kept = re.search(r"slot 0 given to another prompt: its (\d+) tokens saved first", logged(server, "saved first"))
        assert kept and int(kept[1]) >= first["prompt_tokens"]
        assert len(saved(tmp_path)) == 1
        again = send(chat("lamp", 1))
        assert again["prompt_tokens_details"]["cached_tokens"] >= first["prompt_tokens"] - 1
        assert "tokens restored" in logged(server, "tokens restored")
    finally:
        server.stop()


def test_a_side_request_at_parallel_1_costs_the_session_nothing(registry_file: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch):
    """Claude Code asks for a title between two turns of its session: a conversation of its own (a
    short system prompt and the user's first message) on /v1/messages. With one slot it takes the
    session's slot: the session's cells are saved first and restored at its next turn, which reads
    only what is new."""
    import anthropic

    monkeypatch.setenv("LOCALCHAT_PROMPT_CACHE_DIR", str(tmp_path))
    server = Server(registry_file, "--model", MODEL, "--parallel", "1")
    client = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=300)
    system = " ".join(f"Rule {i}: answer about the sea and the world." for i in range(4))
    tools = [{"name": "Bash", "description": "Run a shell command.",
              "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}]
    task = "List the files here."
    turn = [{"role": "user", "content": task}]
    try:
        first = client.messages.create(model=MODEL, max_tokens=2, system=system, tools=tools, messages=turn)
        session = first.usage.input_tokens + (first.usage.cache_read_input_tokens or 0)
        assert RESTORE_MIN + 64 < session < SAVE_MIN
        title = client.messages.create(model=MODEL, max_tokens=8, system="Write a 3 to 7 word title for this "
                                       "conversation. Answer with the title only.", messages=turn)
        assert (title.usage.cache_read_input_tokens or 0) < session  # a conversation of its own
        assert "given to another prompt" in logged(server, "saved first")
        then = client.messages.create(model=MODEL, max_tokens=2, system=system, tools=tools, messages=[
            *turn, {"role": "assistant", "content": "Sure."}, {"role": "user", "content": "Go on."}])
        assert (then.usage.cache_read_input_tokens or 0) >= session - 1
        assert then.usage.input_tokens < 64  # only the new turn read
    finally:
        server.stop()
