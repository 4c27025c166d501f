"""Where localchat keeps the user's files. LOCALCHAT_CONFIG_DIR / LOCALCHAT_DATA_DIR override."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def config_dir() -> Path:
    return Path(os.environ.get("LOCALCHAT_CONFIG_DIR") or platformdirs.user_config_dir("localchat"))


def data_dir() -> Path:
    return Path(os.environ.get("LOCALCHAT_DATA_DIR") or platformdirs.user_data_dir("localchat"))


def user_registry() -> Path:
    return config_dir() / "models.toml"


def history_file() -> Path:
    return data_dir() / "history"


def prompt_cache_dir() -> Path:
    """Prompts' K/V cells kept across restarts (LOCALCHAT_PROMPT_CACHE_DIR overrides)."""
    return Path(os.environ.get("LOCALCHAT_PROMPT_CACHE_DIR") or cache_dir() / "prompts")


def step_costs_file() -> Path:
    """What a decode step costs per model and machine, measured once (engine/drafting/draft_cost.py)."""
    return cache_dir() / "step-costs.json"


def cache_dir() -> Path:
    """Model files localchat fetched itself (LOCALCHAT_CACHE_DIR overrides)."""
    return Path(os.environ.get("LOCALCHAT_CACHE_DIR") or platformdirs.user_cache_dir("localchat"))
