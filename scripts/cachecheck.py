"""localchat cachecheck: the prompt cache never changes an answer — random request sequences
through every cache path, each answer compared with a cold read of the same request.

    scripts/cachecheck [--model NAME] [--seed S] [--sequences N] [--first I] [--parallel P]
                       [--tokens T] [--only I] [--tolerance X] [--corpus-at REV] [--verbose]

Two servers of the same model, slot count and batch size: the one under test, with its prompt
cache and prompt store as users run it, and a reference whose every request is read cold
(`cache_prompt: false`, no prompt store: the slot's cells are emptied first, so each read is that
of a fresh context). Each of N sequences (seeded: sequence I of seed S is the same whatever ran
before it) sends 3-7 greedy chat requests (temperature 0, `ignore_eos`, K tokens with their top
log-probabilities) made from agent-like prompts — paragraphs of the agents' recorded first
requests (tests/fixtures/agents) and of docs/, a file list, this repository's own source files,
tools as agents declare them — edited as agents and their users edit them: a new turn; the
reasoning of earlier answers stripped; a line of the system message changed in the middle; the
environment block moved after the task or back; the project folder renamed; a tool added;
another session's turn between two of this one's; n = 2; the request cancelled while its
prompt is read, then sent again; the server restarted (its prompt store kept); the model
unloaded; a LoRA adapter (models that have one); `cache_prompt: false`. A session grown past
--tokens loses its oldest turns (a client's compaction).

Every answer (each choice of n = 2) is compared token by token with the reference's (n = 2 read
cold with n = 2: llama.cpp computes two sequences' next tokens together with another attention
kernel than one sequence's): each token's probability and those of the top tokens both list
within the tolerance, up to the first token where they part, where the cold read's probabilities
of the two tokens must be within twice the tolerance (not its top two: with `ignore_eos` the end of
turn may top the list and is never chosen). The tolerance, TOLERANCE: a cached read decodes its prompt in other
batches than the cold read (the rest from the cached length on, not all from position 0). Read in
chunks of 64 tokens or more (engine/state/job.py's TILE_ROWS: the server never leaves a smaller last
chunk), the rest goes through the kernels the cold read used and gives the same sums (0.00003 over
200 sequences of the tiny model). A rest under 64 tokens (the same request again, a short turn)
goes through llama.cpp's small-batch flash attention kernel, whose sums are in F16, where the cold
read's last token went through its F32 tiles: those answers ("short rest") are held to
SHORT_TOLERANCE (measured on the 0.5B in llama.cpp alone, no cache: a last token read alone moves
the first tokens' probabilities by up to 0.017), and so are later answers of the session that read
the cells such a rest wrote ("after a short rest": on the 0.5B, 0.026 at an answer's second token,
seed 44 sequence 7, where its prompt's last cell had been read alone by a retry), and so are answers
that read cells an earlier answer wrote (a new turn whose assistant message starts with the token
the model wrote: that cell was decoded alone, as each generated token is; on the 0.5B, 0.017 at
the first token, seed 44 sequence 40 at b6e41d2; 0.0109 at the fourth, sequence 126 at 792adee).
The largest seen: 0.0587 at an answer's second token, seed 44 sequence 176 at a2e31ca (the same
request twice, then the next turn); llama-server's own cache gives 0.0587 on the same tokens
(`--cache-reuse 256`, each answer against its own cold read), so SHORT_TOLERANCE is 0.1: llama.cpp's,
not the cache's.
Such a request caches more tokens than any prompt sent before shares with it (each prompt's tokens
are kept: `/tokenize` with the request's messages, on the reference). Both servers draft nothing (`ngram_draft: 0`): how
long a draft is depends on what a step costs on each server, and a verified draft is a batch of
its own shape. And no penalty (`repeat_penalty` 1, `presence_penalty` and `frequency_penalty` 0):
greedy then takes the top of the log-probabilities compared (the 0.5B's default repeat_penalty of
1.05 made a short rest's 0.04 choose the second token: seed 44 sequence 159 at 0f30866).
A reused block that was *moved* (a renamed folder, a moved block: the cells after the span kept at their new
positions) saw the old span, as llama-server's `--cache-reuse` cells do: those answers, and later
ones reusing those cells ("after a move"), are an approximation by design, held to
MOVED_TOLERANCE and printed apart. It has no bound: seed 44 sequence 672 on the 0.5B (an
environment block moved from after the task to before it, 256 cells moved past it) moved an
answer's second token by 0.34 from the cold read, and llama.cpp's own move of the same cells
moved it as far. So a "moved" answer has a second reference, llama.cpp's own move of the same
cells (Mover: in this process, with llama.cpp's memory ops and none of localchat's; the server's
log line says which cells went where), held to SHORT_TOLERANCE (the spans and the rest are read in
other batches): that checks the move itself (which cells, where to, their RoPE turned; the server
edits saved state for it, engine/kv_state.py). Where the answer is beyond MOVED_TOLERANCE from the
cold read and llama.cpp's own move is too, that is the approximation's, not the server's: printed
with the step and counted in the path's line, not a mismatch; which blocks move at all
(matching.py) is judged on that count (seed 44 sequence 2, a replaced line of the system message,
was one: its moved answers were 0.46-0.53 off). The server's log says which path served a request. Every
request asks for moved blocks at any prompt long enough to hold one (`cache_reuse` = SHIFT_MIN, 256
tokens): at the default, 1024, the 0.5B's sessions under `--tokens 1000` never moved a cell (26
sequences, 24 renames and moves: none took the path).

Prints each mismatch with the sequence that led to it (every step: the operation, the prompt's
tokens, the cached tokens, the path), one line per path (answers, largest difference, partings
at a near-tie), and `cachecheck: PASS` or `cachecheck: FAIL`; exit 0 on PASS. `--only I` runs
sequence I alone on fresh servers (a mismatch seen in a long run may need the sequences before
it: then run `--sequences I+1` again). With no --model it uses a tiny synthetic model written
for the run (localchat/devtools/tinymodels.py, with a LoRA adapter): what CI runs (tests/test_cachecheck.py).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
from localchat.devtools import isolate_home  # noqa: E402
from localchat.engine.state.job import TILE_ROWS  # noqa: E402
from localchat.engine.cache.matching import SHIFT_MIN, common_prefix  # noqa: E402
from localchat.models import shipped_config  # noqa: E402
from localchat.serve_process import Server  # noqa: E402  (the tests' server launcher)

isolate_home()  # (the servers it starts keep away from the user's registry and prompt store)

TOLERANCE = 0.01  # |Δ probability| allowed where the cells are the cold read's, read in other batches
MOVED_TOLERANCE = 0.25  # where moved cells saw another span: an approximation by design (see above)
SHORT_TOLERANCE = 0.1  # where fewer than TILE_ROWS tokens were read: llama.cpp's F16 attention kernel (see above)
K = 6  # tokens per answer
TOP = 4  # top log-probabilities compared
OPS = {"turn": 10, "strip": 4, "system": 4, "move": 3, "rename": 4, "tool": 3, "other": 6, "n2": 3,
       "cancel": 4, "restart": 1, "unload": 1, "lora": 2, "nocache": 2, "again": 3}
MOVED = re.compile(r"prompt cache: (\d+) cached tokens moved past \d+ new span\(s\) after (\d+) \(([^)]*)\)")
STRETCH = re.compile(r"cells (\d+)-(\d+) to (\d+)-(\d+)")
RESTORED = re.compile(r"prompt cache: (\d+) tokens restored")


# -- what the prompts are made of --------------------------------------------------------------

class Corpus:
    """Real text: the paragraphs of the agents' recorded first requests (tests/fixtures/agents:
    their instructions, tool descriptions, reminders) and of the docs, and this repository's
    source files, cut at their top-level definitions."""

    def __init__(self, root: Path = ROOT) -> None:
        texts = [doc.read_text() for doc in sorted((root / "docs").glob("*.md"))]
        for fixture in sorted((root / "tests" / "fixtures" / "agents").glob("*.json")):
            texts += _strings(json.loads(fixture.read_text())["requests"][0]["body"])
        self.prose = list(dict.fromkeys(p.strip() for text in texts for p in text.split("\n\n")
                                        if 80 < len(p.strip()) < 600 and "|" not in p))
        self.code = []
        for path in sorted((root / "localchat").rglob("*.py")):
            for chunk in re.split(r"\n(?=(?:def|class|async def) )", path.read_text()):
                if 200 < len(chunk) < 1500:
                    self.code.append((str(path.relative_to(root)), chunk))
        self.files = sorted({f for f, _ in self.code})


def _strings(data: object) -> list[str]:
    """Every string in a JSON value."""
    if isinstance(data, str):
        return [data]
    if isinstance(data, dict):
        data = list(data.values())
    return [s for item in data for s in _strings(item)] if isinstance(data, list) else []


TOOL_NAMES = ["Read", "Edit", "Write", "Bash", "Grep", "Glob", "WebFetch", "TodoWrite", "apply_patch", "list_dir"]


def tool(name: str, rng: random.Random) -> dict:
    props = rng.sample(["path", "pattern", "command", "content", "limit", "offset", "url"], 2)
    return {"type": "function", "function": {
        "name": name, "description": f"{name}: reads, edits or runs things in the workspace.",
        "parameters": {"type": "object", "properties": {p: {"type": "integer" if p in ("limit", "offset") else "string"}
                                                        for p in props}, "required": props[:1]}}}


@dataclass
class Session:
    """One agent's conversation: what its next request holds."""
    name: str
    folder: str
    date: str
    rules: list[str]
    files: list[str]
    task: str
    tools: list[dict]
    turns: list[dict] = field(default_factory=list)  # after the first user message
    env_first: bool = True

    def messages(self) -> list[dict]:
        env = "<env>\nWorking directory: " + self.folder + "\nFiles:\n" + "\n".join(
            f"  {self.folder}/{f}" for f in self.files) + "\n</env>"
        first = f"{env}\n\n{self.task}" if self.env_first else f"{self.task}\n\n{env}"
        system = f"You are a coding agent in {self.folder}. Today is {self.date}.\n\n" + "\n\n".join(self.rules)
        return [{"role": "system", "content": system}, {"role": "user", "content": first}, *self.turns]


