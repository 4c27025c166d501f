"""`localchat launch CLIENT`: a coding agent set up for localchat and started, in one command.

Each client is set up the way its own documentation says — environment variables, its own flags,
or a config file of launch's own that the client is told to read (a flag, or a variable naming the
file or folder, for that process only). The user's own config files are never written: every file
launch writes lies in its own folder (`launch_dir()/CLIENT`), rewritten at each launch. The
client's own model names map to the launched model; its auto-updater and its telemetry are off for
that process. `scripts/acceptance` starts every client with `localchat launch`, so the tested path is
the user's.

What each client's first request needs (FIRST_PROMPT) was measured: the first prompt of its
recorded session in tests/fixtures/agents/ (scripts/acceptance, Qwen2.5-Coder's tokenizer), read
by scripts/soak."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .models.paths import data_dir
from .serve_process import ServeProcess

ANSWER_ROOM = 4096  # tokens each client is told it may ask for an answer (its max output), and that launch leaves
TIMEOUT_MS = 1_800_000  # how long a client waits for an answer: a first prompt read on a laptop CPU takes minutes


def launch_dir() -> Path:
    """Where launch keeps the config files it gives the clients (LOCALCHAT_DATA_DIR moves it)."""
    return data_dir() / "launch"


@dataclass(frozen=True)
class Target:
    """What a client is pointed at: the server's URL (no /v1), the model, its context, the key."""

    url: str
    model: str
    context: int
    api_key: str | None = None

    @property
    def key(self) -> str:
        return self.api_key or "localchat"  # clients insist on some key; the server ignores it without --api-key


