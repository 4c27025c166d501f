"""Prompts never read twice: a slot's K/V cells on disk, found again by their tokens.

When a request leaves a slot holding at least `SAVE_MIN` tokens more than any saved entry shares
with it (an agent's first 10k-token prompt, a chat grown by that much), or a slot holding at least
`SPARE_MIN` tokens more is given to another prompt (prefix_cache.py's `_spare`), the scheduler
copies the sequence's state out of llama.cpp (`llama_state_seq_get_data`, a memory copy) and a
writer thread puts it in a file of its own under the cache folder; until it is written, the copy in
memory is found and restored (a turn that comes before the writer is done loses nothing). A later
request whose prompt shares at least `RESTORE_MIN` tokens more with an entry than with its slot's
own cache has that entry's cells put back into the slot (`llama_state_seq_set_data`) and reads only
the rest: after a restart, an unload, or when the slot was given to other work. The OS page cache
keeps recent entries in RAM; `limit_bytes` bounds the whole cache folder, every model's entries
together (the least recently used go first, whichever model's; a model file replaced or deleted
leaves entries nobody restores, and they go too), and an entry whose tokens are a prefix of a newer
one's is dropped as superseded.

A file is: MAGIC, one JSON line (the model's key, token count, state bytes, a CRC-32 of the
tokens and the state together), the tokens (int32), the state (`write_file`, `read_file`: the one
format, also of the slot files llama-server's `/slots` routes save and restore, engine/core/slot_actions.py).
It is written whole to a temporary file, synced, renamed over its name and the folder synced: a
process killed or a disk filled mid-save leaves the old file or none, never half of one (and the
temporary file goes at the next start). Entries are per model file (its path, size and mtime make
the key, one folder each); a file that is torn, corrupt, of another format or another model's is
skipped, said once in the log and deleted, never given to llama.cpp (the index read at start
checks the header and the length; a restore checks the checksum too, tokens included: a flipped
token would otherwise put one prompt's cells under another). The state holds the cells as computed
when the entry was saved: a restored prefix gives the logits that prompt gave then (its last
token is decoded again, in a batch of its own, so within llama.cpp's batch-size rounding of a
cold read)."""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import queue
import threading
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import llama_cpp as C
import numpy as np

_log = logging.getLogger("localchat.engine")
MAGIC = b"localchat-kv 2\n"  # 1: the CRC-32 covered the state only
SAVE_MIN = 1024  # tokens a slot must hold beyond what is saved before it is saved
RESTORE_MIN = 256  # tokens an entry must serve beyond the slot's own cache to be restored
# Unsaved tokens worth a save when a slot goes to another prompt (prefix_cache.py's `_spare`): a chat
# growing by fewer than RESTORE_MIN a turn (pi, cn: 53-69 tokens) read its unsaved turns again each time
# its slot was taken (scripts/soak --agents: 125-276 tokens, 5-13% of its cold read). Fewer than this
# are read again in one small batch.
SPARE_MIN = 64
PENDING = 2  # states copied out and waiting for the writer; past it a save is skipped
REMEMBERED = 8  # prompts evicted lately whose tokens are kept, so a miss they would have served says so
STALE_MAX = 64  # another version of the model file's saved prompts indexed (their tokens), for the same reason


@dataclass
class Entry:
    path: Path
    tokens: np.ndarray  # int32
    size: int  # bytes of the file
    used: float  # last saved or restored (time.time), for LRU
    # the cells as copied out, while the writer has yet to write them (a save just made): restored from memory
    state: bytearray | None = field(default=None, repr=False, compare=False)


class BadFile(ValueError):
    """A prompt file that fails its checks; the message says how (torn, corrupt, another model's)."""


def model_key(path: Path) -> str:
    """A model file's identity: a re-downloaded or edited file gets a new key (and folder)."""
    st = path.stat()
    return hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:24]


def common(a: np.ndarray, b: np.ndarray) -> int:
    """The length of a and b's common prefix."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


def copy_state(ctx: int, seq_id: int) -> bytearray | None:
    """Sequence `seq_id`'s cells, copied out of llama.cpp (None if it would not give them)."""
    size = C.llama_state_seq_get_size(ctx, seq_id)
    state = bytearray(size)
    got = C.llama_state_seq_get_data(ctx, (ctypes.c_uint8 * size).from_buffer(state), size, seq_id)
    return state if got == size else None


def put_state(ctx: int, seq_id: int, state: bytearray) -> bool:
    """Empty sequence `seq_id`, then put the cells of a checked file's state into it. False when
    llama.cpp refuses them (no room): the sequence is left empty."""
    mem = C.llama_get_memory(ctx)
    C.llama_memory_seq_rm(mem, seq_id, -1, -1)
    ok = C.llama_state_seq_set_data(ctx, (ctypes.c_uint8 * len(state)).from_buffer(state), len(state), seq_id) \
        == len(state)
    if not ok:
        C.llama_memory_seq_rm(mem, seq_id, -1, -1)
    return ok


