"""The prompt cache never changes an answer: scripts/cachecheck's random request sequences (new
turns, stripped reasoning, a changed system line, moved blocks, renamed folders, added tools,
interleaved sessions, n = 2, cancels and retries, restarts, unloads, a LoRA, cache_prompt: false)
on the tiny model, every answer against a cold read on a fresh context; and its comparison."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import cachecheck  # noqa: E402


def entry(token: int, logprob: float, top: list[tuple[int, float]]) -> dict:
    return {"token": f"token_id:{token}", "logprob": logprob,
            "top_logprobs": [{"token": f"token_id:{t}", "logprob": p} for t, p in top]}


@pytest.mark.fast
def test_answers_agree_within_the_tolerance_and_part_only_at_a_near_tie():
    """Probabilities within the tolerance; a parting only where the cold read's probabilities of the two
    tokens are within twice it."""
    cold = [entry(5, -0.1, [(5, -0.1), (6, -2.5)]), entry(7, -0.69, [(7, -0.69), (8, -0.70)])]
    same = [entry(5, -0.11, [(5, -0.11), (6, -2.49)]), entry(7, -0.69, [(7, -0.69), (8, -0.70)])]
    assert cachecheck.compare(same, cold, 0.02)[3] is None
    assert "differ by" in cachecheck.compare(same, cold, 0.005)[3]
    # parting where the cold read's top two are 0.01 apart: allowed, and the rest is not compared
    parted = [same[0], entry(8, -0.69, [(8, -0.69), (7, -0.70)])]
    worst, worst_log, tie, problem = cachecheck.compare(parted, cold, 0.02)
    assert problem is None and tie
    # parting where the cold read is sure: a mismatch
    wrong = [entry(6, -0.1, [(9, -2.5)]), *cold[1:]]
    assert "where the cold read has" in cachecheck.compare(wrong, cold, 0.3)[3]
    # with ignore_eos the end of turn tops both lists and is never chosen: the two tokens below it are a near-tie
    end, low = 151645, math.log(0.001)
    cold = [entry(1446, low, [(end, -0.01), (1446, low), (5209, low - 0.01)])]
    parted = [entry(5209, low, [(end, -0.01), (5209, low), (1446, low - 0.01)])]
    assert cachecheck.compare(parted, cold, 0.01)[2:] == (True, None)
    cold = [entry(5, -0.1, [(5, -0.1), (6, -2.5)]), entry(7, -0.69, [(7, -0.69), (8, -0.70)])]
    # a top log-probability of another token moved too far
    far = [entry(5, -0.1, [(5, -0.1), (6, -3.5)]), *cold[1:]]
    assert "differ by" in cachecheck.compare(far, cold, 0.03)[3]
    assert "tokens against" in cachecheck.compare(cold[:1], cold, 0.5)[3]


@pytest.mark.fast
def test_a_sequence_is_the_same_whatever_ran_before():
    gen = cachecheck.Sequences(cachecheck.Corpus(), 7, True, budget=3000, chars=1.0)
    first = [gen.steps(i) for i in range(5)]
    assert [gen.steps(i) for i in (4, 2, 0, 1, 3)] == [first[4], first[2], first[0], first[1], first[3]]
    ops = {step["op"] for steps in first for step in steps}
    assert len(ops) >= 4 and all(steps[0]["op"] == "new" for steps in first)


def test_two_hundred_random_sequences_answer_as_cold_reads():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "cachecheck.py"), "--sequences", "200",
                           "--seed", "44"], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    out = done.stdout
    assert done.returncode == 0 and "cachecheck: PASS" in out, out[-6000:] + done.stderr[-3000:]
    for path in ("prefix", "moved", "after a move", "restored", "n=2 shared", "lora", "no cache", "cold"):
        assert f"  {path} " in out, (path, out[-2000:])  # every path was taken


class Scripted:
    """Two servers' answers, scripted: each step's prompt (tokens), cached tokens, and the first
    token's log-probability under test and cold."""

    def __init__(self, steps: list[tuple[list[int], int, float, float]]) -> None:
        self.steps, self.at = steps, -1

    def reference(self, body: dict) -> tuple[dict, float]:
        self.at += 1
        return {"choices": [self._choice(self.steps[self.at][3])]}, 1.0

    def ask(self, body: dict) -> tuple[dict, str]:
        ids, cached, logprob, _ = self.steps[self.at]
        return {"choices": [self._choice(logprob)], "usage": {
            "prompt_tokens": len(ids), "prompt_tokens_details": {"cached_tokens": cached}}}, ""

    def prompt_ids(self, body: dict) -> list[int]:
        return self.steps[self.at][0]

    @staticmethod
    def _choice(logprob: float) -> dict:
        return {"index": 0, "logprobs": {"content": [entry(5, logprob, [(5, logprob), (6, -6.0)])]}}


@pytest.mark.fast
def test_a_prompt_that_reads_cells_an_answer_wrote_is_held_to_the_short_tolerance():
    """Seed 44 sequence 126 on the 0.5B: a session's third prompt (809 tokens) was longer than the
    fourth (719, after the client dropped its oldest turns); the fifth read 722 cells of the
    fourth's slot: 3 of them its answer's, decoded one token a step. Its first tokens moved by
    0.0109 (> TOLERANCE): the tester had compared the cached length with the session's longest
    prompt (809), not with the prompts the cells came from, and held it to TOLERANCE."""
    third = list(range(1000, 1809))
    fourth = [*range(1000, 1500), *range(3000, 3219)]  # the oldest turns gone
    fifth = [*fourth, 7, 8, 9, *range(4000, 4111)]  # its answer's first three tokens, then a new turn
    p, moved = math.log(0.05), math.log(0.05 - 0.0109)

    def run(cached: int) -> tuple[list[str], list[str]]:
        steps = [(third, 0, p, p), (fourth, 500, p, p), (fifth, cached, moved, p)]
        bodies = [{"op": "turn", "session": "C", "body": {"messages": []}} for _ in steps]
        return cachecheck.Check(Scripted(steps), cachecheck.TOLERANCE).sequence(bodies, None)

    notes, bad = run(722)  # past the fourth prompt: cells its answer wrote
    assert bad == [] and "→ after a short rest" in notes[2], notes
    notes, bad = run(719)  # the fourth prompt's cells alone: held to TOLERANCE
    assert "→ prefix" in notes[2] and "differ by 0.0109" in bad[0], notes
