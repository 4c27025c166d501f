"""Cut saves lose nothing (issue 44, item 2): the prompt store (engine/cache/prompt_store.py) through real
server processes on tiny models, under faults. A server killed (SIGKILL) at random points of a
save, a disk that fills up, saved files cut short or with a byte flipped, a model file replaced
under its saved prompts: every next request is answered, from a valid file or read cold, never
from a bad one; a bad file is said once in the log and removed; no temporary file outlives a start."""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
import time
import zlib
from pathlib import Path

import httpx
import pytest

from localchat.devtools import tinymodels
from conftest import TINY_CTX, Server
from localchat.engine.cache.prompt_store import MAGIC, SAVE_MIN
from localchat.families import FAMILIES
from localchat.devtools.tinymodels import write_tiny_model

# Prompts of well over SAVE_MIN tokens (the tiny models spell most words letter by letter), each
# sharing only the chat template's first tokens with another: each is saved, and restored alone.
BODY = " ".join(f"line {i}: the sea and the world." for i in range(40))  # ~1,260 tokens


def prompt(k: int) -> str:
    return f"prompt {k}. {BODY}"


def registry(path: Path, models: dict[str, Path], **settings: object) -> Path:
    """A models.toml of these models (top-level settings first: worker, prompt_cache_bytes). One
    thread each: llama.cpp's threads wait for each other spinning, and on a machine whose cores are
    busy with other work two threads read a prompt ten times slower than one."""
    lines = [f"{k} = {json.dumps(v)}\n" for k, v in settings.items()]
    lines += [f'\n[models.{name}]\npath = "{model}"\ncontext_length = {TINY_CTX}\nthreads = 1\n'
              for name, model in models.items()]
    path.write_text("".join(lines))
    return path