class Sequences:
    """The random sequences: sequence i of seed s depends on nothing else."""

    def __init__(self, corpus: Corpus, seed: int, has_lora: bool, budget: int, chars: float) -> None:
        self.corpus, self.seed, self.has_lora = corpus, seed, has_lora
        self.budget, self.chars = budget, chars  # prompt tokens a session may reach; characters per token (about)

    def session(self, rng: random.Random, name: str) -> Session:
        c = self.corpus
        path, code = rng.choice(c.code)
        folder = f"/home/{rng.choice(['ana', 'bo', 'chen'])}/{rng.choice(['work', 'src', 'p'])}/proj-{rng.randrange(10**6)}"
        rules = rng.sample(c.prose, rng.randint(2, 5))
        task = f"In {path}, explain what this does and fix what is wrong:\n\n```python\n{code}\n```"
        s = Session(name, folder, f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}", rules,
                    rng.sample(c.files, rng.randint(3, 10)), task,
                    [tool(n, rng) for n in rng.sample(TOOL_NAMES, rng.randint(0, 3))])
        while self.size(s) > self.budget // 2 and len(s.rules) > 1:  # room for turns
            s.rules.pop()
        while self.size(s) > self.budget // 2 and len(s.files) > 1:
            s.files.pop()
        if self.size(s) > self.budget // 2:
            s.task = s.task[:len(s.task) // 2]
        return s

    def size(self, s: Session) -> int:
        text = sum(len(m["content"]) for m in s.messages()) + len(json.dumps(s.tools))
        return int(text / self.chars) + 20 * len(s.messages())

    def steps(self, i: int) -> list[dict]:
        """Sequence i: a list of steps, each {op, session, body fields}."""
        rng = random.Random(f"{self.seed}:{i}")
        sessions = [self.session(rng, "A")]
        at = sessions[0]
        out = [self._step("new", at)]
        ops = [op for op in OPS if op != "lora" or self.has_lora]
        for _ in range(rng.randint(2, 6)):
            op = rng.choices(ops, [OPS[o] for o in ops])[0]
            extra: dict = {}
            if op == "other":  # another session's turn between two of this one's
                if len(sessions) < 3 and rng.random() < 0.6:
                    sessions.append(self.session(rng, "ABC"[len(sessions)]))
                at = rng.choice(sessions)
                self._turn(rng, at)
            elif op in ("turn", "n2", "cancel", "lora", "nocache", "restart", "unload"):
                self._turn(rng, at)
                extra = {"n2": {"n": 2}, "lora": {"lora": [{"id": 0, "scale": 1.0}]},
                         "nocache": {"cache_prompt": False}}.get(op, {})
            elif op == "strip":  # the client drops the reasoning of earlier answers
                for m in at.turns:
                    if m["role"] == "assistant":
                        m["content"] = re.sub(r"<think>.*?</think>\n\n", "", m["content"], flags=re.S)
                self._turn(rng, at)
            elif op == "system":  # a line in the middle of the system message changes
                at.rules[rng.randrange(len(at.rules))] = rng.choice(self.corpus.prose)
            elif op == "move":
                at.env_first = not at.env_first
            elif op == "rename":
                new = at.folder.rsplit("/", 1)[0] + f"/proj-{rng.randrange(10**6)}"
                at.folder = new
            elif op == "tool":
                at.tools.append(tool(rng.choice(TOOL_NAMES) + str(rng.randrange(100)), rng))
            # "again": the same request once more
            while self.size(at) > self.budget and len(at.turns) > 2:  # the oldest turns go (a client's compaction)
                del at.turns[:2]
            if self.size(at) > self.budget:  # still too long: a new session in its place
                at = self.session(rng, at.name)
                sessions = [s if s.name != at.name else at for s in sessions]
                op = "new"
            out.append(self._step(op, at, **extra))
        return out

    def _turn(self, rng: random.Random, s: Session) -> None:
        think = "<think>\n" + rng.choice(self.corpus.prose) + "\n</think>\n\n" if rng.random() < 0.5 else ""
        s.turns.append({"role": "assistant", "content": think + rng.choice(self.corpus.prose)})
        path, code = rng.choice(self.corpus.code)
        ask = rng.choice([f"Now look at {s.folder}/{path}:\n\n```python\n{code}\n```",
                          "Go on.", "Why? " + rng.choice(self.corpus.prose)])
        s.turns.append({"role": "user", "content": ask})

    @staticmethod
    def _step(op: str, s: Session, **extra) -> dict:
        body = {"messages": json.loads(json.dumps(s.messages())), **extra}
        if s.tools:
            body["tools"] = json.loads(json.dumps(s.tools))
        return {"op": op, "session": s.name, "body": body}


# -- the two servers ------------------------------------------------------------------------

class Mover:
    """llama.cpp's own move of the same cells, the reference of a "moved" answer: in this process,
    with llama.cpp's memory ops and none of localchat's (no saved state edited, no prefix cache):
    the cells a prompt sent before read cold, all but the common prefix and the stretches the server
    says it moved dropped (llama_memory_seq_rm), the stretches moved to their new positions
    (llama_memory_seq_add: llama.cpp turns their RoPE), each new span read in a second sequence over
    a copy of what comes before it (llama.cpp reads a sequence only at its last position + 1) and
    copied back, the rest read; then the answer's tokens fed one by one for their log-probabilities."""

    def __init__(self, path: Path) -> None:
        self.path, self.model = path, None

    def answer(self, cells: list[int], n: int, stretches: list[tuple[int, int, int]], tokens: list[int],
               chosen: list[int]) -> list[dict]:
        import llama_cpp as C
        import numpy as np

        from localchat.engine.llama.batch import Batch

        if self.model is None:
            C.llama_backend_init()
            self.model = C.llama_model_load_from_file(str(self.path).encode(), C.llama_model_default_params())
        vocab = C.llama_vocab_n_tokens(C.llama_model_get_vocab(self.model))
        params = C.llama_context_default_params()
        params.n_ctx, params.n_seq_max, params.kv_unified = len(tokens) + len(chosen) + 256, 2, True
        params.n_batch = params.n_ubatch = 512
        params.n_threads = params.n_threads_batch = 2
        ctx = C.llama_init_from_model(self.model, params)

        batch = Batch(512)

        def read(ids: list[int], at: int, seq: int = 0) -> np.ndarray:
            for s in range(0, len(ids), 512):
                chunk = ids[s:s + 512]
                for i, token in enumerate(chunk):
                    batch.set(i, token, at + s + i, seq, s + i == len(ids) - 1)
                if batch.decode(ctx, len(chunk)) != 0:
                    raise RuntimeError("llama.cpp would not decode the moved cells' reference")
            logits = np.ctypeslib.as_array(C.llama_get_logits_ith(ctx, -1), shape=(vocab,)).astype(np.float64)
            return logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())

        try:
            mem, far = C.llama_get_memory(ctx), 1 << 24
            read(cells[:max(at + length for at, length, _ in stretches)], 0)
            edges = [n] + [x for at, length, _ in stretches for x in (at, at + length)] + [-1]
            for start, end in zip(edges[::2], edges[1::2]):
                if end != start:
                    C.llama_memory_seq_rm(mem, 0, start, end)
            for at, length, _ in stretches:  # (out of the way first, as the server does)
                C.llama_memory_seq_add(mem, 0, at, at + length, far)
            t = n
            for at, length, new in stretches:
                C.llama_memory_seq_add(mem, 0, far + at, far + at + length, new - at - far)
                if new > t:
                    C.llama_memory_seq_cp(mem, 0, 1, 0, t)
                    read(tokens[t:new], t, seq=1)
                    C.llama_memory_seq_cp(mem, 1, 0, t, new)
                    C.llama_memory_seq_rm(mem, 1, -1, -1)
                t = new + length
            logprobs, out = read(tokens[t:], t), []
            for i, token in enumerate(chosen):
                top = np.argsort(-logprobs)[:TOP]
                out.append({"token": f"token_id:{token}", "logprob": float(logprobs[token]),
                            "top_logprobs": [{"token": f"token_id:{j}", "logprob": float(logprobs[j])} for j in top]})
                if i + 1 < len(chosen):
                    logprobs = read([token], len(tokens) + i)
            return out
        finally:
            batch.close()
            C.llama_free(ctx)


