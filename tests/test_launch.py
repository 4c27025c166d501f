"""`localchat launch CLIENT`: each client set up by environment, flags and launch's own files (never the
user's), `--list` and `--print`, a client not installed (exit 2 and its install command), a running
server used and, without one, a server started for the client's lifetime and stopped after.

The clients here are stand-ins on PATH that record their arguments and environment: the real agents
run through launch in scripts/acceptance."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Server, free_port
from localchat import launch as L

MODEL = "tiny-chatml"
# the user's own config files, as each client keeps them: launch must leave every byte as it was
USER_FILES = {
    ".claude.json": '{"numStartups": 3}\n',
    ".claude/settings.json": '{"model": "opus"}\n',
    ".codex/config.toml": 'model = "gpt-5"\nmodel_provider = "openai"\n',
    ".config/opencode/opencode.json": '{"model": "anthropic/claude"}\n',
    ".qwen/settings.json": '{"security": {"auth": {"selectedType": "qwen-oauth"}}}\n',
    ".pi/agent/models.json": '{"providers": {}}\n',
    ".pi/agent/settings.json": '{"theme": "dark"}\n',
    ".cline/data/globalState.json": '{"apiProvider": "anthropic"}\n',
    ".continue/config.yaml": "name: mine\nversion: 1.0.0\nschema: v1\nmodels: []\n",
    ".aider.conf.yml": "model: gpt-4o\n",
}
NO_CONTEXT = {"qwen", "cline"}  # clients that take no context window from their settings
STAND_IN = """#!{python}
import json, os, sys
with open(os.environ["RECORD"], "a") as f:
    f.write(json.dumps({{"argv": sys.argv, "env": dict(os.environ)}}) + "\\n")