# -- the file ------------------------------------------------------------------------------

def header_of(key: str, tokens: np.ndarray, state: bytes | bytearray) -> bytes:
    """A prompt file's header line: the model's key, the counts, the checksum of the tokens and the state."""
    raw = np.asarray(tokens, dtype=np.int32).tobytes()
    header = {"model": key, "tokens": len(tokens), "bytes": len(state), "crc32": zlib.crc32(state, zlib.crc32(raw))}
    return json.dumps(header).encode() + b"\n"


def write_file(path: Path, key: str, tokens: np.ndarray, state: bytes | bytearray, header: bytes | None = None) -> int:
    """Write a prompt file through a temporary file of its own beside it, synced to the disk and
    renamed over `path`, then the folder synced (best effort): a reader, or the next start after
    a crash or a power cut, finds the old file or the new one whole, never half of one. Raises
    OSError (a full disk) with the temporary file removed. The bytes written (`header`: header_of's, made
    already)."""
    raw = np.asarray(tokens, dtype=np.int32).tobytes()
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(MAGIC)
            f.write(header or header_of(key, tokens, state))
            f.write(raw)
            f.write(state)
            written = f.tell()
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _sync_folder(path.parent)
    return written


def _sync_folder(folder: Path) -> None:
    """Make a rename in `folder` durable (where the OS lets a folder be opened and synced)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_file(path: Path, key: str, *, state: bool = True) -> tuple[np.ndarray, bytearray | None]:
    """A prompt file's tokens and (with `state`) its state, checked: its magic and header, the
    model's key, its length against the header, the CRC-32 of its tokens and state. Raises BadFile
    saying what is wrong (OSError when it cannot be read); without `state` the state is not read
    (None) and the checksum not checked: the tokens are then as the file says."""
    with open(path, "rb") as f:
        magic = f.read(len(MAGIC))
        if magic != MAGIC:
            if magic.startswith(MAGIC[:-2]) and magic.endswith(b"\n"):
                raise BadFile(f"it is in another version's format ({magic.decode(errors='replace').strip()}, "
                              f"not {MAGIC.decode().strip()})")
            raise BadFile("it is not a localchat prompt file (or is cut short)")
        try:
            header = json.loads(f.readline(4096))
        except ValueError:
            header = None
        if not (isinstance(header, dict)
                and all(isinstance(header.get(k), int) and header[k] >= 0 for k in ("tokens", "bytes", "crc32"))):
            raise BadFile("its header is unreadable (corrupt or cut short)")
        if header.get("model") != key:
            raise BadFile("it was saved with another model file (or another version of this one)")
        raw = f.read(4 * header["tokens"])
        if len(raw) != 4 * header["tokens"] or os.fstat(f.fileno()).st_size - f.tell() != header["bytes"]:
            raise BadFile("it is torn: shorter or longer than its header says")
        tokens = np.frombuffer(raw, dtype=np.int32).copy()
        if not state:
            return tokens, None
        data = bytearray(header["bytes"])
        if f.readinto(data) != header["bytes"] or f.read(1):
            raise BadFile("it is torn: shorter or longer than its header says")
    if zlib.crc32(data, zlib.crc32(raw)) != header["crc32"]:
        raise BadFile("it is corrupt: its checksum fails")
    return tokens, data


class PromptStore:
    def __init__(self, folder: Path, model_path: Path, limit_bytes: int,
                 cache_types: tuple[str, str] = ("f16", "f16")) -> None:
        # cells of another K/V cache type are another layout: a folder of their own
        self.key = model_key(model_path) + ("" if cache_types == ("f16", "f16") else "-" + "-".join(cache_types))
        self.folder = folder / self.key
        self.limit = limit_bytes
        self.entries: list[Entry] = []
        self._pending: list[Entry] = []  # saves copied out, not yet written (found and restored all the same)
        self.evicted: deque[np.ndarray] = deque(maxlen=REMEMBERED)  # the tokens of entries evicted lately
        self.stale: list[np.ndarray] = []  # tokens of prompts saved for another version of this model file
        self._lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue(PENDING)
        self.folder.mkdir(parents=True, exist_ok=True)
        for path in self.folder.iterdir():
            if path.suffix == ".tmp":
                path.unlink(missing_ok=True)  # a write cut short by a crash
            elif path.suffix == ".kv":
                entry = self._read_index(path)
                if isinstance(entry, Entry):
                    self.entries.append(entry)
                elif entry is not None:
                    _log.warning("prompt cache: skipped and removed %s: %s", path.name, entry)
                    path.unlink(missing_ok=True)
        self._stale(model_path)
        self._writer = threading.Thread(target=self._write_loop, name="localchat-prompt-store", daemon=True)
        self._writer.start()

    def _stale(self, model_path: Path) -> None:
        """Write the folder's model file (model.json: its path), and index the prompts saved for another
        version of the same file (replaced, re-downloaded, edited): never restored, they go as room is
        needed; a prompt they would have served says so in the access log, and their count is said once."""
        me = str(model_path.resolve())
        self._named = json.dumps({"path": me}) + "\n"
        self._name_folder()
        found = []
        for other in self.folder.parent.iterdir():
            try:
                if other == self.folder or json.loads((other / "model.json").read_text()).get("path") != me:
                    continue
            except (OSError, ValueError, AttributeError):
                continue
            found += sorted(other.glob("*.kv"), key=lambda p: p.stat().st_mtime if p.exists() else 0)[-STALE_MAX:]
        for path in found[-STALE_MAX:]:
            try:
                with open(path, "rb") as f:
                    f.readline()  # MAGIC
                    header = json.loads(f.readline())
                    self.stale.append(np.frombuffer(f.read(4 * int(header["tokens"])), dtype=np.int32))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        if found:
            _log.info("prompt cache: %d prompts saved for another version of %s are not used (they go as room is "
                      "needed)", len(found), model_path.name)

    def _name_folder(self) -> None:
        try:
            if not (self.folder / "model.json").exists():
                (self.folder / "model.json").write_text(self._named)
        except OSError:
            pass

    # -- finding and restoring (the scheduler's thread) --------------------------------------

    def best(self, tokens: list[int], room: int | None = None) -> tuple[Entry, int] | None:
        """The entry sharing the longest prefix with `tokens`, and that length (only entries of
        at most `room` tokens: a slot made smaller since cannot take a longer one)."""
        want = np.asarray(tokens, dtype=np.int32)
        with self._lock:
            scored = [(common(e.tokens, want), e) for e in self.entries + self._pending
                      if room is None or len(e.tokens) <= room]
        if not scored:
            return None
        n, entry = max(scored, key=lambda s: s[0])
        return (entry, n) if n else None

    def restore(self, entry: Entry, ctx: int, seq_id: int) -> list[int] | None:
        """Put the entry's cells into sequence `seq_id` (emptied first); its tokens, or None when
        the file is gone or fails its checks (then it is said in the log, deleted and the
        sequence left empty)."""
        try:
            state = entry.state if entry.state is not None else self._load(entry)
            if not put_state(ctx, seq_id, state):
                raise BadFile("llama.cpp would not take its cells (no room)")
        except (OSError, BadFile) as exc:
            C.llama_memory_seq_rm(C.llama_get_memory(ctx), seq_id, -1, -1)
            if isinstance(exc, FileNotFoundError):  # another model's server made room
                _log.info("prompt cache: %s was removed to keep the folder under its limit", entry.path.name)
            else:
                _log.warning("prompt cache: could not restore %s: %s; removed it", entry.path.name,
                             exc if isinstance(exc, BadFile) else exc.strerror or exc)
            self._drop(entry)
            return None
        entry.used = time.time()
        try:
            os.utime(entry.path)
        except OSError:
            pass
        return entry.tokens.tolist()

    # -- saving ----------------------------------------------------------------------------

    def saved_prefix(self, tokens: list[int]) -> int:
        hit = self.best(tokens)
        return hit[1] if hit else 0

    def save(self, ctx: int, seq_id: int, tokens: list[int]) -> bool:
        """Copy the sequence's state out now (it changes with the next request); the writer
        thread writes it, and until then it is found and restored from memory. False when the
        writer is behind (the save is skipped)."""
        if self._queue.full():
            return False
        state = copy_state(ctx, seq_id)
        if state is None:
            return False
        want = np.asarray(tokens, dtype=np.int32)
        pending = Entry(self._path_for(want), want, 0, time.time(), state)
        with self._lock:
            self._pending.append(pending)
        try:
            self._queue.put_nowait(pending)
        except queue.Full:
            self._settled(pending)
            return False
        return True

    def _settled(self, pending: Entry, written: Entry | None = None) -> None:
        """A save leaves the pending list, for its written entry (in one step: a search finds it in one list or
        the other) or for none."""
        with self._lock:
            self._pending = [e for e in self._pending if e is not pending]
            if written is not None:
                self.entries.append(written)

    def flush(self) -> None:
        """Wait until every copied state is on disk (an unload, a shutdown)."""
        self._queue.join()

    def close(self) -> None:
        self.flush()
        self._queue.put(None)
        self._writer.join(10)

    def _write_loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._write(item.tokens, item.state, item)
            except Exception as exc:  # noqa: BLE001 - a full disk loses a cache entry, nothing else
                _log.warning("prompt cache: could not save a prompt: %s", exc)
            finally:
                if item is not None:
                    self._settled(item)  # (a no-op once written)
                self._queue.task_done()

    def _path_for(self, tokens: np.ndarray) -> Path:
        return self.folder / f"{hashlib.sha256(tokens.tobytes()).hexdigest()[:32]}.kv"

    def _write(self, tokens: np.ndarray, state: bytearray, pending: Entry | None = None) -> None:
        """Make room first, then write: the entries the new one supersedes (its prefixes) and the least
        recently used go until the folder and the new file fit the limit, so the folder never holds
        more than the limit, even while a file is written (a file larger than the limit is not
        written)."""
        path = self._path_for(tokens)
        header = header_of(self.key, tokens, state)
        need = len(MAGIC) + len(header) + 4 * len(tokens) + len(state)  # the file's size
        if need > self.limit:
            _log.info("prompt cache: a prompt of %d tokens (%d MiB) is larger than prompt_cache_bytes; not saved",
                      len(tokens), need >> 20)
            return
        with self._lock:
            superseded = [e for e in self.entries if e.path == path
                          or (len(e.tokens) <= len(tokens) and common(e.tokens, tokens) == len(e.tokens))]
            self.entries = [e for e in self.entries if e not in superseded]
            # the limit holds for the whole folder: every model's prompts, those of model files gone or
            # replaced since included (another process's store finds a file it lost gone, and reads again)
            others = self._others()
            total = need + sum(e.size for e in self.entries) + sum(size for _, size, _ in others)
            candidates = sorted([(e.used, e.size, e) for e in self.entries] + [(t, size, f) for f, size, t in others],
                                key=lambda c: c[0])
            evict: list[Entry | Path] = []
            for _, size, what in candidates:
                if total <= self.limit:
                    break
                evict.append(what)
                total -= size
            self.entries = [e for e in self.entries if e not in evict]
        for e in superseded:
            e.path.unlink(missing_ok=True)
        for what in evict:
            (what.path if isinstance(what, Entry) else what).unlink(missing_ok=True)
            if isinstance(what, Entry):
                self.evicted.append(what.tokens)
            if isinstance(what, Path) and what.parent != self.folder and not any(what.parent.glob("*.kv")):
                (what.parent / "model.json").unlink(missing_ok=True)
                try:
                    what.parent.rmdir()  # the last of another model's prompts: its folder too
                except OSError:
                    pass
        self.folder.mkdir(parents=True, exist_ok=True)  # (another model's store removes folders it empties)
        self._name_folder()
        write_file(path, self.key, tokens, state, header)
        self._settled(pending, Entry(path, tokens, path.stat().st_size, time.time()))

    def _others(self) -> list[tuple[Path, int, float]]:
        """Other model files' saved prompts in the cache folder: each file, its size and its time."""
        found = []
        for folder in self.folder.parent.iterdir():
            if folder == self.folder or not folder.is_dir():
                continue
            for path in folder.glob("*.kv"):
                try:
                    st = path.stat()
                except OSError:
                    continue  # removed meanwhile
                found.append((path, st.st_size, st.st_mtime))
        return found

    # -- the file (read_file checks it) ---------------------------------------------------

    def _read_index(self, path: Path) -> Entry | str | None:
        """The entry of a file whose header and length check out; else what is wrong with it
        (None: gone meanwhile, or holding no tokens)."""
        try:
            tokens, _ = read_file(path, self.key, state=False)
            st = path.stat()
        except FileNotFoundError:
            return None
        except BadFile as exc:
            return str(exc)
        except OSError as exc:
            return f"it cannot be read ({exc.strerror or exc})"
        return Entry(path, tokens, st.st_size, st.st_mtime) if len(tokens) else "it holds no tokens"

    def _load(self, entry: Entry) -> bytearray:
        """The entry's state, its file checked whole (raises BadFile or OSError)."""
        tokens, state = read_file(entry.path, self.key)
        if not np.array_equal(tokens, entry.tokens):
            raise BadFile("its tokens changed since it was indexed")
        assert state is not None
        return state

    def _read_state(self, entry: Entry) -> bytearray | None:
        try:
            return self._load(entry)
        except (OSError, BadFile):
            return None

    def _drop(self, entry: Entry) -> None:
        with self._lock:
            self.entries = [e for e in self.entries if e is not entry]
            self._pending = [e for e in self._pending if e is not entry]
        entry.path.unlink(missing_ok=True)
