"""--edit: a file returned with one rename, greedy, in four cases (edit_messages: module, a real
module with a method renamed; synthetic, edit_file()'s 121 lines; patch, a file written back whole in
a tool call; prose, nothing to copy): decode tok/s without drafts (ngram_draft 0) and with them (the
default), the texts compared (identical, or parted only at a near-tie, < TIE; see parting);
llama-server's tok/s with --spec-type ngram-mod when LLAMA_SERVER names its binary; the module case
again with the file as the prediction (OpenAI's Predicted Outputs) and the prediction's
accepted/rejected tokens from usage; four streams at once with drafts and without; with
--draft-model, the module case with that model drafting; and what drafts could give at best here: a
step of k tokens' cost against one token's (a compute-bound CPU pays nearly k times for k).
Goals: module and patch with drafts >= 2x without, every case but prose >= llama-server's, prose
with drafts >= 0.97x without; the prediction's text identical, >= 2x without drafts and >= drafts
from the prompt; four streams >= their tok/s without drafts, each stream's ms/token <= 1.5x.
With --record: only the prompt's and the greedy answer's token ids of the module, patch and prose
cases and of ten more (more_messages), written to a file (tests/fixtures/drafts-*.json, which
tests/test_draft_replay.py replays)."""

from __future__ import annotations

import functools
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import llama_cpp as C

from localchat.models import ModelSpec
from localchat.serve_process import Server

from .common import LlamaServer, edit_file, http_stream


def pinned_source(name: str) -> str:
    """A module of llama-cpp-python, which pyproject.toml pins (0.3.36): the same text on every machine."""
    import hashlib

    path = Path(C.__file__).parent / name
    text = path.read_text()
    want = PINNED_SOURCES[name]
    if hashlib.sha256(text.encode()).hexdigest()[:16] != want:
        raise SystemExit(f"{path} is not llama-cpp-python 0.3.36's {name} (sha256 {want}...): the --edit cases "
                         "need the pinned version")
    return text


PINNED_SOURCES = {"llama_cache.py": "fe9e5fdad7c3e67e", "llama_tokenizer.py": "482e57da563dd537",
                  "server/__main__.py": "1cbf72bcf5f497b1", "_utils.py": "b8149396b2460cb3",
                  "llama_speculative.py": "37dabf1ee9aad01d", "server/cli.py": "bb85b8d325de4ccb",
                  "_logger.py": "e9f545f319c32bd5", "llava_cpp.py": "53ee7279d9d45624"}
RENAME = ("Rename the {what} `{old}` to `{new}` everywhere in this file and return the whole file, every line "
          "of it. Output only the code.\n\n```python\n{text}```")
FILE_TOOLS = [{"type": "function", "function": {
    "name": name, "description": what, "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, **({"content": {"type": "string"}} if both else {})},
        "required": ["path", *(["content"] if both else [])]}}}
    for name, what, both in (("read_file", "Read a file of the project.", False),
                             ("write_file", "Write a whole file of the project (every line of it).", True))]


def edit_messages(case: str) -> tuple[list[dict], dict]:
    """The conversation of an --edit case, and the request's other fields.
    module: a real module (llama-cpp-python's llama_cache.py, 155 lines) with a method renamed (7 lines touched);
    synthetic: edit_file(), ten near-identical blocks that differ in their digits (every few tokens a match breaks);
    patch: the file read by a tool call earlier in the conversation, written back whole in a forced write_file call
    (its content a JSON string, as Claude Code's Write and Codex's apply_patch write it);
    prose: an explanation, nothing to copy."""
    if case == "module":
        return [{"role": "user", "content": RENAME.format(what="method", old="_find_longest_prefix_key",
                                                          new="_longest_prefix", text=pinned_source("llama_cache.py"))}], {}
    if case == "synthetic":
        return [{"role": "user", "content": RENAME.format(what="variable", old="settings", new="config",
                                                          text=edit_file())}], {}
    if case == "patch":
        return read_then_write("llama_tokenizer.py", "rename `hf_tokenizer` to `tokenizer`")
    if case == "prose":
        return [{"role": "user", "content": "Explain in detail how a CPU's memory caches work: the levels, lines, "
                                            "associativity, write policies and coherence between cores."}], {}
    raise ValueError(case)