def ask(server: Server, model: str, text: str) -> dict:
    r = httpx.post(server.url + "/v1/chat/completions", timeout=300, json={
        "model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 2, "temperature": 0})
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    assert usage["prompt_tokens"] > SAVE_MIN
    return usage


def cached(usage: dict) -> int:
    return usage["prompt_tokens_details"]["cached_tokens"]


def files(folder: Path, pattern: str = "*/*.kv") -> list[Path]:
    return sorted(folder.glob(pattern))


def wait_for(what, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not (got := what()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return got


def bad_file_lines(output: str, name: str) -> list[str]:
    """The log's lines that name a prompt file as bad (skipped at start, or not restored)."""
    return [line for line in output.splitlines() if name in line
            and ("skipped and removed" in line or "could not restore" in line)]


# -- (a) a server killed mid-save ----------------------------------------------------------------

@pytest.fixture(scope="module")
def deep_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model whose cells are 8 KB a token (32 layers of width 64): a prompt's save (~10 MB)
    takes long enough to be cut at chosen points, its reading stays quick."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tinymodels, "N_LAYER", 32)
        return write_tiny_model(tmp_path_factory.mktemp("deep") / "deep.gguf", FAMILIES["chatml"], n_ctx=TINY_CTX)


def test_a_server_killed_at_random_points_of_a_save_loses_nothing(deep_model: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch):
    """A server saves a prompt whole (its size known); then three rounds: a server, on the same
    folder, reads a new prompt and is killed (SIGKILL) when the file being written has reached a
    random (seeded) fraction of its size, one in each of [0, 0.5), [0.5, 1) and [1, 1.25) (at 1:
    while it is synced; past 1: a moment after it was renamed into place). Each next server finds no temporary file, says no file is
    bad, and answers the last round's prompt: restored from its file (every token but the last)
    where the file was whole, else read cold; a last server answers every prompt so. The
    engine runs in the server's process (worker = false): the process killed is the one writing
    (a worker whose server dies finishes its saves before it exits)."""
    cache = tmp_path / "prompts"
    monkeypatch.setenv("LOCALCHAT_PROMPT_CACHE_DIR", str(cache))
    config = registry(tmp_path / "models.toml", {"deep": deep_model}, worker=False)
    rng = random.Random(44)
    fractions = [rng.uniform(0, 0.5), rng.uniform(0.5, 1), rng.uniform(1, 1.25)]
    rng.shuffle(fractions)
    whole: dict[int, bool] = {}  # each prompt asked: whether its file was whole when its server died
    full, cut_while_writing = 0, 0

    def check(server: Server, j: int) -> None:
        """Prompt j answered from its file if it was whole, else cold (and then saved)."""
        before = {f.name for f in files(cache)}
        usage = ask(server, "deep", prompt(j))
        if whole[j]:
            assert cached(usage) == usage["prompt_tokens"] - 1, (j, usage)
        else:
            assert cached(usage) < 32, (j, usage)
            assert wait_for(lambda: [f for f in files(cache) if f.name not in before])
            whole[j] = True
        assert wait_for(lambda: not files(cache, "*/*.tmp"))

    for k, fraction in enumerate([0.0, *fractions]):
        server = Server(config, "--model", "deep")
        try:
            assert not files(cache, "*/*.tmp"), "a temporary file outlived the start"
            assert not bad_file_lines(server.output(), ".kv"), server.output()
            if k > 0:
                check(server, k - 1)
            before = {f.name for f in files(cache)}
            if k == 0:  # a save not cut: a whole file's size
                ask(server, "deep", prompt(k))
                (new,) = wait_for(lambda: [f for f in files(cache) if f.name not in before])
                assert wait_for(lambda: not files(cache, "*/*.tmp"))
                full, whole[k] = new.stat().st_size, True
                continue
            thread = threading.Thread(target=post, args=(server, "deep", prompt(k)), daemon=True)
            thread.start()
            deadline = time.monotonic() + 120  # until the save starts (or, missed, has ended)
            while not (files(cache, "*/*.tmp") or {f.name for f in files(cache)} - before):
                assert time.monotonic() < deadline, server.output()
                time.sleep(0.0005)
            while tmp := files(cache, "*/*.tmp"):  # the save under way
                try:
                    if fraction <= 1 and tmp[0].stat().st_size >= fraction * full:
                        break
                except FileNotFoundError:
                    pass  # renamed meanwhile
                time.sleep(0.0005)
            if fraction > 1:
                time.sleep((fraction - 1) * 0.2)
            server.proc.kill()
            server.proc.wait(10)
            thread.join(30)
            cut = bool(files(cache, "*/*.tmp"))
            new = [f for f in files(cache) if f.name not in before]
            assert not (cut and new) and len(new) <= 1
            assert cut or fraction > 0.99  # (a cut meant: the kill came before the rename)
            cut_while_writing += cut
            whole[k] = bool(new)
            if new:
                assert abs(new[0].stat().st_size - full) < full / 20
        finally:
            server.stop()
    assert cut_while_writing >= 2, "kills meant to land inside a save did not: the test did not test what it says"
    last = Server(config, "--model", "deep")
    try:
        assert not files(cache, "*/*.tmp")
        for j in list(whole):
            check(last, j)
        assert not bad_file_lines(last.output(), ".kv"), last.output()
    finally:
        last.stop()


def post(server: Server, model: str, text: str) -> None:
    """A request whose server may be killed before it answers."""
    try:
        httpx.post(server.url + "/v1/chat/completions", timeout=300, json={
            "model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 2, "temperature": 0})
    except httpx.HTTPError:
        pass


# -- (b) a full disk --------------------------------------------------------------------------

def test_a_full_disk_loses_the_save_and_nothing_else(tiny_models: dict[str, Path], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch):
    """The cache folder on a small tmpfs: a prompt is saved, then the disk is filled but for half a
    file. The next prompt's saves fail (ENOSPC mid-write): each is said once in the log, leaves no
    file behind, and the requests are answered all the same; the saved prompt is still whole and
    restored after a restart. (Root only: without the right to mount, test_prompt_store.py's
    fast test of a failing write stands in.)"""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)], capture_output=True,
                             text=True)
    if mounted.returncode:
        pytest.skip(f"a small tmpfs cannot be mounted here ({mounted.stderr.strip()}): needs root")
    try:
        cache = disk / "prompts"
        monkeypatch.setenv("LOCALCHAT_PROMPT_CACHE_DIR", str(cache))
        config = registry(tmp_path / "models.toml", {"chatml": tiny_models["chatml"]})
        server = Server(config, "--model", "chatml")
        try:
            ask(server, "chatml", prompt(0))
            (first,) = wait_for(lambda: files(cache))
            size = first.stat().st_size
            st = os.statvfs(disk)
            with open(disk / "filler", "wb") as f:  # the disk full but for half a file
                f.write(b"\0" * (st.f_bavail * st.f_frsize - size // 2))
            for k in (1, 2):
                usage = ask(server, "chatml", prompt(1))  # answered; its save fails each time
                assert k == 1 or cached(usage) == usage["prompt_tokens"] - 1  # (its slot's own cells)
                out = wait_for(lambda: server.output().count("could not save a prompt") == k and server.output())
                assert out and "No space left on device" in out, server.output()
                assert files(cache) == [first] and not files(cache, "*/*.tmp")
            assert server.output().count("could not save a prompt") == 2
            assert httpx.get(server.url + "/health").status_code == 200
        finally:
            server.stop()
        (disk / "filler").unlink()
        again = Server(config, "--model", "chatml")
        try:
            usage = ask(again, "chatml", prompt(0))
            assert cached(usage) == usage["prompt_tokens"] - 1  # from its file: the full disk did not touch it
            assert cached(ask(again, "chatml", prompt(1))) < 32  # read cold, saved now
            assert len(wait_for(lambda: len(files(cache)) == 2 and files(cache))) == 2
            assert not bad_file_lines(again.output(), ".kv")
        finally:
            again.stop()
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


# -- (c) files cut short or with a byte flipped ------------------------------------------------

def _parts(data: bytes) -> tuple[int, int]:
    """Where a prompt file's tokens start, and where its state starts."""
    header_end = data.index(b"\n", len(MAGIC)) + 1
    return header_end, header_end + 4 * json.loads(data[len(MAGIC):header_end])["tokens"]


def _flip(data: bytes, at: int, mask: int = 0xFF) -> bytes:
    out = bytearray(data)
    out[at] ^= mask
    return bytes(out)


def _old_format(data: bytes) -> bytes:
    """The same file as localchat-kv 1 wrote it (its CRC-32 of the state alone)."""
    tokens_at, state_at = _parts(data)
    header = json.loads(data[len(MAGIC):tokens_at])
    header["crc32"] = zlib.crc32(data[state_at:])
    return b"localchat-kv 1\n" + json.dumps(header).encode() + b"\n" + data[tokens_at:]


def _foreign(data: bytes) -> bytes:
    tokens_at, _ = _parts(data)
    header = json.loads(data[len(MAGIC):tokens_at])
    return MAGIC + json.dumps({**header, "model": "0" * 24}).encode() + b"\n" + data[tokens_at:]


# each fault: what it does to a saved file, what the log says of it
FAULTS = {
    "emptied": (lambda d: b"", "not a localchat prompt file"),
    "cut in the magic": (lambda d: d[:5], "not a localchat prompt file"),
    "cut in the header": (lambda d: d[:len(MAGIC) + 20], "header is unreadable"),
    "cut in the tokens": (lambda d: d[:_parts(d)[0] + 4 * 500 + 2], "torn"),
    "cut in the state": (lambda d: d[:len(d) - 1000], "torn"),
    "grown": (lambda d: d + b"\0" * 10, "torn"),
    "flipped in the header": (lambda d: _flip(d, len(MAGIC) + 4), "header is unreadable"),
    # a token flipped: without a checksum over the tokens its cells would serve another prompt
    "flipped in a token": (lambda d: _flip(d, _parts(d)[0] + 4 * 600, 0x01), "checksum fails"),
    "flipped in the state": (lambda d: _flip(d, (_parts(d)[1] + len(d)) // 2), "checksum fails"),
    "flipped in the last byte": (lambda d: _flip(d, len(d) - 1), "checksum fails"),
    "of the old format": (_old_format, "another version's format"),
    "another model's": (_foreign, "another model file"),
}


def test_cut_and_flipped_files_are_said_once_removed_and_read_cold(tiny_models: dict[str, Path], tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch):
    """A server saves a prompt per fault, and one more; each file but the last is then damaged
    (FAULTS). The next server answers every prompt: the damaged ones read cold (none of their
    cells restored), the last restored from its file; it says each damaged file once, with what is
    wrong with it, and removes it (those whose header or length fails, as it starts; the others
    when a request would restore them: the prompt read cold is then saved again under its name)."""
    cache = tmp_path / "prompts"
    monkeypatch.setenv("LOCALCHAT_PROMPT_CACHE_DIR", str(cache))
    config = registry(tmp_path / "models.toml", {"chatml": tiny_models["chatml"]})
    first = Server(config, "--model", "chatml")
    saved: list[Path] = []
    try:
        for k in range(len(FAULTS) + 1):
            before = set(files(cache))
            ask(first, "chatml", prompt(k))
            (new,) = wait_for(lambda: [f for f in files(cache) if f not in before])
            saved.append(new)
    finally:
        first.stop()
    damaged = {}
    for path, (fault, (damage, _)) in zip(saved, FAULTS.items()):
        damaged[fault] = damage(path.read_bytes())
        path.write_bytes(damaged[fault])
    second = Server(config, "--model", "chatml")
    try:
        at_start = {f.name for f in files(cache)}
        for k, path in enumerate(saved):
            usage = ask(second, "chatml", prompt(k))
            if k < len(FAULTS):
                assert cached(usage) < 32, (list(FAULTS)[k], usage)  # (the chat template's first tokens, at most)
            else:
                assert cached(usage) == usage["prompt_tokens"] - 1  # the file left whole is restored
        wait_for(lambda: len(files(cache)) == len(saved))
        out = second.output()
        for path, (fault, (_, says)) in zip(saved, FAULTS.items()):
            lines = bad_file_lines(out, path.name)
            assert len(lines) == 1 and says in lines[0], (fault, lines)
            if "skipped and removed" in lines[0]:
                assert path.name not in at_start, fault
            assert path.read_bytes() != damaged[fault], fault  # saved again, whole
        assert second.proc.poll() is None
    finally:
        second.stop()


# -- (d) a model file replaced under its saved prompts -----------------------------------------

def test_a_model_file_replaced_under_its_saved_prompts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A prompt saved with a model file; the file is then replaced (another model, same path, a new
    time). The next server does not restore the old cells: the prompt is read cold and saved in the
    new file's folder, and the old file's prompt — which nothing restores — is the first to go when
    the folder passes its limit (its folder too). No file is said to be bad: none was read."""
    cache = tmp_path / "prompts"
    monkeypatch.setenv("LOCALCHAT_PROMPT_CACHE_DIR", str(cache))
    model = write_tiny_model(tmp_path / "swapped.gguf", FAMILIES["chatml"], n_ctx=TINY_CTX, seed=0)
    config = registry(tmp_path / "models.toml", {"swapped": model})
    first = Server(config, "--model", "swapped")
    try:
        ask(first, "swapped", prompt(0))
        (old,) = wait_for(lambda: files(cache))
    finally:
        first.stop()
    before = model.stat()
    other = write_tiny_model(tmp_path / "other.gguf", FAMILIES["chatml"], n_ctx=TINY_CTX, seed=5)
    os.replace(other, model)
    os.utime(model, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))  # (a coarse clock: a new time all the same)
    # room for one prompt and a half: the second saved pushes the least recently used out
    config = registry(tmp_path / "models.toml", {"swapped": model}, prompt_cache_bytes=old.stat().st_size * 3 // 2)
    second = Server(config, "--model", "swapped")
    try:
        usage = ask(second, "swapped", prompt(0))
        assert cached(usage) < 32, usage
        (new,) = wait_for(lambda: [f for f in files(cache) if f.parent != old.parent])
        assert wait_for(lambda: not old.parent.exists())  # the replaced file's prompt and folder: gone
        assert files(cache) == [new]
        out = second.output()
        assert not bad_file_lines(out, ".kv") and "could not" not in out, out
        assert cached(ask(second, "swapped", prompt(1))) < 32
    finally:
        second.stop()
