"""How often a model's tool calls come back as calls: one `shell` tool, "run echo …", N seeds, on
a running server (chat completions, streaming off). Each answer is a call (`tool_calls`), a miss
(its text still holds a call object naming the tool: a form the server did not read) or text.

    scripts/tool-tally [--url http://127.0.0.1:8000] [--model NAME] [--seeds 6]

Exit status 1 when any answer is a miss."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time

import httpx

SHELL = {"type": "function", "function": {
    "name": "shell", "description": "Run a shell command and return its output.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string", "description": "The command"}},
                   "required": ["command"]}}}
ASK = "Use your shell tool to run this command: echo localchat-acceptance-42"
MISS = re.compile(r'"name"\s*:\s*"shell"')


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default="")
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=512)
    args = ap.parse_args()
    tally = {"call": 0, "miss": 0, "text": 0}
    for seed in range(1, args.seeds + 1):
        body = {"model": args.model, "messages": [{"role": "user", "content": ASK}], "tools": [SHELL], "seed": seed,
                "max_tokens": args.max_tokens}
        start = time.monotonic()
        r = httpx.post(args.url + "/v1/chat/completions", json=body, timeout=900)
        r.raise_for_status()
        choice = r.json()["choices"][0]
        message, calls = choice["message"], choice["message"].get("tool_calls") or []
        kind = "call" if calls else "miss" if MISS.search(message.get("content") or "") else "text"
        tally[kind] += 1
        shown = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]
        print(f"seed {seed}: {kind:4}  finish={choice['finish_reason']:10} {time.monotonic() - start:5.1f} s  "
              f"calls={shown}  content={json.dumps((message.get('content') or '')[:160])}", flush=True)
    print(f"tally: {tally['call']} call(s), {tally['miss']} miss(es), {tally['text']} text answer(s) "
          f"of {args.seeds}")
    return 1 if tally["miss"] else 0


if __name__ == "__main__":
    sys.exit(main())