def moved_cells(log: str, tokens: list[int], sent: list[list[int]]) -> tuple[list[int], int, list[tuple[int, int, int]]] | str:
    """What the server says it moved (prefix_cache.py's line: the common prefix n, each stretch's cells
    and where they went), and the cells it moved them from: the latest sequence sent before (a prompt
    and the answer's tokens) that holds the prompt's first n tokens and, at each stretch's old
    positions, the prompt's tokens at the new ones. A string saying what is wrong where none does (a
    move that put cells where the prompt holds other tokens)."""
    said = MOVED.search(log)
    n = int(said.group(2))
    stretches = [(int(a), int(b) - int(a) + 1, int(c)) for a, b, c, _ in STRETCH.findall(said.group(3))]
    for cells in reversed(sent):
        if (cells[:n] == tokens[:n] and all(len(cells) >= at + length for at, length, _ in stretches)
                and all(cells[at:at + length] == tokens[new:new + length] for at, length, new in stretches)):
            return cells, n, stretches
    return f"no sequence sent before holds the moved cells' tokens where the prompt has them ({said.group(3)})"


class Servers:
    def __init__(self, model: str, parallel: int, work: Path, tiny: bool) -> None:
        self.model, self.work = model, work
        self.store = work / "prompts"
        self.config = work / "models.toml"
        self.ref_config = work / "reference.toml"
        settings = f"parallel = {parallel}\nkeep_alive = -1\nmax_loaded_models = 1\n"
        registry = tiny_registry(work) if tiny else shipped_config().read_text()
        self.config.write_text(settings + registry)
        self.ref_config.write_text(settings + "prompt_cache_bytes = 0\n" + registry)
        self.cold: dict[str, tuple[dict, float]] = {}
        from localchat.models import Registry
        self.mover = Mover(work / "tiny.gguf" if tiny else Registry.load(shipped_config()).resolve(model).file())
        self.test = self._start(self.config)
        self.ref = self._start(self.ref_config)

    def _start(self, config: Path) -> Server:
        import os
        os.environ["LOCALCHAT_PROMPT_CACHE_DIR"] = str(self.store)
        return Server(config, "--model", self.model)

    def restart(self) -> None:
        self.test.stop()
        self.test = self._start(self.config)

    def unload(self) -> None:
        r = httpx.post(self.test.url + "/api/generate", json={"model": self.model, "keep_alive": 0}, timeout=120)
        r.raise_for_status()

    def ask(self, body: dict) -> tuple[dict, str]:
        """The server under test's answer, and what it logged meanwhile."""
        mark = len(self.test.output())
        answer = post(self.test.url, body)
        return answer, self.test.output()[mark:]

    def cancel(self, body: dict, delay: float) -> None:
        """Send the request as a stream and hang up after `delay` seconds (while its prompt is read)."""
        try:
            with httpx.stream("POST", self.test.url + "/v1/chat/completions", json={**full(body), "stream": True},
                              timeout=120) as r:
                deadline = time.monotonic() + delay
                for _ in r.iter_bytes():
                    if time.monotonic() >= deadline:
                        break
        except httpx.HTTPError:
            pass

    def reference(self, body: dict) -> tuple[dict, float]:
        """The cold read's answer, and the seconds it took. With n = 2 too: the two choices then
        decode together, as the server under test decodes them (llama.cpp computes one sequence's
        next token with another attention kernel than two sequences' together)."""
        body = {**body, "cache_prompt": False}
        key = json.dumps(body, sort_keys=True)
        if key not in self.cold:
            began = time.monotonic()
            answer = post(self.ref.url, body)
            self.cold[key] = answer, time.monotonic() - began
        return self.cold[key]

    def prompt_ids(self, body: dict) -> list[int]:
        """The request's prompt as the server reads it: its tokens (`/tokenize` with the messages)."""
        r = httpx.post(self.ref.url + "/tokenize", json={k: body[k] for k in ("messages", "tools") if k in body},
                       timeout=120)
        r.raise_for_status()
        return r.json()["tokens"]

    def stop(self) -> None:
        self.test.stop()
        self.ref.stop()


