"""What the tests and scripts/ share and a user never runs: tiny synthetic GGUF models
(`tinymodels`), and a home of their own (`isolate_home`)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path


def isolate_home(prefix: str = "localchat-tests-") -> Path:
    """Keep this process, and the servers it starts, away from the user's own registry, history and
    prompt store: a temporary folder for each, removed when the process ends (a saved prompt of a
    shipped model is K/V cells, hundreds of MB, and /tmp is not emptied between runs)."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ["LOCALCHAT_CONFIG_DIR"] = str(home / "config")
    os.environ["LOCALCHAT_DATA_DIR"] = str(home / "data")
    os.environ["LOCALCHAT_PROMPT_CACHE_DIR"] = str(home / "prompts")
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    return home