def read_then_write(name: str, edit: str) -> tuple[list[dict], dict]:
    """A pinned file read by a read_file call earlier in the conversation, to be written back whole
    with `edit` done, in a forced write_file call."""
    path = f"llama_cpp/{name}"
    call = {"id": "call_1", "type": "function", "function": {"name": "read_file",
                                                             "arguments": json.dumps({"path": path})}}
    return [{"role": "user", "content": f"In {path}, {edit} everywhere, then write the whole file back."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": pinned_source(name)}], \
        {"tools": FILE_TOOLS, "tool_choice": {"type": "function", "function": {"name": "write_file"}}}


EDIT_CASES = ("module", "synthetic", "patch", "prose")
WHOLE = "Return the whole file, every line of it. Output only the code.\n\n```python\n{}```"


def more_messages(case: str) -> tuple[list[dict], dict]:
    """Ten more requests, only recorded (--record), not timed: edits of other files of llama-cpp-python
    (docstrings, renames, prints, comments, type hints, a tool call writing a file back), and answers
    that copy little (a line-by-line explanation, tests, a story), so that the replay's figures are
    not one file's."""
    if case == "patch2":
        return read_then_write("server/cli.py", "rename `parse_model_from_args` to `model_from_args`")
    asks = {
        "docstrings": ("Add a one-line docstring to every function in this file. ", "server/__main__.py", True),
        "rename2": ("Rename the class `suppress_stdout_stderr` to `QuietOutput` everywhere in this file. ", "_utils.py", True),
        "prints": ("Add a print statement at the start of every method that prints its name. ", "llama_speculative.py", True),
        "explain": ("Explain this code line by line, quoting each line before you explain it.", "llama_speculative.py", False),
        "types": ("Add type hints to every function in this file. ", "_logger.py", True),
        "rename3": ("Rename `_libllava` to `_lib` everywhere in this file. ", "llava_cpp.py", True),
        "comments": ("Add a comment above every line of the function that explains it. ", "llama_speculative.py", True),
        "tests": ("Write pytest tests for every function and class of this module.", "_utils.py", False),
    }
    if case == "story":
        return [{"role": "user", "content": "Write a short story about a robot who learns to cook soup for a village."}], {}
    ask, name, whole = asks[case]
    text = pinned_source(name)
    return [{"role": "user", "content": ask + WHOLE.format(text) if whole else f"{ask}\n\n```python\n{text}```"}], {}


MORE_CASES = ("docstrings", "rename2", "prints", "explain", "patch2", "types", "rename3", "comments", "tests", "story")


def edit_body(model: str, n: int, draft: int | None, case: str = "synthetic") -> dict:
    messages, extra = edit_messages(case)
    body = {"model": model, "temperature": 0, "max_tokens": n, "messages": messages, **extra}
    if draft is not None:
        body["ngram_draft"] = draft
    return body


# Two tokens this close in log-probability may swap places between batch sizes (see parting): over 256
# tokens of the 1.5B's prose here, the margin between the two best tokens moved by up to 0.45 (median
# 0.07) between a batch of 1 and batches of 4, 16 and 64.
TIE = 0.45
PROSE_2 = [{"role": "user", "content": "Explain how a compiler turns source code into machine code: parsing, "
                                        "intermediate forms, optimization passes, register allocation."}]


def step_costs(spec: ModelSpec, threads: int, wait: float = 180.0) -> str:
    """This machine's step costs as the server measured them (engine/drafting/draft_cost.py): it measures
    while idle and keeps them in the cache folder; waits for them up to `wait` seconds."""
    from localchat.engine.drafting import draft_cost
    from localchat.models.paths import step_costs_file

    key = draft_cost.machine_key(spec.file(), threads, spec.gpu_layers)
    deadline = time.monotonic() + wait
    while (cost := draft_cost.load(step_costs_file(), key)) is None and time.monotonic() < deadline:
        time.sleep(1)
    return cost.describe() if cost else "not measured yet (the stand-in CPU figures were used)"


def edit_bench(config: Path, spec: ModelSpec, n: int, draft_model: str | None = None, rounds: int = 3) -> None:
    """--edit: each case without drafts and with them (the default), the text compared; llama-server
    --spec-type ngram-mod on the same requests when LLAMA_SERVER is set; four streams at once."""
    import os

    threads = spec.threads or os.cpu_count() or 1
    four = [edit_body(spec.name, n, None, case) for case in ("module", "synthetic", "prose")] + \
        [{**edit_body(spec.name, n, None, "prose"), "messages": PROSE_2}]
    theirs: dict[str, dict] = {}
    if os.environ.get("LLAMA_SERVER"):
        their = LlamaServer(spec, "-c", "8192", "-np", "1", "--spec-type", "ngram-mod")
        try:
            for case in EDIT_CASES:
                http_stream(their.url, edit_body(spec.name, 8, None, case))
                theirs[case] = http_stream(their.url, edit_body(spec.name, n, None, case))
        finally:
            their.stop()

    ours: dict[str, tuple[dict, dict]] = {}
    partings: dict[str, str] = {}
    server = Server(config, "--model", spec.name, "-c", "8192", "-np", "4")
    try:
        costs = step_costs(spec, threads)
        for case in EDIT_CASES:
            http_stream(server.url, edit_body(spec.name, 8, 0, case))  # the prompt read once, cached for both runs
            tries = rounds if case == "prose" else 1  # prose's goal is a few per cent: the best of a few runs
            runs = [(http_stream(server.url, edit_body(spec.name, n, 0, case)),
                     _logged(server, http_stream(server.url, edit_body(spec.name, n, None, case))))
                    for _ in range(tries)]
            ours[case] = (max((r[0] for r in runs), key=lambda r: r["tps"]),
                          max((r[1] for r in runs), key=lambda r: r["tps"]))
            if ours[case][0]["text"] != ours[case][1]["text"]:
                partings[case] = parting(server.url, edit_body(spec.name, n, None, case))
        # the module case again with the file as the prediction (OpenAI's Predicted Outputs), as a client sends it
        predicted = _logged(server, http_stream(server.url, {**edit_body(spec.name, n, None, "module"),
                                                             "prediction": {"type": "content",
                                                                            "content": pinned_source("llama_cache.py")}}))
        http_stream(server.url, {**four[3], "max_tokens": 8, "ngram_draft": 0})
        alone = http_stream(server.url, {**four[3], "ngram_draft": 0})
        together_plain = _together(server.url, [{**b, "ngram_draft": 0} for b in four])
        together = _together(server.url, four)
    finally:
        server.stop()
    by_model = None
    if draft_model:  # the same with a draft model (docs/operations.md "Drafts from a smaller model")
        server = Server(config, "--model", spec.name, "--draft-model", draft_model)
        try:
            http_stream(server.url, edit_body(spec.name, 8, None, "module"))  # both models read the prompt once
            by_model = http_stream(server.url, edit_body(spec.name, n, None, "module"))
        finally:
            server.stop()
    print(f"model {spec.name}: {n} tokens a case, greedy; tok/s without drafts, with them (the default), and "
          f"llama-server --spec-type ngram-mod")
    print(f"this machine's step costs (k tokens: x one token's): {costs}")
    print(f"{'case':10s} {'no drafts':>9s} {'drafts':>7s} {'ratio':>6s} {'kept/drafted':>13s} {'same':>5s} "
          f"{'llama-server':>12s} {'ours/theirs':>11s}  goals")
    for case in EDIT_CASES:
        plain, drafted = ours[case]
        ratio = drafted["tps"] / plain["tps"] if plain["tps"] else 0.0
        same = plain["text"] == drafted["text"]
        their = theirs.get(case)
        versus = drafted["tps"] / their["tps"] if their and their["tps"] else None
        tie = partings.get(case, ("", None))[1]
        goals = [("identical", same)] if tie is None else [(f"identical up to a near-tie (< {TIE})", tie < TIE)]
        if case == "prose":
            goals.append(("drafts >= 0.97x none", ratio >= 0.97))
        else:
            if case != "synthetic":
                goals.append(("drafts >= 2.0x none", ratio >= 2.0))
            if versus is not None:
                goals.append(("drafts >= llama-server", versus >= 1.0))
        print(f"{case:10s} {plain['tps']:9.1f} {drafted['tps']:7.1f} {ratio:5.2f}x {drafted.get('drafts', '-'):>13s} "
              f"{'yes' if same else 'NO':>5s} {their['tps'] if their else float('nan'):12.1f} "
              f"{f'{versus:.2f}x' if versus is not None else '-':>11s}  "
              + ", ".join(f"{name} {'PASS' if ok else 'FAIL'}" for name, ok in goals))
    for case, (why, _) in partings.items():
        print(f"  {case}: {why}")
    plain, drafted = ours["module"]
    details = (predicted["usage"] or {}).get("completion_tokens_details") or {}
    goals = [("identical", predicted["text"] == plain["text"]), (">= 2.0x none", predicted["tps"] >= 2 * plain["tps"]),
             (">= drafts from the prompt", predicted["tps"] >= drafted["tps"])]
    print(f"module with the file as the prediction: {predicted['tps']:.1f} tok/s  "
          f"{predicted['tps'] / plain['tps'] if plain['tps'] else 0.0:.2f}x none, "
          f"{predicted['tps'] / drafted['tps'] if drafted['tps'] else 0.0:.2f}x drafts from the prompt; kept/drafted "
          f"{predicted['drafts']}; prediction accepted {details.get('accepted_prediction_tokens')}, rejected "
          f"{details.get('rejected_prediction_tokens')}  " + ", ".join(f"{g} {'PASS' if ok else 'FAIL'}" for g, ok in goals))
    total_plain = _total(together_plain)
    total = _total(together)
    print(f"four streams at once (module, synthetic, two prose): {total_plain:.1f} tok/s without drafts, {total:.1f} with "
          f"them: {total / total_plain:.2f}x (goal >= 1)  {'PASS' if total >= total_plain else 'FAIL'}")
    for name, a, b in zip(("module", "synthetic", "prose", "prose 2"), together_plain, together):
        slower = _per_token(b) / _per_token(a)
        print(f"  {name:10s} ms/token {1000 * _per_token(a):6.1f} without drafts, {1000 * _per_token(b):6.1f} with: "
              f"{slower:.2f}x (goal <= 1.5x)  {'PASS' if slower <= 1.5 else 'FAIL'}; {b['tokens']} tokens "
              f"({a['tokens']} without drafts)")
    print(f"  (prose 2 alone, without drafts: {1000 * _per_token(alone):.1f} ms/token; four streams share 2 cores)")
    if by_model is not None:
        plain = ours["module"][0]
        model_same = by_model["text"] == plain["text"]
        print(f"draft model {draft_model} (module): {by_model['tps']:6.1f} tok/s   "
              f"{by_model['tps'] / plain['tps'] if plain['tps'] else 0.0:.2f}x without drafts; identical text: "
              f"{'yes' if model_same else 'NO'}   {'PASS' if model_same else 'FAIL'}")


def edit_record(config: Path, spec: ModelSpec, n: int, path: Path) -> None:
    """The prompt's and the greedy answer's token ids of the module, patch and prose cases and of
    more_messages' ten, without drafts; for a tool call (patch, patch2), the prompt as a JSON string
    writes it, tokenized, too; for the module, the file as its prediction."""
    from localchat.engine.drafting.drafts import json_view

    out = {}
    server = Server(config, "--model", spec.name)
    try:
        def tokens(text: str, special: bool) -> list[int]:
            return httpx.post(server.url + "/tokenize", timeout=600, json={
                "model": spec.name, "content": text, "add_special": False, "parse_special": special}).json()["tokens"]

        @functools.lru_cache(maxsize=None)
        def piece(token: int) -> bytes:
            return httpx.post(server.url + "/detokenize", timeout=600, json={"model": spec.name, "tokens": [token]}).json()[
                "content"].encode()
        for case in ("module", "patch", "prose", *MORE_CASES):
            if case in EDIT_CASES:
                body = edit_body(spec.name, n, 0, case)
            else:
                messages, extra = more_messages(case)
                body = {"model": spec.name, "temperature": 0, "max_tokens": n, "messages": messages,
                        "ngram_draft": 0, **extra}
            answer = httpx.post(server.url + "/v1/chat/completions", timeout=3600, json={
                **body, "logprobs": True, "top_logprobs": 0, "return_tokens_as_token_ids": True}).json()
            ids = [int(t["token"].split(":")[1]) for t in answer["choices"][0]["logprobs"]["content"]]
            shaped = {k: body[k] for k in ("messages", "tools") if k in body}
            prompt = tokens(httpx.post(server.url + "/apply-template", timeout=600,
                                       json={"model": spec.name, **shaped}).json()["prompt"], True)
            out[case] = {"prompt": prompt, "output": ids}
            if case == "module":  # the file as a client's prediction (OpenAI's Predicted Outputs) would send it
                out[case]["prediction"] = tokens(pinned_source("llama_cache.py"), False)
            if "tools" in body:
                out[case]["view"] = json_view(prompt, piece, lambda b: tokens(b.decode(), False))
            print(f"{case}: {len(prompt)} prompt tokens, {len(ids)} written", flush=True)
    finally:
        server.stop()
    path.write_text(json.dumps({"model": spec.name, "tokens": n, **out}, separators=(",", ":")) + "\n")


def parting(url: str, body: dict) -> tuple[str, float | None]:
    """Where greedy text with drafts parts from the text without them, and how close the two best
    tokens were there: the same request twice more, with log-probabilities (not timed). A step that
    verifies a draft decodes several tokens in one batch, and llama.cpp's CPU kernels sum a batch of
    1, of 2-7 and of 8+ tokens in other orders (logits apart by up to ~0.5 here), so a near-tie can
    fall the other way."""
    def run(draft: int | None) -> list[dict]:
        extra = {"ngram_draft": draft} if draft is not None else {}
        answer = httpx.post(url + "/v1/chat/completions", timeout=3600, json={
            **body, **extra, "stream": False, "logprobs": True, "top_logprobs": 2}).json()
        return answer["choices"][0]["logprobs"]["content"] or []
    plain, drafted = run(0), run(None)
    at = next((i for i, (a, b) in enumerate(zip(plain, drafted)) if a["token"] != b["token"]), None)
    if at is None:
        return "parted where no log-probabilities are given (a tool call's arguments)", None
    top = plain[at]["top_logprobs"]
    margin = top[0]["logprob"] - top[1]["logprob"] if len(top) > 1 else float("inf")
    return (f"parted at token {at}: {plain[at]['token']!r} without drafts, {drafted[at]['token']!r} with them; "
            f"the two best tokens {margin:.3f} apart in log-probability there"), margin


def _together(url: str, bodies: list[dict]) -> list[dict]:
    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda body: http_stream(url, body), bodies))


def _total(runs: list[dict]) -> float:
    tokens = sum(r["tokens"] for r in runs)
    return (tokens - len(runs)) / (max(r["last"] for r in runs) - min(r["first"] for r in runs))


def _per_token(run: dict) -> float:
    return (run["last"] - run["first"]) / max(run["tokens"] - 1, 1)


def _logged(server: Server, run: dict) -> dict:
    """The run, with what the access log says of its drafts (drafts=KEPT/DRAFTED)."""
    import re

    time.sleep(0.2)
    lines = [line for line in server.output().splitlines() if "POST /v1/chat/completions" in line]
    found = re.search(r"drafts=(\d+/\d+)", lines[-1]) if lines else None
    return {**run, "drafts": found.group(1) if found else "0/0"}
