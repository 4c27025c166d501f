"""The prompt cache never changes an answer: scripts/cachecheck's random request sequences (new
turns, stripped reasoning, a changed system line, moved blocks, renamed folders, added tools,
interleaved sessions, n = 2, cancels and retries, restarts, unloads, a LoRA, cache_prompt: false)
on the tiny model, every answer against a cold read on a fresh context; and its comparison."""

from __future__ import annotations

import math
import re
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


MOVED_LINE = ("prompt cache: 4 cached tokens moved past 1 new span(s) after 2 (cells 5-8 to 4-7); 3 to read")


@pytest.mark.fast
def test_the_moved_cells_are_found_in_a_sequence_sent_before_from_the_server_s_log_line():
    old = [1, 2, 90, 91, 92, 5, 6, 7, 8, 9]
    new = [1, 2, 70, 71, 5, 6, 7, 8, 30]
    assert cachecheck.moved_cells(MOVED_LINE, new, [old, [1, 2, 3]]) == (old, 2, [(5, 4, 4)])
    # cells that would land where the prompt holds other tokens: no sequence sent holds them
    wrong = cachecheck.moved_cells(MOVED_LINE, [1, 2, 70, 71, 5, 6, 0, 8, 30], [old])
    assert "no sequence sent before holds" in wrong and "cells 5-8 to 4-7" in wrong


class Moved(Scripted):
    """A "moved" step against a scripted llama.cpp move: the server's, the cold read's and llama.cpp's own
    move's probability of the first token."""

    def __init__(self, test: float, cold: float, own: float) -> None:
        old, new = [1, 2, 90, 91, 92, 5, 6, 7, 8, 9], [1, 2, 70, 71, 5, 6, 7, 8, 30]
        super().__init__([(old, 0, -0.1, -0.1), (new, 6, math.log(test), math.log(cold))])
        self.own, self.mover = math.log(own), self

    def ask(self, body: dict) -> tuple[dict, str]:
        answer, _ = super().ask(body)
        return answer, MOVED_LINE if self.at else ""

    def answer(self, cells: list[int], n: int, stretches: list, tokens: list[int], chosen: list[int]) -> list[dict]:
        assert (n, stretches, chosen) == (2, [(5, 4, 4)], [5])
        return [entry(5, self.own, [(5, self.own), (6, -6.0)])]


@pytest.mark.fast
@pytest.mark.parametrize("test, cold, own, outcome", [
    (0.50, 0.55, 0.52, "pass"),  # near both
    (0.20, 0.55, 0.21, "approximate"),  # 0.35 from the cold read, as llama.cpp's own move is (seed 44 sequence 672)
    (0.20, 0.50, 0.28, "cold"),  # 0.30 from the cold read where llama.cpp's own move is not: the server's
    (0.40, 0.45, 0.60, "own"),  # near the cold read, far from llama.cpp's own move of the same cells
])
def test_a_moved_answer_is_held_to_llama_cpp_s_own_move_and_to_the_cold_read_where_that_is_near(test, cold, own, outcome):
    steps = [{"op": op, "session": "A", "body": {"messages": []}} for op in ("new", "move")]
    check = cachecheck.Check(Moved(test, cold, own), cachecheck.TOLERANCE)
    notes, bad = check.sequence(steps, None)
    assert "→ moved" in notes[1], notes
    assert check.tallies["moved"].approximate == (outcome == "approximate")
    if outcome in ("pass", "approximate"):
        assert bad == [], bad
    else:
        assert len(bad) == 1 and ("llama.cpp's own move" in bad[0]) == (outcome == "own"), bad
    assert ("as llama.cpp's own move of the same cells is" in notes[1]) == (outcome == "approximate")


@pytest.mark.real
def test_a_block_moved_before_the_task_answers_as_llama_cpp_s_own_move_of_its_cells():
    """Seed 44 sequence 672 on the 0.5B, the mismatch its run found: an environment block moved from
    after the task to before it, 256 cells moved past it, and an answer's second token 0.34 from the
    cold read. llama.cpp's own move of the same cells is as far from it; the server's answer is within
    SHORT_TOLERANCE of that (0.023 here). The sequence is made of the repository's text at 00b80ab."""
    if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", "00b80ab^{commit}"]).returncode:
        pytest.skip("a clone without commit 00b80ab (the text sequence 672 is made of)")
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "cachecheck.py"), "--model", "qwen2.5-coder-0.5b",
                           "--seed", "44", "--only", "672", "--tokens", "1000", "--corpus-at", "00b80ab", "--verbose"],
                          cwd=ROOT, capture_output=True, text=True, timeout=1800)
    out = done.stdout
    assert done.returncode == 0 and "cachecheck: PASS" in out, out[-6000:] + done.stderr[-3000:]
    line = next(line for line in out.splitlines() if line.startswith("  moved "))
    assert "from llama.cpp's own move of the same cells" in line, line
    assert re.search(r"6\. move .* → moved", out), out[-3000:]
