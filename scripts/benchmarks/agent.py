"""--agent: an agent-like prompt of 10k+ tokens (long instructions, 24 tools, an environment block),
time to first token cold, then the next turn, a new session, a new session after a restart, after
an unload, and a new session whose environment block moved (written after the user's prompt inside
its text), and the same on /v1/messages as Claude Code 2.1.3xx sends it (the block a system message
after the user's): each against cold (goal <= 5%, for all but the moved block, which is read from
the last message's first difference by design), and llama-server's figures for the same requests
when LLAMA_SERVER names its binary (--cache-reuse 256, --cache-ram)."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from localchat.models import ModelSpec
from localchat.serve_process import Server

from .common import LlamaServer


AGENT_TOOLS = [{"type": "function", "function": {
    "name": f"tool_{i}", "description": f"Tool {i}: reads, edits or searches files in group {i} and reports what it found.",
    "parameters": {"type": "object", "properties": {
        "path": {"type": "string", "description": "Absolute path of the file."},
        "pattern": {"type": "string", "description": "What to look for."},
        "limit": {"type": "integer", "minimum": 1, "description": "At most this many results."}},
        "required": ["path"]}}} for i in range(24)]


def agent_body(model: str, session: str, moved: bool = False, turns: tuple = ()) -> dict:
    """An agent-like request of ~10k tokens: ~6k of instructions, 24 tools, an environment block
    (~1.5k tokens) before the user's task, or after it with `moved` (Claude Code's order); each
    session's task is of another length."""
    rules = "\n".join(f"{i}. When a task touches file group {i}, read the files first, keep the style you find, "
                      f"make the smallest change that works, run the tests for group {i}, and say what changed."
                      for i in range(140))
    env = "<environment>\n" + "\n".join(f"  <file path=\"src/module_{i}.py\" lines=\"{100 + i}\" />"
                                         for i in range(90)) + "\n</environment>"
    task = f"Session {session}: find where the configuration is parsed and explain it" + " in detail" * len(session) + "."
    user = f"{task}\n\n{env}" if moved else f"{env}\n\n{task}"
    return {"model": model, "temperature": 0, "max_tokens": 1, "tools": AGENT_TOOLS,
            "messages": [{"role": "system", "content": "You are a coding agent.\n" + rules},
                         {"role": "user", "content": user}, *turns]}


def claude_code_body(model: str, session: str) -> dict:
    """The same agent prompt as Claude Code (2.1.3xx) sends it on /v1/messages: the instructions
    as the system prompt, the tools, the user's task, then the environment block as a system
    message *after* it (Anthropic's mid-conversation system messages)."""
    body = agent_body(model, session)
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    env, task = user.split("\n\n", 1)
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in AGENT_TOOLS]
    return {"model": model, "temperature": 0, "max_tokens": 1, "system": system, "tools": tools,
            "messages": [{"role": "user", "content": task}, {"role": "system", "content": env}]}


def timed(url: str, body: dict) -> tuple[float, dict]:
    start = time.perf_counter()
    anthropic = "system" in body  # a Messages request (claude_code_body); its usage in chat's words
    r = httpx.post(url + ("/v1/messages" if anthropic else "/v1/chat/completions"), json=body, timeout=3600,
                   headers={"anthropic-version": "2023-06-01"})
    r.raise_for_status()
    usage = r.json().get("usage") or {}
    if anthropic:
        cached = usage.get("cache_read_input_tokens") or 0
        usage = {"prompt_tokens": (usage.get("input_tokens") or 0) + cached,
                 "prompt_tokens_details": {"cached_tokens": cached}}
    return time.perf_counter() - start, usage


def agent_cases(url: str, model: str, restart: Callable[[], str] | None, unload: Callable[[], None] | None):
    """(case, seconds, usage) for each case, in order; a case the server cannot do is None."""
    out = []
    seconds, usage = timed(url, agent_body(model, "A"))
    out.append(("cold", seconds, usage))
    turn = agent_body(model, "A", turns=({"role": "assistant", "content": "I will look at the parser."},
                                         {"role": "user", "content": "Go on."}))
    out.append(("next turn", *timed(url, turn)))
    out.append(("new session", *timed(url, agent_body(model, "B"))))
    if restart is not None:
        url = restart()
        out.append(("after a restart", *timed(url, agent_body(model, "C"))))
    else:
        out.append(("after a restart", None, {}))
    if unload is not None:
        unload()
        out.append(("after an unload", *timed(url, agent_body(model, "D"))))
    else:
        out.append(("after an unload", None, {}))
    timed(url, agent_body(model, "EE", moved=True))  # the environment block after the task, once
    out.append(("env block moved", *timed(url, agent_body(model, "F", moved=True))))
    try:  # as Claude Code sends it: the block a system message after the task (one session first)
        timed(url, claude_code_body(model, "GG"))
        out.append(("env after, Claude", *timed(url, claude_code_body(model, "H"))))
    except httpx.HTTPError:  # a server without Anthropic's route or its late system messages
        out.append(("env after, Claude", None, {}))
    return out


def agent_bench(config: Path, spec: ModelSpec) -> None:
    import os

    folder = Path(tempfile.mkdtemp(prefix="localchat-bench-prompts-"))
    os.environ["LOCALCHAT_PROMPT_CACHE_DIR"] = str(folder)  # a cold cache for this run
    state = {"server": Server(config, "--model", spec.name)}

    def restart() -> str:
        state["server"].stop()
        state["server"] = Server(config, "--model", spec.name)
        return state["server"].url

    def unload() -> None:
        httpx.post(state["server"].url + "/api/generate", json={"model": spec.name, "keep_alive": 0},
                   timeout=120).raise_for_status()

    try:
        ours = agent_cases(state["server"].url, spec.name, restart, unload)
    finally:
        state["server"].stop()
    theirs = None
    if os.environ.get("LLAMA_SERVER"):
        their = LlamaServer(spec, "-c", str(4 * 32768), "-np", "4", "--cache-reuse", "256", "--cache-ram", "8192")

        def restart_theirs() -> str:
            their.stop()
            their.start()
            return their.url

        try:
            theirs = agent_cases(their.url, spec.name, restart_theirs, None)
        finally:
            their.stop()
    cold = ours[0][1]
    print(f"model {spec.name}: an agent's prompt of {ours[0][2].get('prompt_tokens')} tokens, 24 tools; "
          "time to first token (goal: <= 5% of cold for all but cold and the moved block: "
          "the last message is read from its first difference)")
    print(f"{'case':18} {'localchat':>10} {'cached':>7} {'of cold':>8}  {'llama-server':>12} {'ratio':>6}  goal")
    for i, (case, seconds, usage) in enumerate(ours):
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        if seconds is None:
            print(f"{case:18} {'-':>10}")
            continue
        share = seconds / cold
        them = theirs[i][1] if theirs else None
        ratio = f"{them / seconds:5.1f}x" if them else "     -"
        # the block after the task in the last message: read from the message's first difference, by design
        goal = "" if case in ("cold", "env block moved") else ("PASS" if share <= 0.05 else "FAIL")
        print(f"{case:18} {seconds:9.2f}s {cached:7} {share:7.1%}  "
              f"{(f'{them:11.2f}s' if them else '           -')} {ratio}  {goal}")
