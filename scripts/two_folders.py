"""A coding agent in a second folder: how much of its first prompt is read again, and whether the
reused cells change the answer.

    scripts/two-folders [--only opencode,claude] [--model NAME] [--tokens N] [--no-replay]

For each client (opencode and Claude Code by default; any of scripts/acceptance's), runs "Say hi."
in one new folder, then in another (new HOME and folder each, as scripts/acceptance does), on a
server without a prompt store (the first folder is read cold, as a user's first session is), through
a loopback proxy that keeps every request body. Prints each folder's access-log lines and its
longest wait for a first token (prompt, cached, time to first token), and the ratio of the
second's to the first's.

Then replays the second folder's first request greedily (temperature 0, N tokens) twice, each on a
fresh server with no prompt store: after the first folder's request, so that it is read by shifting
the first folder's cached cells (what a user's second folder gets), and read cold. Prints both answers and whether they are the same; where they part, the tokens
there (and, on the chat completions path, the top-2 log-probability margin: a near-tie another
batch shape may break)."""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's localchat
from localchat.devtools import isolate_home  # noqa: E402

isolate_home()  # (the servers it starts keep away from the user's registry and prompt store)

from localchat.devtools import clients as A  # noqa: E402
from localchat.serve_process import Server  # noqa: E402
from localchat.models import shipped_config  # noqa: E402

LINE = re.compile(r"prompt=(\d+) cached=(\d+).* ttft=([\d.]+)s")


def first_lines(log: str) -> list[tuple[int, int, float]]:
    return [(int(m[1]), int(m[2]), float(m[3])) for m in map(LINE.search, log.splitlines()) if m]


def greedy(url: str, path: str, body: dict, tokens: int) -> tuple[str, dict]:
    """The answer to the request, greedy, N tokens; and the response (usage, log-probabilities)."""
    body = {**body, "stream": False, "temperature": 0, "top_k": 1}
    if path.endswith("/messages"):
        body["max_tokens"] = tokens
    else:
        body.update(max_tokens=tokens, logprobs=True, top_logprobs=2)
        body.pop("max_completion_tokens", None)
        body.pop("stream_options", None)
    response = httpx.post(url + path, json=body, timeout=3600).json()
    if path.endswith("/messages"):
        return "".join(c.get("text", "") + json.dumps(c.get("input", "")) if c.get("type") == "tool_use"
                       else c.get("text", "") for c in response.get("content", [])), response
    message = response["choices"][0]["message"]
    return (message.get("content") or "") + json.dumps(message.get("tool_calls") or ""), response


def parting(cold: dict, warm: dict) -> str:
    """Where two chat completions' tokens part, and the cold read's top-2 margin there."""
    a = (cold["choices"][0].get("logprobs") or {}).get("content") or []
    b = (warm["choices"][0].get("logprobs") or {}).get("content") or []
    for i, (x, y) in enumerate(zip(a, b)):
        if x["token"] != y["token"]:
            tops = sorted((t["logprob"] for t in x.get("top_logprobs", [])), reverse=True)
            margin = tops[0] - tops[1] if len(tops) > 1 else float("nan")
            return f"parted at token {i}: {x['token']!r} cold, {y['token']!r} reused; top-2 margin {margin:.3f} cold"
    return "the same tokens"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="opencode,claude")
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--tokens", type=int, default=48, help="tokens of each greedy answer (default 48)")
    parser.add_argument("--no-replay", action="store_true", help="the two folders' waits only")
    args = parser.parse_args()
    bins = A.install()
    saved = Path(tempfile.mkdtemp(prefix="two-folders-"))
    print(f"request bodies in {saved}", flush=True)
    quiet = Path(tempfile.mkdtemp()) / "models.toml"  # no prompt store: the first folder is read cold
    quiet.write_text("prompt_cache_bytes = 0\n" + shipped_config().read_text())
    for client in args.only.split(","):
        server = A.Serve(quiet)
        recorder = A.Recorder(server.url)
        context = A.context_length(server.url, args.model)
        marks, bodies = [], []
        try:
            for folder in (1, 2):
                mark, since = len(server.output()), len(recorder.bodies)
                run = A.Run(client, "plain", recorder.url, args.model, context, bins)
                begun = time.monotonic()
                A.CLIENTS[client](run, 3600)
                log = server.output()[mark:]
                lines = first_lines(log)
                # the longest a first token was waited for (a client may send a side request with the same
                # prompt first: then that one read it and the main request found it cached)
                waited = max(lines, key=lambda line: line[2])
                marks.append(waited)
                bodies.append(recorder.main_body(since))
                kept = saved / f"{client}-folder-{folder}.json"  # every request body of the folder, in order
                kept.write_text(json.dumps([{"path": p, "body": json.loads(b)} for p, b in recorder.bodies[since:]]))
                print(f"{client} folder {folder} ({run.work}): exit {run.code} in {time.monotonic() - begun:.0f} s; "
                      f"longest wait for a first token {waited[2]:.2f} s (prompt {waited[0]} tokens, {waited[1]} from "
                      f"the cache); answer {' '.join(run.answer.split())[:80]!r}", flush=True)
                print("\n".join("  " + line for line in log.splitlines() if A.ACCESS.match(line)), flush=True)
            print(f"{client}: the second folder's longest wait in {marks[1][2] / marks[0][2]:.1%} of the first's",
                  flush=True)
        finally:
            server.stop()
        if args.no_replay:
            continue
        (path, first), (_, second) = bodies
        answers = []
        for after_first in (True, False):
            server = Server(quiet, "--model", args.model)
            try:
                if after_first:
                    greedy(server.url, path, first, 1)
                answers.append(greedy(server.url, path, second, args.tokens))
                print("\n".join(line for line in server.output().splitlines() if A.ACCESS.match(line)), flush=True)
            finally:
                server.stop()
        (warm, warm_response), (cold, cold_response) = answers
        print(f"{client}: the second folder's request, greedy, {args.tokens} tokens; read cold: {cold!r}")
        print(f"{client}: read after the first folder's: {warm!r}")
        detail = "" if cold == warm or path.endswith("/messages") else "; " + parting(cold_response, warm_response)
        print(f"{client}: {'the same answer' if cold == warm else 'different answers'}{detail}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
