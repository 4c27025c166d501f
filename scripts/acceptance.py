"""Acceptance: the coding agents people run, as they ship, headless, against a real `localchat serve`.

    scripts/acceptance [--only CLIENT[,CLIENT]] [--cases plain,tool,edit] [--runs N] [--timeout S]
                       [--first-timeout S] [--config models.toml] [--model NAME] [--url URL]

Installs pinned releases of eight agent CLIs into a cache folder once (npm: Claude Code, Codex,
opencode, Qwen Code, pi, Cline, Continue's `cn`, and Node.js 22 for Qwen Code; pip: aider into a
virtual environment of its own), starts `localchat serve` on a free loopback port with the shipped
registry (or `--config`; `--model` picks the model the clients ask for), then starts each client
headless the way a user does: `localchat launch CLIENT --model M -- ARGS`, its own headless flags
and the task after `--`, and nothing else set up for it but what a user would add (auto-approved
tools: opencode's permissions in its user config), each run in a throw-away HOME and work folder,
offline (launch turns telemetry and update checks off; a dead proxy, the server's host exempt,
catches what is left). Cases:

- `plain`: "Say hi." — the client exits 0 with a text answer holding no tool call written as text;
- `tool`: "Use your shell tool to run … echo localchat-acceptance-42" — the client runs the
  command, sends the result back and exits 0 with an answer after it;
- `edit`: a folder with shapes.py; "rename the function `area` to `rect_area` everywhere in
  shapes.py" — PASS when the file on disk has the rename (no `area(` left) and still imports
  and computes.

`--runs N` repeats every case N times (each in a fresh folder: the runs after the first read the
agent's long prompt from the cache, its folder's path read again) and prints the rate. Every
failure is classed from the server's access log of that run and the client's transcript:

- *server*: a 4xx/5xx, a tool call left as text that names a tool the client declared (the
  clients talk to the server through a loopback proxy that keeps their requests), a prompt the
  client gave up on while it was being read;
- *model*: what the model chose: no call, a call to a tool the client does not declare, arguments
  the client's own rules refuse, a wrong edit, a loop until the time ran out.

Prints one line per run, the matrix, then the server's access log. Slow on a laptop CPU: each
agent's first prompt is 4–16k tokens, read once, then from the cache."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's localchat
from localchat.devtools import isolate_home  # noqa: E402

isolate_home()  # (the servers it starts keep away from the user's registry and prompt store)

from localchat.devtools.clients import (ACCESS, CLIENTS, RUNS, SHAPES, TASKS, Recorder, Run, Running,  # noqa: E402
                                        Serve, classify, context_length, install, judge, settle)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help=f"clients, comma-separated, of: {', '.join(CLIENTS)}")
    parser.add_argument("--cases", default="plain,tool,edit", help="cases, comma-separated (default: all three)")
    parser.add_argument("--runs", type=int, default=1, help="runs of every case (default 1)")
    parser.add_argument("--timeout", type=float, default=420, help="seconds for one client run (default 420)")
    parser.add_argument("--first-timeout", type=float, default=1500,
                        help="seconds for a client's first run, which reads its long prompt cold (default 1500)")
    parser.add_argument("--config", type=Path, help="a models.toml to serve instead of the shipped one")
    parser.add_argument("--model", help="the model the clients ask for (default: the registry's default)")
    parser.add_argument("--url", help="a localchat serve already running (its log is not read: no failure classes)")
    args = parser.parse_args()
    clients = args.only.split(",") if args.only else list(CLIENTS)
    cases = args.cases.split(",")
    if unknown := [c for c in clients if c not in CLIENTS] + [c for c in cases if c not in TASKS]:
        parser.error(f"unknown: {', '.join(unknown)}")
    if not shutil.which("npm"):
        raise SystemExit("acceptance needs npm (Node.js 20 or newer)")
    bins = install()
    RUNS.mkdir(parents=True, exist_ok=True)
    logs = Path(tempfile.mkdtemp(prefix="localchat-acceptance-"))  # each run's transcript and requests
    server = Running(args.url) if args.url else Serve(args.config)
    recorder = Recorder(server.url)  # the clients talk to it: which tools they declared, for the failures' classes
    started = time.monotonic()
    matrix: dict[tuple[str, str], list[tuple[bool, str]]] = {}
    try:
        model = args.model or server.model()
        context = context_length(server.url, model)
        print(f"localchat serve: {server.url}, model {model} ({context} tokens of context); "
              f"transcripts in {logs}", flush=True)
        for client in clients:
            for case in cases:
                for n in range(args.runs):
                    run = Run(client, case, recorder.url, model, context, bins)
                    if case == "edit":
                        (run.work / "shapes.py").write_text(SHAPES)
                    mark, since = len(server.output()), len(recorder.bodies)
                    begun = time.monotonic()
                    first = case == cases[0] and n == 0
                    CLIENTS[client](run, args.first_timeout if first else args.timeout)
                    seconds = time.monotonic() - begun
                    settle(server.url, model)
                    ok, seen = judge(run)
                    why = "" if ok else classify(run, server.output()[mark:], recorder.declared(since))
                    matrix.setdefault((client, case), []).append((ok, why))
                    (logs / f"{client}-{case}-{n + 1}.txt").write_text(run.output)
                    (logs / f"{client}-{case}-{n + 1}.requests.jsonl").write_text("".join(  # what it sent, in order
                        json.dumps({"path": path, "body": body.decode(errors="replace")}) + "\n"
                        for path, body in recorder.bodies[since:]))
                    run.remove()
                    print(f"{client:8} {case:5} {n + 1}  {'PASS' if ok else 'FAIL'} {seconds:7.1f} s  "
                          f"{why + ' — ' if why else ''}{seen}"[:400].replace("\n", " "), flush=True)
        print(f"\n({time.monotonic() - started:.0f} s in all)\n")
        print(f"{'client':9}" + "".join(f"{case:>10}" for case in cases) + "   failures")
        for client in clients:
            cells = [matrix.get((client, case), []) for case in cases]
            why = sorted({w for cell in cells for ok, w in cell if not ok})
            print(f"{client:9}" + "".join(f"{sum(ok for ok, _ in cell):>8}/{len(cell)}" for cell in cells)
                  + "   " + "; ".join(why))
        server_failures = sum(w.startswith("server") for cell in matrix.values() for ok, w in cell if not ok)
        print(f"\nfailures classed server: {server_failures}")
    finally:
        print("\nserver access log:")
        print("\n".join(line for line in server.output().splitlines()
                        if ACCESS.match(line) or "cancelled while" in line))
        server.stop()
    return 1 if any(not ok for cell in matrix.values() for ok, _ in cell) else 0


if __name__ == "__main__":
    sys.exit(main())