print("the client's own output")
sys.exit(int(os.environ.get("EXIT", "0")))
"""


def records(tmp_path: Path) -> list[dict]:
    """Each run of a stand-in client, in order."""
    return [json.loads(line) for line in (tmp_path / "record.json").read_text().splitlines()]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    for name, text in USER_FILES.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    return home


def snapshot(home: Path) -> dict[str, str]:
    """Every file of the user's HOME but launch's own folder, by its sha256."""
    mine = home / ".local" / "share" / "localchat"
    return {str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(home.rglob("*")) if p.is_file() and mine not in p.parents}


def stand_ins(folder: Path, names: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = folder / name
        path.write_text(STAND_IN.format(python=sys.executable))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return folder


def run_launch(home: Path, *args: str, path: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "HOME": str(home), "XDG_DATA_HOME": str(home / ".local" / "share"),
               "XDG_CONFIG_HOME": str(home / ".config"), "PATH": str(path or home / "nothing"),  # (only the stand-ins: a client installed here is not found)
               "RECORD": str(home.parent / "record.json"), **env}
    environ.pop("LOCALCHAT_DATA_DIR", None)
    return subprocess.run([sys.executable, "-m", "localchat", "launch", *args], env=environ, capture_output=True,
                          text=True, timeout=300)


# -- each client's setup ---------------------------------------------------------------------------

@pytest.mark.fast
@pytest.mark.parametrize("name", list(L.CLIENTS))
def test_every_setup_points_at_the_server_and_writes_only_its_own_folder(name: str, tmp_path: Path):
    target = L.Target("http://127.0.0.1:8123", "the-model", 20000)
    s = L.setup(name, target, tmp_path / name)
    assert s.argv[0] == L.CLIENTS[name].program
    said = json.dumps([s.argv, s.env, s.before]) + "".join(s.files.values())
    assert "http://127.0.0.1:8123" in said and "the-model" in said  # the server, the model
    assert ("20000" in said) == (name not in NO_CONTEXT)  # the model's context, where the client takes it
    assert all(tmp_path / name in p.parents for p in s.files)
    assert all(str(p) in said or str(p.parent) in said for p in s.files)  # named to the client (a flag, a variable)
    s.write()
    assert {p for p in (tmp_path / name).rglob("*") if p.is_file()} == set(s.files)
    for path, text in s.files.items():
        if path.suffix == ".json":
            json.loads(text)


@pytest.mark.fast
def test_claude_codes_own_model_names_all_map_to_the_model(tmp_path: Path):
    env = L.setup("claude", L.Target("http://127.0.0.1:1", "m", 32768), tmp_path).env
    for name in ("ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL",
                 "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL"):
        assert env[name] == "m"
    assert env["DISABLE_AUTOUPDATER"] == "1" and env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "32768"
    assert env["CLAUDE_STREAM_IDLE_TIMEOUT_MS"] == env["API_TIMEOUT_MS"]  # else a first read over 300 s is cut


@pytest.mark.fast
@pytest.mark.parametrize("version, noted", [("v20.20.2", True), ("v22.1.0", False), ("", False)])
def test_qwen_codes_node_note_only_where_node_is_older_than_22(version: str, noted: bool, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if version:
        node = bin_dir / "node"
        node.write_text(f"#!/bin/sh\necho {version}\n")
        node.chmod(node.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(bin_dir))
    notes = L.qwen(L.Target("http://127.0.0.1:1", MODEL, 8192, None), tmp_path / "launch").notes
    assert bool(notes) == noted and all(version.lstrip("v") in note for note in notes)


# -- the command -----------------------------------------------------------------------------------

def test_list_shows_every_client_installed_or_how_to_install_it(home: Path, tmp_path: Path):
    bins = stand_ins(tmp_path / "bin", ["codex", "aider"])
    before = snapshot(home)
    r = run_launch(home, "--list", path=bins)
    assert r.returncode == 0, r.stderr
    for name, spec in L.CLIENTS.items():
        line = next(line for line in r.stdout.splitlines() if line.startswith(f"{name} ("))
        assert (f"installed, {bins / name}" in line) if name in ("codex", "aider") else spec.install in line
    assert snapshot(home) == before and not (home / ".local" / "share" / "localchat" / "launch").exists()


def test_a_client_not_installed_gets_its_install_command_and_exit_2(home: Path, registry_file: Path):
    before = snapshot(home)
    r = run_launch(home, "opencode", "--model", MODEL, "--config", str(registry_file), "--port", str(free_port()))
    assert r.returncode == 2 and "npm install -g opencode-ai" in r.stderr
    assert snapshot(home) == before


@pytest.fixture(scope="module")
def served(registry_file: Path):
    s = Server(registry_file, "--model", MODEL)
    yield s
    s.stop()


def test_print_shows_the_environment_files_and_command_and_starts_nothing(home: Path, served: Server):
    r = run_launch(home, "pi", "--print", "--model", MODEL, "--port", str(served.port))
    assert r.returncode == 0, r.stderr
    assert f"PI_CODING_AGENT_DIR={home}/.local/share/localchat/launch/pi" in r.stdout
    assert f'"baseUrl": "{served.url}/v1"' in r.stdout and r.stdout.rstrip().endswith(f"pi --provider localchat --model {MODEL}")
    assert not (home / ".local" / "share" / "localchat" / "launch").exists()  # nothing written


@pytest.mark.parametrize("name", list(L.CLIENTS))
def test_a_running_server_is_used_and_the_users_files_stay_as_they_were(name: str, home: Path, tmp_path: Path,
                                                                         served: Server):
    bins = stand_ins(tmp_path / "bin", [L.CLIENTS[name].program])
    before = snapshot(home)
    r = run_launch(home, name, "--model", MODEL, "--port", str(served.port), "--", "-p", "Say hi.", path=bins)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == "the client's own output\n"  # (launch's notes and warnings: stderr)
    *setups, record = records(tmp_path)
    assert record["argv"][0] == str(bins / L.CLIENTS[name].program) and record["argv"][-2:] == ["-p", "Say hi."]
    expected = L.setup(name, L.Target(served.url, MODEL, record_context(served), None),
                       home / ".local" / "share" / "localchat" / "launch" / name)
    assert [b["argv"][1:] for b in setups] == [step[1:] for step in expected.before]  # Cline's `auth` first
    assert record["argv"][1:-2] == expected.argv[1:]
    assert {k: record["env"].get(k) for k in expected.env} == expected.env
    for path, text in expected.files.items():
        assert path.read_text() == text
    assert snapshot(home) == before


def record_context(server: Server) -> int:
    import httpx

    return next(m["context_length"] for m in httpx.get(f"{server.url}/v1/models").json()["data"] if m["id"] == MODEL)


def test_without_a_server_one_is_started_for_the_client_and_stopped_after(home: Path, tmp_path: Path,
                                                                         registry_file: Path):
    import httpx

    bins = stand_ins(tmp_path / "bin", ["cn"])
    port = free_port()
    r = run_launch(home, "cn", "--model", MODEL, "--config", str(registry_file), "--port", str(port), path=bins,
                   EXIT="3")
    assert r.returncode == 3, r.stdout + r.stderr  # the client's own exit status
    record = records(tmp_path)[-1]
    config = Path(record["argv"][record["argv"].index("--config") + 1])
    assert f"apiBase: http://127.0.0.1:{port}/v1" in config.read_text()
    assert "starting localchat serve" in r.stderr
    assert r.stdout == "the client's own output\n"  # what launch says goes to stderr
    with pytest.raises(httpx.HTTPError):  # stopped after
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)


def test_a_server_with_an_api_key_needs_it_and_the_client_gets_it(home: Path, tmp_path: Path, registry_file: Path):
    keyed = Server(registry_file, "--model", MODEL, "--api-key", "s3cret")
    try:
        bins = stand_ins(tmp_path / "bin", ["claude"])
        r = run_launch(home, "claude", "--model", MODEL, "--port", str(keyed.port), path=bins)
        assert r.returncode == 1 and "--api-key" in r.stderr
        r = run_launch(home, "claude", "--model", MODEL, "--port", str(keyed.port), path=bins,
                       LOCALCHAT_API_KEY="s3cret")
        assert r.returncode == 0, r.stdout + r.stderr
        assert records(tmp_path)[-1]["env"]["ANTHROPIC_AUTH_TOKEN"] == "s3cret"
    finally:
        keyed.stop()
