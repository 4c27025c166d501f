"""llama-server's slot actions on a model of this process's scheduler: save a slot's prompt cache
to a file, restore a file into a slot, erase a slot (`POST /slots/{id}?action=…`).

The file is the prompt store's (prompt_store.py: `write_file`, `read_file`: the model file's key,
the tokens, the cells, a CRC-32), so a file that is torn, corrupt or saved with another model file
is refused with a 400 naming `filename` and never given to llama.cpp. The file is written and read
here, on the caller's thread; only the copy of the cells out of llama.cpp and back runs on the
scheduler's thread, between two steps (Scheduler.between_steps), and only on an idle slot."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from ...errors import InvalidRequest
from ..cache.prompt_store import BadFile, read_file, write_file
from ..params import SlotDone
from .scheduler import Scheduler

ACTIONS = ("save", "restore", "erase")


def slot_action(scheduler: Scheduler, key: str, action: str, slot_id: int, path: str | None) -> SlotDone:
    """Blocking (not on the event loop). `key`: the model file's (prompt_store.model_key); `path`:
    the file to save to or restore from, checked by the caller (it stays in the slot folder)."""
    started = time.perf_counter()
    if action == "erase":
        return SlotDone(scheduler.slot_erase(slot_id))
    if action not in ACTIONS or path is None:
        raise InvalidRequest(f"action: {action!r} is not one of save, restore, erase", param="action")
    file = Path(path)
    if action == "save":
        tokens, state = scheduler.between_steps(lambda: scheduler.executor.cache.slot_state(slot_id))
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
            written = write_file(file, key, np.asarray(tokens, dtype=np.int32), state)
        except OSError as exc:
            raise InvalidRequest(f"filename: {file.name} could not be written: {exc.strerror or exc}",
                                 param="filename") from None
        return SlotDone(len(tokens), written, (time.perf_counter() - started) * 1000)
    try:
        size = os.path.getsize(file)
        tokens, state = read_file(file, key)
    except FileNotFoundError:
        raise InvalidRequest(f"filename: no file {file.name} in the slot save folder", param="filename") from None
    except OSError as exc:
        raise InvalidRequest(f"filename: {file.name} could not be read: {exc.strerror or exc}",
                             param="filename") from None
    except BadFile as exc:
        raise InvalidRequest(f"filename: {file.name} cannot be restored: {exc}", param="filename") from None
    assert state is not None
    restored = tokens.tolist()
    scheduler.slot_restore(slot_id, restored, state)
    return SlotDone(len(restored), size, (time.perf_counter() - started) * 1000)