def corpus_at(rev: str, work: Path) -> Path:
    """The files the corpus is made of, as they were at commit `rev` (git archive into `work`)."""
    import subprocess
    root = work / "corpus"
    root.mkdir()
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "docs", "localchat", "tests/fixtures/agents"],
                         capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=tar, check=True)
    return root


def tiny_registry(work: Path) -> str:
    from localchat.families import FAMILIES
    from localchat.devtools.tinymodels import write_tiny_lora, write_tiny_model

    model = write_tiny_model(work / "tiny.gguf", FAMILIES["chatml"], n_ctx=8192)
    lora = write_tiny_lora(work / "lora.gguf", seed=1)
    return (f'default = "tiny"\n[models.tiny]\npath = "{model}"\ncontext_length = 8192\n'
            f'loras = [{{name = "one", path = "{lora}", scale = 0}}]\n')


def full(body: dict) -> dict:
    return {"model": None, "temperature": 0, "max_tokens": K, "ignore_eos": True, "logprobs": True,
            "return_tokens_as_token_ids": True, "ngram_draft": 0,  # (see above)
            # greedy on the log-probabilities compared: no penalty moves the choice off their top
            # (the 0.5B's repeat_penalty 1.05 did: seed 44 sequence 159 chose its second token)
            "repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
            "cache_reuse": SHIFT_MIN,  # (see above)
            "top_logprobs": TOP, **body}


