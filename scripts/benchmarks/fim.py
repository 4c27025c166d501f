"""--fim: llama.vscode's /infill requests (16 chunks of other files, the lines around the cursor, the
typed part of the line; n_predict 128, t_max_predict_ms 500, n_indent): one cold, then one a
keystroke; time to the answer, p50 against llama-server's as llama.vscode's README starts it (goal:
p50 <= llama-server's)."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import httpx

from localchat.models import ModelSpec
from localchat.serve_process import Server

from .common import LlamaServer, edit_file


def fim_bodies(model: str, keystrokes: int) -> list[dict]:
    """llama.vscode's /infill requests while someone types a line: 16 chunks of other files as
    `input_extra`, the lines above the cursor, the typed part of the line as `prompt`, the rest
    below; n_predict 128, t_max_predict_ms 500, n_indent, its samplers; one request a keystroke."""
    lines = edit_file().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "problems = [p for check" in line)
    typed = "    problems = [p for check in CHECKS for p in check(settings)]"
    chunks = [{"filename": f"service/part_{k}.py",
               "text": "".join(edit_file().replace("check_", f"part{k}_").splitlines(keepends=True)[k * 6:k * 6 + 32])}
              for k in range(16)]
    base = {"model": model, "input_prefix": "".join(lines[:at]), "input_suffix": "\n" + "".join(lines[at + 1:]),
            "input_extra": chunks, "n_predict": 128, "top_k": 40, "top_p": 0.99, "stream": False,
            "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True, "t_max_prompt_ms": 500,
            "t_max_predict_ms": 500, "n_indent": 4, "seed": 1}
    return [{**base, "prompt": typed[:len("    problems = ") + k]} for k in range(keystrokes + 1)]


def fim_run(url: str, bodies: list[dict]) -> list[tuple[float, dict]]:
    out = []
    for body in bodies:
        start = time.perf_counter()
        r = httpx.post(url + "/infill", json=body, timeout=3600)
        r.raise_for_status()
        out.append((time.perf_counter() - start, r.json()))
    return out


def fim_bench(config: Path, specs: list[ModelSpec], keystrokes: int) -> None:
    import os

    os.environ["LOCALCHAT_PROMPT_CACHE_DIR"] = tempfile.mkdtemp(prefix="localchat-bench-prompts-")  # cold is cold
    print(f"llama.vscode's /infill requests: 16 chunks of context, n_predict 128, t_max_predict_ms 500; "
          f"a cold request, then {keystrokes} keystrokes (goal: p50 <= llama-server's)")
    print(f"{'model':20} {'server':13} {'cold':>7} {'p50':>7} {'max':>7} {'tokens':>7} {'cached':>7}")
    for spec in specs:
        bodies = fim_bodies(spec.name, keystrokes)
        runs = {}
        server = Server(config, "--model", spec.name)
        try:
            runs["localchat"] = fim_run(server.url, bodies)
        finally:
            server.stop()
        if os.environ.get("LLAMA_SERVER"):  # as llama.vscode's README starts it
            their = LlamaServer(spec, "-c", "16384", "-np", "1", "-ub", "1024", "-b", "1024", "--cache-reuse", "256")
            try:
                runs["llama-server"] = fim_run(their.url, bodies)
            finally:
                their.stop()
        p50 = {}
        for name, run in runs.items():
            warm = [seconds for seconds, _ in run[1:]]
            p50[name] = statistics.median(warm)
            tokens = statistics.median(answer.get("tokens_predicted", 0) for _, answer in run[1:])
            cached = statistics.median(answer.get("tokens_cached", 0) for _, answer in run[1:])
            print(f"{spec.name:20} {name:13} {run[0][0]:6.2f}s {p50[name]:6.2f}s {max(warm):6.2f}s "
                  f"{tokens:7.0f} {cached:7.0f}")
        if "llama-server" in p50:
            ratio = p50["llama-server"] / p50["localchat"] if p50["localchat"] else 0.0
            print(f"{spec.name:20} p50 llama-server/localchat {ratio:.2f}x  {'PASS' if ratio >= 1 else 'FAIL'}")
