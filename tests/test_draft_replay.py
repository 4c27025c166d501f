"""Drafts replayed on what Qwen2.5-Coder 1.5B really wrote: the prompt's and the greedy answer's
token ids of three `scripts/bench --edit` cases and of ten more requests (edit.more_messages),
recorded without drafts by `scripts/bench --edit --record` (tests/fixtures/drafts-qwen2.5-coder-
1.5b.json; a tool call's JSON view of its prompt too, made with the model's tokenizer, and the
module's file as its prediction). The drafter (drafts.py) and the cost model (draft_cost.py) run as
the scheduler runs them; greedy, a drafted token is kept exactly when it is the token the model
wrote next, so the replay is the run's arithmetic — in steps of the cost the CPU figures give a
step of k rows — not a guess about the model. No model is loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localchat.engine.drafting import draft_cost
from localchat.engine.drafting.draft_cost import StepCost, lengths
from localchat.engine.drafting.drafts import TextDrafter

RECORDED = json.loads((Path(__file__).parent / "fixtures" / "drafts-qwen2.5-coder-1.5b.json").read_text())
CPU = draft_cost.DEFAULT
GPU = StepCost({1: 1.0, 2: 1.01, 4: 1.02, 8: 1.03, 16: 1.05, 32: 1.08, 64: 1.15})


def replay(case: str, cost: StepCost, limit: int = 64, predicted: bool = False) -> tuple[float, int]:
    """The answer's speed with drafts against without (steps of one token each), and the most
    drafted tokens kept at once; `predicted`: with the case's prediction (the module's file)."""
    rec = RECORDED[case]
    out = rec["output"]
    drafter = TextDrafter(rec["prompt"] + out[:1], limit, [rec["view"]] if rec.get("view") else [],
                          prediction=rec["prediction"] if predicted else None)
    at, spent = 0, 0.0  # out[at] is the next token, written and not yet decoded
    while at < len(out) - 1:
        offered = drafter.available(len(out) - 1 - at)
        [d] = lengths(cost, [(0, drafter.survival(len(offered)))], {0: 1}, writers=1) if offered else [0]
        spent += cost(1 + d)
        kept = 0
        while kept < d and offered[kept] == out[at + 1 + kept]:
            kept += 1
        for token in out[at + 1:at + 2 + kept]:
            drafter.push(token)
        if d:
            drafter.verified(d, kept)
        at += 1 + kept
    return (len(out) - 1) / spent, drafter.longest


@pytest.mark.fast
@pytest.mark.parametrize("limit", [1, 2, 3, 5, 8, 16, 33, 64])
def test_no_draft_length_makes_prose_slower(limit: int):
    speed, _ = replay("prose", CPU, limit)
    assert speed >= 0.97


MORE = ["docstrings", "rename2", "prints", "explain", "patch2", "types", "rename3", "comments", "tests", "story"]


@pytest.mark.fast
@pytest.mark.parametrize("case", ["module", "patch", "prose", *MORE])
def test_drafts_never_make_an_answer_slower_on_a_cpu(case: str):
    # (the answers that copy little: explain, tests, story, prose)
    assert replay(case, CPU)[0] >= 0.99


@pytest.mark.fast
@pytest.mark.parametrize("case", ["module", "patch"])
def test_a_copy_drafts_long_and_pays_on_a_cpu(case: str):
    speed, longest = replay(case, CPU)
    assert speed >= 2.0 and longest > 32


@pytest.mark.fast
def test_where_a_step_costs_about_one_drafts_pay_more():
    assert replay("module", GPU)[0] > 2 * replay("module", CPU)[0]
    assert replay("prose", GPU)[0] >= 1.0


@pytest.mark.fast
@pytest.mark.parametrize("cost", [CPU, GPU], ids=["cpu", "gpu"])
def test_a_prediction_drafts_no_slower_than_the_prompt_alone(cost: StepCost):
    # the file is in the prompt too: the prediction adds no text to copy, only where it is preferred;
    # where the 1.5B wrote LlamaDiskCache's __setitem__ as it had just written LlamaRAMCache's, its own
    # answer is the longer match, and a preference for the prediction over it drafted the old text
    assert replay("module", cost, predicted=True)[0] >= replay("module", cost)[0]