def post(url: str, body: dict) -> dict:
    r = httpx.post(url + "/v1/chat/completions", json={k: v for k, v in full(body).items() if v is not None},
                   timeout=600)
    if r.status_code != 200:
        raise RuntimeError(f"HTTP {r.status_code}: {r.text[:500]}")
    return r.json()


# -- the comparison ---------------------------------------------------------------------------

def compare(got: list[dict], cold: list[dict], tolerance: float) -> tuple[float, float, bool, str | None]:
    """(the largest |Δ probability|, the largest |Δ log-probability| seen, whether they parted at a
    near-tie, what is wrong or None). The probabilities of the top tokens both list (and of the token
    both chose) must be within `tolerance`; where the tokens part, the cold read's probabilities of the two
    tokens must be within twice that (each may have moved by it). Not its top two: with ignore_eos
    the end of turn may top both lists and is never chosen (seed 44 sequence 27 at 7b3fcc0: the end
    at 0.99, the two tokens chosen below it at 0.001 each)."""
    worst_p = worst_log = 0.0
    if len(got) != len(cold):
        return worst_p, worst_log, False, f"{len(got)} tokens against the cold read's {len(cold)}"
    for i, (x, y) in enumerate(zip(got, cold)):
        theirs = {_id(t): t["logprob"] for t in y["top_logprobs"]}
        pairs = [(t["logprob"], theirs[_id(t)]) for t in x["top_logprobs"] if _id(t) in theirs]
        if _id(x) == _id(y):  # (where they part, the two chosen tokens' probabilities are not one token's)
            pairs.append((x["logprob"], y["logprob"]))
        for a, b in pairs:
            worst_p = max(worst_p, abs(math.exp(a) - math.exp(b)))
            worst_log = max(worst_log, abs(a - b))
        if worst_p > tolerance:
            return worst_p, worst_log, False, f"token {i}: probabilities differ by {worst_p:.4f} (> {tolerance})"
        if _id(x) != _id(y):  # the cold read's probability of its token, and of this answer's (at most its list's least)
            mine = theirs.get(_id(x), min(t["logprob"] for t in y["top_logprobs"]))
            margin = math.exp(y["logprob"]) - math.exp(mine)
            if margin > 2 * tolerance:
                return worst_p, worst_log, False, (f"token {i}: {x['token']!r} where the cold read has "
                                                   f"{y['token']!r} (its probabilities of the two {margin:.4f} apart)")
            return worst_p, worst_log, True, None
    return worst_p, worst_log, False, None