@dataclass
class Setup:
    """How to start one client: its command (launch's flags first), the environment launch sets, the
    files it writes under its own folder, and what the user should know."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[Path, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    before: list[list[str]] = field(default_factory=list)  # the client's own set-up commands, run first (same env)

    def write(self) -> None:
        for path, text in self.files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)


@dataclass(frozen=True)
class Client:
    name: str
    title: str
    program: str  # its executable, looked up on PATH
    install: str  # the exact command that installs it
    first_prompt: int  # tokens of its first request's prompt (measured, see the module's doc)
    setup: Callable[[Target, Path], Setup]  # (target, launch's folder for this client) -> how to start it

    def needs(self) -> int:
        """The context its first request needs: the prompt and room for an answer."""
        return self.first_prompt + ANSWER_ROOM // 4

    def find(self) -> str | None:
        return shutil.which(self.program)


# -- each client ------------------------------------------------------------------------------

def claude(t: Target, folder: Path) -> Setup:
    """Claude Code: environment variables only. It asks for models by its own names (sub-agents for an
    Opus, side requests for a Haiku): each name is mapped to the model. CLAUDE_STREAM_IDLE_TIMEOUT_MS:
    Claude Code aborts a stream with no event for 300 s (at least; its SDK drops the server's pings, and
    API_TIMEOUT_MS does not lift it). Claude Code 2.1.197, what npm installs on Node 20, cut its
    18,776-token first request so, and sent it again; against a stand-in server that pings for 330 s
    before it answers, only this variable let it wait (API_FORCE_IDLE_TIMEOUT=0 did not)."""
    names = ("ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL",
             "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL")
    return Setup(["claude"], {
        "ANTHROPIC_BASE_URL": t.url, "ANTHROPIC_AUTH_TOKEN": t.key, **dict.fromkeys(names, t.model),
        "CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(t.context), "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(ANSWER_ROOM),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
        "API_TIMEOUT_MS": str(TIMEOUT_MS), "CLAUDE_STREAM_IDLE_TIMEOUT_MS": str(TIMEOUT_MS)})


def codex(t: Target, folder: Path) -> Setup:
    """Codex CLI: a provider of its own given with `-c` overrides, on top of the user's ~/.codex/config.toml,
    which stays as it is; the Responses API."""
    provider = (f'{{name = "localchat", base_url = "{t.url}/v1", wire_api = "responses"'
                + (', env_key = "LOCALCHAT_API_KEY"' if t.api_key else "") + "}")
    overrides = {"model": json.dumps(t.model), "model_provider": '"localchat"', "model_providers.localchat": provider,
                 "model_context_window": str(t.context), "model_auto_compact_token_limit": str(t.context * 3 // 4),
                 "check_for_update_on_startup": "false", "analytics.enabled": "false"}
    return Setup(["codex", *(arg for k, v in overrides.items() for arg in ("-c", f"{k}={v}"))],
                 {"LOCALCHAT_API_KEY": t.api_key} if t.api_key else {})


def opencode(t: Target, folder: Path) -> Setup:
    """opencode: a config file of launch's own named by OPENCODE_CONFIG (opencode merges it over the user's)."""
    path = folder / "opencode.json"
    config = {"$schema": "https://opencode.ai/config.json", "autoupdate": False, "share": "disabled",
              "model": f"localchat/{t.model}", "small_model": f"localchat/{t.model}",
              "provider": {"localchat": {
                  "npm": "@ai-sdk/openai-compatible", "name": "localchat",
                  "options": {"baseURL": f"{t.url}/v1", "apiKey": t.key, "timeout": False,
                              "headerTimeout": TIMEOUT_MS, "chunkTimeout": TIMEOUT_MS},
                  "models": {t.model: {"name": t.model, "tool_call": True,
                                       "limit": {"context": t.context, "output": ANSWER_ROOM}}}}}}
    return Setup(["opencode"], {"OPENCODE_CONFIG": str(path), "OPENCODE_DISABLE_AUTOUPDATE": "1",
                                "OPENCODE_DISABLE_MODELS_FETCH": "1"},
                 {path: json.dumps(config, indent=2) + "\n"})


def qwen(t: Target, folder: Path) -> Setup:
    """Qwen Code: OpenAI's variables and --auth-type openai, and a settings layer of launch's own (timeouts,
    no telemetry or update checks) named by QWEN_CODE_SYSTEM_SETTINGS_PATH, which Qwen Code merges over the
    user's settings (which it only reads). Its 15-minute cap on one answer (QWEN_STREAM_MAX_LIFETIME_MS, an
    environment variable only) is raised to launch's timeout: scripts/acceptance saw it cancel a 17k-token
    first prompt still being read on a busy 2-core machine."""
    path = folder / "settings.json"
    settings = {"security": {"auth": {"selectedType": "openai"}},
                "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
                "general": {"enableAutoUpdate": False, "disableAutoUpdate": True, "disableUpdateNag": True},
                "model": {"name": t.model, "generationConfig": {"timeout": TIMEOUT_MS, "streamIdleTimeoutMs": 0}}}
    return Setup(["qwen", "--auth-type", "openai"],
                 {"OPENAI_BASE_URL": f"{t.url}/v1", "OPENAI_API_KEY": t.key, "OPENAI_MODEL": t.model,
                  "QWEN_CODE_SYSTEM_SETTINGS_PATH": str(path), "QWEN_STREAM_MAX_LIFETIME_MS": str(TIMEOUT_MS),
                  "QWEN_TELEMETRY_ENABLED": "false",
                  "QWEN_USAGE_STATISTICS_ENABLED": "false"},
                 {path: json.dumps(settings, indent=2) + "\n"},
                 [f"Node.js {'.'.join(map(str, node))} here: Qwen Code 0.24 and later need 22 (on Node 20 npm installs an older "
                  "release, which runs)"] if (node := node_version()) and node < (22,) else [])


def node_version() -> tuple[int, ...] | None:
    """The version of the `node` on PATH (None: none, or it did not say)."""
    import subprocess

    program = shutil.which("node")
    try:
        out = subprocess.run([program, "--version"], capture_output=True, text=True, timeout=10).stdout if program else ""
        return tuple(int(part) for part in out.strip().lstrip("v").split(".")) or None
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def pi(t: Target, folder: Path) -> Setup:
    """pi: its agent folder moved to launch's own (PI_CODING_AGENT_DIR, which replaces ~/.pi/agent: its
    sessions there too), holding a provider and settings; PI_OFFLINE: no calls at start."""
    models = {"providers": {"localchat": {
        "baseUrl": f"{t.url}/v1", "api": "openai-completions", "apiKey": t.key,
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [{"id": t.model, "contextWindow": t.context, "maxTokens": ANSWER_ROOM}]}}}
    return Setup(["pi", "--provider", "localchat", "--model", t.model],
                 {"PI_CODING_AGENT_DIR": str(folder), "PI_SKIP_VERSION_CHECK": "1", "PI_OFFLINE": "1"},
                 {folder / "models.json": json.dumps(models, indent=2) + "\n",
                  folder / "settings.json": json.dumps({"httpIdleTimeoutMs": 0}) + "\n"})


def cline(t: Target, folder: Path) -> Setup:
    """Cline CLI: its folder launch's own (CLINE_DIR, which replaces ~/.cline: its tasks there too), the
    provider set in it by Cline's own `cline auth` before each run, its global settings a file of launch's
    own (CLINE_GLOBAL_SETTINGS_PATH: telemetry opted out); no auto-update."""
    settings = folder / "global-settings.json"
    env = {"CLINE_DIR": str(folder / "home"), "CLINE_GLOBAL_SETTINGS_PATH": str(settings), "CLINE_NO_AUTO_UPDATE": "1"}
    auth = ["cline", "auth", "-p", "openai", "-k", t.key, "-m", t.model, "-b", f"{t.url}/v1"]
    return Setup(["cline"], env, {settings: json.dumps({"telemetryOptOut": True}) + "\n"}, before=[auth])


def cn(t: Target, folder: Path) -> Setup:
    """Continue's `cn`: a config.yaml of launch's own, named by --config."""
    path = folder / "config.yaml"
    text = (f"name: localchat\nversion: 1.0.0\nschema: v1\nmodels:\n  - name: {t.model}\n    provider: openai\n"
            f"    model: {t.model}\n    apiBase: {t.url}/v1\n    apiKey: {t.key}\n    roles: [chat, edit, apply]\n"
            f"    capabilities: [tool_use]\n    defaultCompletionOptions:\n      contextLength: {t.context}\n"
            f"      maxTokens: {ANSWER_ROOM}\n    requestOptions:\n      timeout: {TIMEOUT_MS}\n")
    return Setup(["cn", "--config", str(path)], {"CONTINUE_METRICS_ENABLED": "0", "CONTINUE_CLI_ENABLE_TELEMETRY": "0"},
                 {path: text})


def aider(t: Target, folder: Path) -> Setup:
    """aider: its own flags (litellm's OpenAI provider), and a model settings file of launch's own that
    gives litellm the model's context."""
    metadata = folder / "model-metadata.json"
    info = {f"openai/{t.model}": {"max_input_tokens": t.context, "max_output_tokens": ANSWER_ROOM,
                                  "max_tokens": t.context, "input_cost_per_token": 0, "output_cost_per_token": 0,
                                  "litellm_provider": "openai", "mode": "chat"}}
    return Setup(["aider", "--model", f"openai/{t.model}", "--openai-api-base", f"{t.url}/v1",
                  "--openai-api-key", t.key, "--model-metadata-file", str(metadata), "--timeout", str(TIMEOUT_MS // 1000),
                  # (--no-analytics for this run: --analytics-disable would write aider's own settings file)
                  "--no-check-update", "--no-show-release-notes", "--no-analytics", "--no-show-model-warnings"],
                 {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "AIDER_ANALYTICS": "false"},
                 {metadata: json.dumps(info, indent=2) + "\n"},
                 ["aider's edit format: --edit-format diff to have a small model run shell commands, whole to edit "
                  "(docs/clients.md#aider)"])


CLIENTS: dict[str, Client] = {c.name: c for c in (
    Client("claude", "Claude Code", "claude", "npm install -g @anthropic-ai/claude-code", 11535, claude),
    Client("codex", "Codex CLI", "codex", "npm install -g @openai/codex", 8361, codex),
    Client("opencode", "opencode", "opencode", "npm install -g opencode-ai", 6911, opencode),
    Client("qwen", "Qwen Code", "qwen", "npm install -g @qwen-code/qwen-code", 17006, qwen),
    Client("pi", "pi", "pi", "npm install -g @mariozechner/pi-coding-agent", 1386, pi),
    Client("cline", "Cline CLI", "cline", "npm install -g cline", 5369, cline),
    Client("cn", "Continue CLI", "cn", "npm install -g @continuedev/cli", 2434, cn),
    Client("aider", "aider", "aider", "python -m pip install aider-chat", 2379, aider),
)}


def setup(name: str, target: Target, folder: Path | None = None) -> Setup:
    """How to start client `name` against `target`; its files under `folder` (default: launch's own)."""
    return CLIENTS[name].setup(target, folder or launch_dir() / name)


def shown(s: Setup) -> str:
    """A setup as --print shows it: the environment, the files with their text, the command."""
    lines = [f"{k}={_quoted(v)}" for k, v in s.env.items()]
    for path, text in s.files.items():
        lines += ["", f"# {path}", text.rstrip("\n")]
    lines += [""] + [" ".join(_quoted(a) for a in argv) for argv in (*s.before, s.argv)]
    return "\n".join(lines)


def _quoted(text: str) -> str:
    import shlex

    return shlex.quote(text)


def environment(s: Setup) -> dict[str, str]:
    """The client's environment: this process's, with launch's variables over it."""
    return {**os.environ, **s.env}


# -- the server and the model -------------------------------------------------------------------

AGENT_MODEL = "qwen2.5-coder-1.5b"  # offered when no model is on disk: the smallest that drives the agents
PRINT_CONTEXT = 32768  # --print without a running server, for a model whose context the server fits at start


def running(url: str) -> dict | None:
    """GET /health of a localchat server at `url`, or None when none answers."""
    import httpx

    try:
        r = httpx.get(f"{url}/health", timeout=2)
        return r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def listed(url: str, api_key: str | None) -> dict[str, dict]:
    """The server's models by each name and alias: /v1/models' entries."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    r = httpx.get(f"{url}/v1/models", headers=headers, timeout=10)
    if r.status_code == 401:
        raise ValueError(f"the server at {url} wants an API key: --api-key KEY (or LOCALCHAT_API_KEY)")
    r.raise_for_status()
    return {name: m for m in r.json()["data"] for name in (m["id"], *m.get("aliases", ()))}


def on_disk(registry) -> list:
    """The registry's chat models whose GGUF file is here, largest first (a larger model drives an agent better)."""
    found = []
    for spec in registry.models.values():
        if spec.kind != "file" or spec.embedding or spec.rerank:
            continue
        path = spec.location()
        if path is not None and path.is_file():
            found.append((path.stat().st_size, spec))
    return [spec for _, spec in sorted(found, key=lambda x: -x[0])]


def serve(port: int, model: str, config: Path | None) -> ServeProcess:
    """`localchat serve` started for the client's lifetime (not yet up: `.wait()`), its log in
    launch's folder."""
    return ServeProcess("--model", model, *(["--config", str(config)] if config else []), port=port,
                        log=launch_dir() / "server.log")
