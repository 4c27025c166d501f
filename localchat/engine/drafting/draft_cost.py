"""What a decode step costs on this machine, and the draft lengths that pay for it.

A step that decodes k tokens does not cost k steps of one token: on a GPU a step of 64 costs about
one; on a 2-core CPU (measured: Qwen2.5-Coder 1.5B, 2 threads) 4 tokens cost 2.95 steps of one, 16
cost 7.3, 64 cost 17.5. So how long a draft should be depends on the machine, and is measured: once
per model file, machine and thread count (`probe`: after a 1k-token prompt, run by the scheduler a
decode at a time while it has nothing else to do; the figures are kept in a JSON file and read at
the next load). Until then
the CPU figures above stand in. A measurement taken while something else kept the cores busy is
wrong for good (seen here: a step of one token kept as 396 ms where it takes 25, and a step of two
as cheaper than one, so prose drafted at every chance). So the live steps check the figures kept
(`Check`): where a step of one token runs STALE times faster than they say, they are measured again
while idle (a load measures REMEASURE times at most).

The rule (`lengths`): every generating sequence writes its next token each step, and a sequence
with a draft (drafts.py) also writes each drafted token the model agrees with, the first `kept` of
them. With s_i the drafter's estimate that the first i drafted tokens are all kept, a draft of d
tokens keeps s_1 + s_2 + ... + s_d on average. The
drafts chosen for a step are those that give the most tokens per second of the whole step: the
tokens every sequence writes, over what the step costs — as llama.cpp runs it with one KV stream
per slot: a pass per ubatch of consecutive slots with as many tokens each (`split_cost`), so one
slot's draft beside others' single tokens costs a pass of its own (the prompt chunks count too). No sequence, one without a draft included, may wait longer per token than LATE
times what it would without drafts: one slot's long draft does not stall the others (a sequence's
own draft counts towards its time only where its first token is kept SURE-ly, as a copy's is). A draft is
made only when it beats no draft by MARGIN, so text where drafts do not pay (free prose) pays for
almost nothing."""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import platform
import time
from collections.abc import Iterator
from pathlib import Path

import llama_cpp as C

from ..llama.batch import Batch

_log = logging.getLogger("localchat.engine")

KS = (1, 2, 4, 8, 16, 32, 64)  # the step sizes measured: a draft of k - 1 tokens is a step of k
# measured on a 2-core AMD EPYC (AVX-512), Qwen2.5-Coder 1.5B Q4_K_M, 2 threads, after a 1k-token prompt
CPU = {1: 1.0, 2: 1.83, 4: 2.95, 8: 6.2, 16: 7.3, 32: 11.5, 64: 17.5}
LATE = 1.5  # no sequence's time per token may grow past this many times its time without drafts
MARGIN = 1.03  # drafts must promise this many times the tokens per second of none
SURE = 0.9  # a draft whose first token is kept this surely is a copy: its gain counts against LATE
ROUNDS = 3  # each step size is timed this many times (the fastest counts)
KEPT = 64  # models' figures kept in the file
STALE = 3.0  # the live steps of one token this many times faster than the measured one: measured under load
CHECKED = 64  # live steps of one token a check takes (the median counts)
REMEASURE = 3  # measurements a load takes at most (the first included): a machine always busy keeps the last
PROBE_PROMPT = 1024  # tokens in the probe's context before the timed steps (attention over them costs too)
FLOOR = 0.8  # no step of k tokens can cost less than this much of a step of one: a measurement that says so was disturbed


class StepCost:
    """The cost of a step of k rows against a step of one, from a few measured points (linear
    between them, and past the last one at the last segment's slope)."""

    def __init__(self, seconds: dict[int, float], measured: bool = False) -> None:
        self.points = sorted((int(k), float(s) / seconds[1]) for k, s in seconds.items())
        self.measured = measured
        self.one = float(seconds[1])  # seconds a step of one token took (the stand-in's: 1.0)

    def __call__(self, k: int) -> float:
        pts = self.points
        if k <= pts[0][0]:
            return pts[0][1] * k / pts[0][0]
        for (k0, c0), (k1, c1) in zip(pts, pts[1:]):
            if k <= k1:
                return c0 + (c1 - c0) * (k - k0) / (k1 - k0)
        (k0, c0), (k1, c1) = pts[-2], pts[-1]
        return c1 + (c1 - c0) * (k - k1) / (k1 - k0)

    def describe(self) -> str:
        return ", ".join(f"{k}: {c:.2f}" for k, c in self.points)