def _id(entry: dict) -> str:
    """A token's id (`token_id:N`: return_tokens_as_token_ids; bytes that are not UTF-8 all print as
    "\ufffd", control tokens as "")."""
    return entry["token"]


@dataclass
class Tally:
    requests: int = 0
    worst: float = 0.0  # |Δ probability|
    worst_log: float = 0.0  # |Δ log-probability|
    ties: int = 0
    own: float = 0.0  # |Δ probability| from llama.cpp's own move of the same cells ("moved")
    approximate: int = 0  # answers beyond the tolerance from the cold read as llama.cpp's own move is ("moved")


def path_of(step: dict, prompt: int, cached: int, log: str, tainted: bool) -> str:
    """Which cache path served the request (the server says where cells moved: prefix_cache.py's line)."""
    if "cache_prompt" in step["body"]:
        return "no cache"
    if MOVED.search(log):
        return "moved"
    if step["op"] == "lora":
        return "lora"
    if not cached:
        return "cold"
    if tainted:  # an earlier request of this session moved cells, which saw another span: they may serve this one
        return "after a move"
    if prompt - cached < TILE_ROWS:
        return "short rest"
    if RESTORED.search(log):
        return "restored"
    return "n=2 shared" if step["body"].get("n") == 2 else "prefix"


def describe(steps: list[dict], notes: list[str]) -> str:
    lines = []
    for k, (step, note) in enumerate(zip(steps, notes)):
        body = step["body"]
        extra = {x: body[x] for x in ("n", "lora", "cache_prompt") if x in body}
        lines.append(f"    {k}. {step['op']:<8} session {step['session']} {len(body['messages'])} messages "
                     f"{len(body.get('tools', []))} tools {json.dumps(extra) if extra else ''} {note}")
    return "\n".join(lines)


