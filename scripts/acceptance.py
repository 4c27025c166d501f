"""Acceptance: the coding agents as they ship, headless, against a real `localchat serve`.

    scripts/acceptance [--only claude|codex] [--timeout S] [--config models.toml] [--model NAME]

Installs pinned releases of Claude Code and the Codex CLI with npm into a cache folder (once),
starts `localchat serve` on a free loopback port with the shipped default config (or the
registry `--config` names; `--model` picks one of its models instead of its default), then
drives each client headless, with nothing but the base URL / provider lines docs/clients.md gives,
in a throw-away HOME and work folder for each client (both cases share them, as two tasks of one
user would: the second reads the agent's long prompt from the cache):

- `plain`: a plain question; the client must exit 0 with a text answer holding no tool call written as
  text (raw call JSON or tags);
- `tool`: a task that makes the model call a tool; the client must run it, send the result back
  and exit 0 with an answer after it.

One line per client and case (PASS / FAIL, seconds, what it saw), then the server's access log.
Slow on a laptop CPU: each agent's first prompt is 12–20k tokens, read once, then cached."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's localchat
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from conftest import Server  # noqa: E402  (the launcher the tests use)

from localchat.models import shipped_config  # noqa: E402

CLIENTS = {"@anthropic-ai/claude-code": "2.1.330", "@openai/codex": "0.169.0"}
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "localchat" / "acceptance"
LOGS = Path(tempfile.mkdtemp(prefix="localchat-acceptance-"))  # each client run's output
# A tool call written as text (what a client would print instead of running it): a plain answer must have none.
RAW_CALL = re.compile(r'"name"\s*:\s*"[^"]+"\s*,\s*"(?:arguments|parameters|input)"|</?tool_call>|<tools>')
TOOL_TASK = "Use your shell tool to run this command, then tell me what it printed: echo localchat-acceptance-42"


def install() -> Path:
    """The pinned clients under CACHE/npm (reinstalled only when a pin changes)."""
    folder = CACHE / "npm"
    stamp = folder / "pins.json"
    if not stamp.is_file() or json.loads(stamp.read_text()) != CLIENTS:
        folder.mkdir(parents=True, exist_ok=True)
        specs = [f"{name}@{version}" for name, version in CLIENTS.items()]
        subprocess.run(["npm", "install", "--prefix", str(folder), "--no-audit", "--no-fund", *specs], check=True,
                       stdout=sys.stderr)
        stamp.write_text(json.dumps(CLIENTS))
    return folder / "node_modules" / ".bin"


class Serve(Server):
    """`localchat serve` on a free loopback port with the shipped registry (the tests' launcher)."""

    def __init__(self, config: Path | None) -> None:
        super().__init__(config or shipped_config())

    def model(self) -> str:
        return httpx.get(self.url + "/health").json()["model"]


@dataclass
class Outcome:
    ok: bool
    seconds: float
    said: str


_FOLDERS: dict[str, tuple[Path, Path]] = {}


def folders(client: str) -> tuple[Path, Path]:
    """The client's HOME and work folder, made once a run: both cases use them."""
    if client not in _FOLDERS:
        _FOLDERS[client] = (Path(tempfile.mkdtemp(prefix=f"{client}-home-")),
                            Path(tempfile.mkdtemp(prefix=f"{client}-work-")))
    return _FOLDERS[client]


def run(argv: list[str], env: dict[str, str], cwd: Path, timeout: float) -> tuple[int, list[dict]]:
    """A headless client's exit code and the JSON events it printed, one per line."""
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    LOGS.mkdir(parents=True, exist_ok=True)  # what the client printed, for a look after a FAIL
    (LOGS / f"{Path(argv[0]).name}-{len(list(LOGS.iterdir()))}.jsonl").write_text(proc.stdout + proc.stderr)
    events = []
    for line in proc.stdout.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            pass
    if proc.returncode:
        sys.stderr.write(proc.stderr[-2000:])
    return proc.returncode, events


# -- Claude Code ----------------------------------------------------------------------------------

def claude_env(home: Path, url: str, model: str) -> dict[str, str]:
    """docs/clients.md's lines for Claude Code (the context is the model's, as /health says it)."""
    return {**os.environ, "HOME": str(home), "ANTHROPIC_BASE_URL": url, "ANTHROPIC_AUTH_TOKEN": "unused",
            "ANTHROPIC_MODEL": model, "ANTHROPIC_SMALL_FAST_MODEL": model,
            "CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(context_length(url, model)), "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4096",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "API_TIMEOUT_MS": "1800000"}


def context_length(url: str, model: str) -> int:
    models = httpx.get(url + "/v1/models").json()["data"]
    return next(m["context_length"] for m in models if model == m["id"] or model in m["aliases"])


def claude(bin_dir: Path, url: str, model: str, case: str, timeout: float) -> Outcome:
    home, work = folders("claude")
    prompt, extra = ("Say hi.", []) if case == "plain" else (TOOL_TASK, ["--allowedTools", "Bash(echo:*)"])
    start = time.monotonic()
    code, events = run([str(bin_dir / "claude"), "-p", prompt, "--output-format", "stream-json", "--verbose", *extra],
                       claude_env(home, url, model), work, timeout)
    result = next((e for e in reversed(events) if e.get("type") == "result"), {})
    said = str(result.get("result", ""))
    ok = code == 0 and not result.get("is_error") and bool(said.strip()) and not RAW_CALL.search(said)
    if case == "tool":
        uses = [c for e in events if e.get("type") == "assistant"
                for c in e.get("message", {}).get("content", []) if c.get("type") == "tool_use"]
        results = [c for e in events if e.get("type") == "user"
                   for c in e.get("message", {}).get("content", []) if c.get("type") == "tool_result"]
        ok = ok and bool(uses) and bool(results)
        said = f"{len(uses)} tool call(s) {[u.get('name') for u in uses]}, then: {said}"
    return Outcome(ok, time.monotonic() - start, said)


# -- Codex ----------------------------------------------------------------------------------------

CODEX_CONFIG = """model = "{model}"
model_provider = "localchat"
model_context_window = {context}
model_auto_compact_token_limit = {compact}

[model_providers.localchat]
name = "localchat"
base_url = "{url}/v1"
wire_api = "responses"
"""


def codex(bin_dir: Path, url: str, model: str, case: str, timeout: float) -> Outcome:
    home, work = folders("codex")
    (home / ".codex").mkdir(exist_ok=True)
    context = context_length(url, model)
    (home / ".codex" / "config.toml").write_text(CODEX_CONFIG.format(model=model, url=url, context=context,
                                                                     compact=context * 3 // 4))
    env = {**os.environ, "HOME": str(home), "CODEX_HOME": str(home / ".codex")}
    prompt = "Say hi." if case == "plain" else TOOL_TASK
    start = time.monotonic()
    code, events = run([str(bin_dir / "codex"), "exec", "--json", "--skip-git-repo-check", prompt], env, work, timeout)
    items = [e["item"] for e in events if e.get("type") == "item.completed"]
    said = " ".join(str(i.get("text", "")) for i in items if i.get("type") == "agent_message")
    done = any(e.get("type") == "turn.completed" for e in events)
    ok = code == 0 and done and bool(said.strip()) and not RAW_CALL.search(said)
    if case == "tool":
        commands = [i for i in items if i.get("type") == "command_execution"]
        ok = ok and bool(commands)
        said = f"{len(commands)} command(s) {[c.get('command') for c in commands]}, then: {said}"
    if not done:
        said += " " + json.dumps([e for e in events if e.get("type") in ("error", "turn.failed")])[:400]
    return Outcome(ok, time.monotonic() - start, said)


CASES: dict[str, Callable[..., Outcome]] = {"claude": claude, "codex": codex}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=sorted(CASES))
    parser.add_argument("--timeout", type=float, default=1800, help="seconds for one client run")
    parser.add_argument("--config", type=Path, help="a models.toml to serve instead of the shipped one")
    parser.add_argument("--model", help="the model the clients ask for (default: the registry's default)")
    args = parser.parse_args()
    if not shutil.which("npm"):
        raise SystemExit("acceptance needs npm (Node.js 22 or newer)")
    bin_dir = install()
    server = Serve(args.config)
    failed = 0
    started = time.monotonic()
    try:
        model = args.model or server.model()
        print(f"localchat serve: {server.url}, default model {model}", flush=True)
        for client, drive in CASES.items():
            if args.only and client != args.only:
                continue
            for case in ("plain", "tool"):
                try:
                    outcome = drive(bin_dir, server.url, model, case, args.timeout)
                except subprocess.TimeoutExpired:
                    outcome = Outcome(False, args.timeout, "timed out")
                failed += not outcome.ok
                said = outcome.said.replace("\n", " ")[:160]
                print(f"{client:7} {case:6} {'PASS' if outcome.ok else 'FAIL'} {outcome.seconds:7.1f} s  {said}",
                      flush=True)
        print(f"({time.monotonic() - started:.0f} s in all; the clients' output: {LOGS})", flush=True)
    finally:
        print("\nserver access log:")
        print("\n".join(line for line in server.output().splitlines() if " POST " in line))
        server.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