DEFAULT = StepCost(CPU)


class StaleCheck:
    """The live steps of one token against the measured figures: `add` each one's seconds; it says
    True once the median of CHECKED of them is STALE times under the measured step of one (the
    measurement was taken under load). Slower live steps are no sign (a long context costs more).
    Once a check finds the figures fit, it is `settled`: nothing more to time for that load."""

    def __init__(self) -> None:
        self._seconds: list[float] = []
        self.median = 0.0  # the last check's
        self.settled = False

    def add(self, cost: StepCost, seconds: float) -> bool:
        if self.settled or not cost.measured:
            return False
        self._seconds.append(seconds)
        if len(self._seconds) < CHECKED:
            return False
        self.median = sorted(self._seconds)[len(self._seconds) // 2]
        self._seconds = []
        self.settled = cost.one <= STALE * self.median
        return not self.settled


def plausible(seconds: dict[int, float]) -> bool:
    """Whether a measurement can be true: more tokens in a step never cost much less than one. On
    two cores beside another program's decode, a first load measured a step of one token at 2.69 s
    and one of 16 at 1.66 s (the two crushed each other): such figures are measured again."""
    return 1 in seconds and all(t >= FLOOR * seconds[1] for t in seconds.values())


def geometric(p: float, n: int) -> list[float]:
    """A survival curve: each drafted token kept with p once the one before it is."""
    return [p ** (i + 1) for i in range(n)]


def split_cost(cost: StepCost, rows: dict[int, int]) -> float:
    """What a step costs as llama.cpp decodes it with one KV stream per slot: `rows` (slot -> tokens)
    in ubatches of consecutive slots with as many tokens each (llama_batch_allocr::split_equal), each
    ubatch a pass over the weights. Slots 0-3 with 1 token each and slot 0 with 2 more: 4 rows, then 2."""
    left = {slot: n for slot, n in sorted(rows.items()) if n > 0}
    total = 0.0
    while left:
        run: list[int] = []
        for slot in left:
            if run and slot != run[-1] + 1:
                break
            run.append(slot)
        n = min(left[slot] for slot in run)
        total += cost(n * len(run))
        for slot in run:
            left[slot] -= n
            if not left[slot]:
                del left[slot]
    return total


def lengths(cost: StepCost, drafts: list[tuple[int, list[float]]], rows: dict[int, int], writers: int) -> list[int]:
    """How many tokens each drafting sequence drafts this step. `drafts` holds, for each, its slot and
    the chances that its first 1, 2, … drafted tokens are all kept (as long as the draft it could
    make: drafts.py's `survival`); `rows` is the step's rows without these drafts, by slot (every
    sequence's next token, the prompt chunks); `writers` how many sequences write a token this step.
    The lengths that give the most tokens per second (module docstring)."""
    choices = [sorted({k - 1 for k in KS if 1 < k <= len(s) + 1} | {len(s)}) if s else [] for _, s in drafts]
    gain = [[0.0, *itertools.accumulate(s)] for _, s in drafts]  # kept on average from a draft of d
    base = split_cost(cost, rows)
    sure = [bool(s) and s[0] >= SURE for _, s in drafts]
    waiting = writers > len(drafts) or sum(rows.values()) > writers  # others: sequences, prompt chunks

    def rate(ds: list[int]) -> float:
        step = split_cost(cost, {slot: rows[slot] + d for (slot, _), d in zip(drafts, ds)} | {
            slot: n for slot, n in rows.items() if slot not in {s for s, _ in drafts}})
        gains = [g[d] for g, d in zip(gain, ds)]
        # the slowest writer may wait at most LATE times longer per token: a sequence without a draft, a
        # prompt chunk, a sequence whose draft is a guess (its gain not counted: prose drafts are often wrong)
        if writers > 1 or waiting:  # (alone, a sequence waits only for its own draft: the rate is its own)
            slowest = 0.0 if waiting else min(x if ok else 0.0 for x, ok in zip(gains, sure))
            if step > LATE * base * (1.0 + slowest):
                return -1.0
        return (writers + sum(gains)) / step

    # every drafter the same length first (a lone draft may break LATE where all drafting together does not),
    # then one drafter's length at a time, while the rate grows
    plain = rate([0] * len(drafts))
    best, chosen = plain, [0] * len(drafts)
    for d in sorted({d for options in choices for d in options}):
        trial = [min(d, len(s)) for _, s in drafts]
        if (value := rate(trial)) > best:
            best, chosen = value, trial
    while True:
        move = None
        for i, options in enumerate(choices):
            for d in options:
                if d != chosen[i]:
                    trial = chosen[:i] + [d] + chosen[i + 1:]
                    if (value := rate(trial)) > best:
                        best, move = value, trial
        if move is None:
            break
        chosen = move
    return chosen if best >= MARGIN * plain else [0] * len(drafts)


# -- the measurement --------------------------------------------------------------------------

def machine_key(model_path: Path, n_threads: int, n_gpu_layers: int) -> str:
    """What the figures depend on: the model (its size and the hash of its first and last MiB: a
    copy elsewhere is the same model), the machine, the threads, the offload, llama.cpp."""
    size = model_path.stat().st_size
    digest = hashlib.sha256()
    with model_path.open("rb") as f:
        digest.update(f.read(1 << 20))
        f.seek(max(size - (1 << 20), 0))
        digest.update(f.read(1 << 20))
    return (f"{model_path.name}|{size}|{digest.hexdigest()[:16]}|threads={n_threads}|gpu_layers={n_gpu_layers}"
            f"|{_cpu_name()}|llama_cpp={getattr(C, '__version__', '?')}|after={PROBE_PROMPT}")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load(path: Path | None, key: str) -> StepCost | None:
    if path is None:
        return None
    try:
        seconds = json.loads(path.read_text()).get(key)
        return StepCost({int(k): float(v) for k, v in seconds.items()}, measured=True) if seconds else None
    except (OSError, ValueError, AttributeError, TypeError, KeyError):
        return None


def save(path: Path | None, key: str, seconds: dict[int, float]) -> None:
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            known = json.loads(path.read_text())
            known = known if isinstance(known, dict) else {}
        except (OSError, ValueError):
            known = {}
        known.pop(key, None)
        known[key] = {str(k): v for k, v in seconds.items()}
        known = dict(list(known.items())[-KEPT:])  # the latest models measured
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError as exc:  # a read-only cache folder: measured again at the next load
        _log.warning("could not keep the step costs in %s: %s", path, exc)


def probe(model_ptr, n_threads: int, n_vocab: int) -> Iterator[None]:
    """Time one decode of k tokens of one sequence after a short prompt, for each k in KS, the
    fastest of ROUNDS: a generator that yields after every decode (the scheduler runs one step of
    it at a time while idle) and returns {k: seconds}. A small context of its own: no slot is touched."""
    cp = C.llama_context_default_params()
    cp.n_ctx = PROBE_PROMPT + max(KS) + 64
    cp.n_batch = cp.n_ubatch = max(KS)
    cp.n_seq_max = 1
    cp.n_threads = cp.n_threads_batch = n_threads
    ctx = C.llama_init_from_model(model_ptr, cp)
    if not ctx:
        return {}
    batch = Batch(max(KS))
    try:
        mem = C.llama_get_memory(ctx)
        tokens = [(i * 7919) % max(n_vocab - 200, 1) + 100 for i in range(PROBE_PROMPT + max(KS))]

        def fill(at: int, k: int) -> int:
            for i in range(k):
                batch.set(i, tokens[at + i], at + i, 0, True)
            return k

        for at in range(0, PROBE_PROMPT, max(KS)):
            if batch.decode(ctx, fill(at, min(max(KS), PROBE_PROMPT - at))) != 0:
                return {}
            yield
        best: dict[int, float] = {}
        for _ in range(ROUNDS):
            for k in KS:
                fill(PROBE_PROMPT, k)
                start = time.perf_counter()
                rc = batch.decode(ctx, k)
                took = time.perf_counter() - start
                C.llama_memory_seq_rm(mem, 0, PROBE_PROMPT, -1)
                if rc != 0:
                    return {}
                best[k] = min(best.get(k, took), took)
                yield
        return best
    finally:
        batch.close()
        C.llama_free(ctx)