class Check:
    """Runs sequences against the two servers and keeps the tallies."""

    def __init__(self, servers: Servers, tolerance: float) -> None:
        self.servers, self.tolerance = servers, tolerance
        self.tallies: dict[str, Tally] = defaultdict(Tally)
        self.ops: Counter = Counter()
        self.prompts: list[list[int]] = []  # every prompt sent so far, as tokens (the cells past them: answers')
        self.sent: list[list[int]] = []  # and each with an answer's tokens after it (the cells a move may take)

    def limit(self, path: str) -> float:
        if path in ("short rest", "after a short rest"):
            return max(SHORT_TOLERANCE, self.tolerance)
        return MOVED_TOLERANCE if path in ("moved", "after a move") else self.tolerance

    def sequence(self, steps: list[dict], rng: random.Random) -> tuple[list[str], list[str]]:
        """Each step's note, and what was wrong."""
        servers, notes, bad, tainted = self.servers, [], [], set()
        short: dict[str, int] = {}  # per session: the first position of cells a short rest read (and later ones kept)
        for step in steps:
            op, body, session = step["op"], step["body"], step["session"]
            self.ops[op] += 1
            if op == "new":
                tainted.discard(session)
                short.pop(session, None)
            began = time.monotonic()
            cold, seconds = servers.reference({k: v for k, v in body.items() if k != "cache_prompt"})
            if op == "restart":
                servers.restart()
            elif op == "unload":
                servers.unload()
            elif op == "cancel":  # hung up at a random moment of what a cold read takes
                servers.cancel(body, rng.uniform(0, seconds))
            answer, log = servers.ask(body)
            usage = answer["usage"]
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
            ids = servers.prompt_ids(body)
            if len(ids) != usage["prompt_tokens"]:
                raise RuntimeError(f"the prompt rendered apart has {len(ids)} tokens, the request {usage['prompt_tokens']}")
            written = max((common_prefix(ids, p) for p in self.prompts), default=0)  # the most a prompt sent before holds
            self.prompts.append(ids)
            path = path_of(step, usage["prompt_tokens"], cached, log, session in tainted)
            if path == "moved":  # (until the session is replaced: its moved cells may stay in another slot, or on disk)
                tainted.add(session)
            if session in short and cached <= short[session]:
                del short[session]  # those cells were read again
            if path in ("prefix", "restored", "n=2 shared") and cached > written:
                short.setdefault(session, written)  # it reads cells an answer wrote, one token a step
            if path in ("prefix", "restored", "n=2 shared") and session in short:
                path = "after a short rest"  # it reads cells a short rest wrote (the F16 kernel's), kept since
            if path == "short rest":
                short.setdefault(session, cached)
            tally, problems, remarks = self.tallies[path], [], []
            own = self.own_move(log, ids, answer, body) if path == "moved" else None
            if isinstance(own, str):
                problems.append(own)
            for choice, cold_choice in zip(answer["choices"], cold["choices"]):
                worst, worst_log, tie, problem = compare(choice["logprobs"]["content"],
                                                         cold_choice["logprobs"]["content"], self.limit(path))
                if own and choice["index"] == 0:  # (a move serves the lead slot's choice)
                    off, _, _, wrong = compare(choice["logprobs"]["content"], own, SHORT_TOLERANCE)
                    tally.own = max(tally.own, off)
                    if wrong:
                        problems.append(f"choice 0 against llama.cpp's own move of the same cells: {wrong}")
                    if problem and compare(own, cold_choice["logprobs"]["content"], self.limit(path))[3]:
                        tally.approximate += 1  # (llama.cpp's own move is as far from the cold read)
                        remarks.append(f"choice 0 {problem}, as llama.cpp's own move of the same cells is")
                        problem = None
                tally.requests += 1
                tally.worst = max(tally.worst, worst)
                tally.worst_log = max(tally.worst_log, worst_log)
                tally.ties += tie
                if problem:
                    problems.append(f"choice {choice['index']}: {problem}")
            self.sent += [ids + [int(t["token"].split(":")[1]) for t in choice["logprobs"]["content"]]
                          for choice in answer["choices"]]
            notes.append(f"prompt {usage['prompt_tokens']} cached {cached} → {path} ({time.monotonic() - began:.1f} s)"
                         + (f"  MISMATCH {'; '.join(problems)}" if problems else "")
                         + (f"  (from the cold read: {'; '.join(remarks)})" if remarks else ""))
            bad += problems
        return notes, bad

    def own_move(self, log: str, ids: list[int], answer: dict, body: dict) -> list[dict] | str | None:
        """llama.cpp's own move of the cells the server moved (Mover), for the answer's lead choice;
        None where it does not apply (a LoRA: the reference reads without one); what is wrong where
        no sequence sent before holds the moved tokens (moved_cells)."""
        if "lora" in body:
            return None
        found = moved_cells(log, ids, self.sent)
        if isinstance(found, str):
            return found
        chosen = [int(t["token"].split(":")[1]) for t in answer["choices"][0]["logprobs"]["content"]]
        return self.servers.mover.answer(*found, ids, chosen)

    def report(self) -> None:
        print("  operations: " + ", ".join(f"{op} {n}" for op, n in sorted(self.ops.items())))
        for path, t in sorted(self.tallies.items()):
            print(f"  {path:<12} {t.requests:5d} answers, largest |Δ probability| {t.worst:.5f} "
                  f"(tolerance {self.limit(path)}; |Δ log-probability| {t.worst_log:.4f}), "
                  f"parted at a near-tie {t.ties}"
                  + (f"; from llama.cpp's own move of the same cells {t.own:.5f} (tolerance {SHORT_TOLERANCE}), "
                     f"beyond {self.limit(path)} from the cold read as it is {t.approximate}" if path == "moved" else ""))


def run(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="localchat-cachecheck-"))
    tiny = args.model is None
    servers = Servers(args.model or "tiny", args.parallel, work, tiny)
    try:
        info = httpx.get(servers.test.url + "/lora-adapters", params={"model": servers.model}, timeout=60)
        has_lora = info.status_code == 200 and bool(info.json())
        n_ctx = httpx.get(servers.test.url + "/props", params={"model": servers.model}, timeout=60).json()
        n_ctx = n_ctx.get("default_generation_settings", {}).get("n_ctx") or 4096
        corpus = Corpus(corpus_at(args.corpus_at, work) if args.corpus_at else ROOT)
        sample = "\n\n".join(corpus.prose[:40] + [c for _, c in corpus.code[:40]])
        tokens = httpx.post(servers.test.url + "/tokenize", json={"model": servers.model, "content": sample},
                            timeout=60).json()["tokens"]
        gen = Sequences(corpus, args.seed, has_lora, budget=min(int(n_ctx * 0.75), args.tokens),
                        chars=0.85 * len(sample) / len(tokens))
        tolerance = args.tolerance if args.tolerance is not None else TOLERANCE
        check = Check(servers, tolerance)
        mismatches, started = 0, time.monotonic()
        indexes = [args.only] if args.only is not None else range(args.first, args.first + args.sequences)
        for i in indexes:
            steps = gen.steps(i)
            notes, bad = check.sequence(steps, random.Random(f"{args.seed}:{i}:run"))
            if bad or args.verbose:
                print(f"sequence {i} (--seed {args.seed} --only {i}):{' MISMATCH' if bad else ''}\n"
                      + describe(steps, notes), flush=True)
            mismatches += bool(bad)
            if (i + 1) % 10 == 0:
                print(f"  … {i + 1} sequences, {mismatches} with a mismatch, {time.monotonic() - started:.0f} s",
                      flush=True)
        print(f"cachecheck: model {servers.model}, parallel {args.parallel}, seed {args.seed}: "
              f"{len(indexes)} sequences, {sum(check.ops.values())} requests in {time.monotonic() - started:.0f} s")
        check.report()
        print(f"cachecheck: {'PASS' if not mismatches else 'FAIL'} ({mismatches} sequences with a mismatch)")
        return 0 if not mismatches else 1
    finally:
        servers.stop()
        shutil.rmtree(work, ignore_errors=True)  # (its prompt store: over a GB on the 0.5B)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a model of the shipped registry (default: a tiny synthetic model)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sequences", type=int, default=100)
    parser.add_argument("--parallel", type=int, default=2, help="slots of each server (default 2)")
    parser.add_argument("--first", type=int, default=0,
                        help="start at sequence I (a long run in parts: --first 500 --sequences 500 after 0-499)")
    parser.add_argument("--only", type=int, help="run sequence I alone, on fresh servers")
    parser.add_argument("--tokens", type=int, default=5000,
                        help="the longest prompt a session grows to (default 5000; at most 3/4 of a slot)")
    parser.add_argument("--tolerance", type=float, help=f"|Δ probability| allowed where the cells are the cold read's "
                        f"(default {TOLERANCE})")
    parser.add_argument("--corpus-at", metavar="REV",
                        help="make the prompts of docs/, localchat/ and the agents' fixtures as they were at commit REV "
                        "(default: as they are now; any change to them changes the sequences: pin a long run's "
                        "parts to one commit's text with this)")
    parser.add_argument("--verbose", action="store_true", help="print every sequence, not only those that fail")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the servers are stopped on the way out
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
