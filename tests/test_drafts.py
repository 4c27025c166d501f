"""Drafts from the text (engine/drafts.py): the lookup, and the scheduler's verification — the
same tokens with drafts as without, kept or thrown away, under a grammar too."""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import replace

import pytest

from localchat.engine import Constraint, Done, Generate, LocalEngine, SamplingParams, Text
from localchat.engine.drafts import NgramDrafter
from localchat.families import FAMILIES, render_prompt
from localchat.grammars import validate
from localchat.grammars.schema import schema_to_gbnf
from tinymodels import write_tiny_model


@pytest.mark.fast
def test_the_lookup_drafts_what_followed_the_last_ngram_before():
    d = NgramDrafter([1, 2, 3, 4, 5, 6, 9, 2, 3], limit=8)
    d.push(4)  # "2 3 4" was followed by 5 6 9 2 before
    assert d.propose(room=100) == [5, 6, 9, 2]  # START long
    assert d.propose(room=2) == [5, 6]
    d.verified(4, 4)
    assert d.k == 8  # all kept: doubled, up to the limit
    d.verified(8, 1)
    assert d.k == 2  # cut to what was kept + 1, at least MIN
    d.push(7)
    assert d.propose(room=100) == []  # "3 4 7" never occurred: no draft
    assert NgramDrafter([1, 2, 3, 1, 2, 3], limit=0).propose(100) == []


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> LocalEngine:
    path = write_tiny_model(tmp_path_factory.mktemp("drafts") / "m.gguf", FAMILIES["chatml"], n_ctx=1024)
    engine = LocalEngine(path, n_ctx=1024, parallel=2)
    yield engine
    engine.close()


TIE = 1e-3  # two runs' log-probabilities of a token differ by less (llama.cpp's sums vary with the batch)


def run(engine: LocalEngine, request: Generate) -> tuple[list[int], list[float], str, Done, list[float]]:
    """The tokens, their log-probabilities, the text, the Done event, and at each step the margin
    between the two most likely tokens (with request.logprobs >= 2)."""
    async def go():
        ids, logprobs, text, done, margins = [], [], "", None, []
        async for event in engine.generate(request):
            if isinstance(event, Text):
                text += event.text
                ids += [t.id for t in event.logprobs]
                logprobs += [t.logprob for t in event.logprobs]
                margins += [t.top[0].logprob - t.top[1].logprob if len(t.top) > 1 else 1.0 for t in event.logprobs]
            elif isinstance(event, Done):
                done = event
        return ids, logprobs, text, done, margins
    return asyncio.run(go())


def same_greedy_tokens(plain: tuple, other: tuple) -> int:
    """Greedy runs write the same tokens, each log-probability within TIE, up to the first step
    where the plain run's two best tokens were within 2 * TIE of each other (another CPU's
    kernels may break such a tie the other way): how many tokens were compared."""
    ids, logprobs, margins = plain[0], plain[1], plain[4]
    for i, (a, b) in enumerate(zip(ids, other[0])):
        assert abs(logprobs[i] - other[1][i]) < TIE, i
        if a != b:
            assert margins[i] < 2 * TIE, f"token {i}: {a} then {b}, not a tie ({margins[i]})"
            return i
    assert len(ids) == len(other[0])
    return len(ids)


def prompt(engine: LocalEngine, content: str) -> list[int]:
    return engine.tokenizer.tokenize(render_prompt(FAMILIES["chatml"].template,
                                                   [{"role": "user", "content": content}]).segments)


def noisy_drafts(monkeypatch: pytest.MonkeyPatch, truth: list[int], n_prompt: int, seed: int) -> None:
    """Every step drafts the true continuation with, often, one wrong token in it: drafts kept
    whole, kept in part and thrown away at once, all in one run."""
    rng = random.Random(seed)

    def propose(self: NgramDrafter, room: int) -> list[int]:
        at = len(self.tokens) - n_prompt  # the generated tokens so far, the next one included
        draft = truth[at:at + min(rng.randint(1, 6), room)]
        if draft and rng.random() < 0.6:
            draft[rng.randrange(len(draft))] = rng.randrange(3, 200)
        return draft
    monkeypatch.setattr(NgramDrafter, "propose", propose)


def test_drafts_change_nothing_but_the_speed(engine: LocalEngine, monkeypatch: pytest.MonkeyPatch):
    """Greedy: the same tokens with drafts as without, each log-probability within TIE (a
    token's logits come from a bigger batch: llama.cpp's sums may differ in the last bits)."""
    tokens = prompt(engine, "Tell me about the sea and the world, the sea and the world.")
    plain = SamplingParams(max_tokens=48, temperature=0, ngram_draft=0, repetition_stop=0, ignore_eos=True)
    cold = run(engine, Generate(tokens, plain, frozenset(), logprobs=2))
    ids, done = cold[0], cold[3]
    assert done.drafted == 0 and len(ids) == done.completion_tokens
    for seed in range(3):
        noisy_drafts(monkeypatch, ids, len(tokens), seed)
        drafted = SamplingParams(max_tokens=48, temperature=0, ngram_draft=8, repetition_stop=0, ignore_eos=True)
        again = run(engine, Generate(tokens, drafted, frozenset(), logprobs=2))
        same_greedy_tokens(cold, again)
        assert again[3].drafted > again[3].kept > 0 and again[3].completion_tokens == done.completion_tokens


def test_sampled_output_is_the_same_draw_with_drafts(engine: LocalEngine, monkeypatch: pytest.MonkeyPatch):
    """Seeded sampling: each token is drawn from the model's distribution given the ones before
    it, drafted or not, so the same seed writes the same tokens."""
    tokens = prompt(engine, "Write anything.")
    params = SamplingParams(max_tokens=40, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=7, repetition_stop=0,
                            ignore_eos=True)
    ids = run(engine, Generate(tokens, replace(params, ngram_draft=0), frozenset(), logprobs=0))[0]
    noisy_drafts(monkeypatch, ids, len(tokens), 1)
    ids2, _, _, done, _ = run(engine, Generate(tokens, replace(params, ngram_draft=8), frozenset(), logprobs=0))
    assert ids2 == ids and done.drafted > 0


def test_drafts_under_a_grammar_stay_valid(engine: LocalEngine, monkeypatch: pytest.MonkeyPatch):
    """Drafted tokens the grammar forbids are never kept: the output is the grammar's, drafts or not."""
    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 12},
                                               "b": {"type": "integer", "minimum": 0, "maximum": 99}},
              "required": ["a", "b"], "additionalProperties": False}
    grammar = schema_to_gbnf(schema)
    validate(grammar)
    tokens = prompt(engine, "JSON please.")
    rng = random.Random(3)

    def propose(self: NgramDrafter, room: int) -> list[int]:  # anything at all: most of it invalid JSON
        return [rng.randrange(3, 300) for _ in range(min(4, room))]
    monkeypatch.setattr(NgramDrafter, "propose", propose)
    for seed in range(4):
        params = SamplingParams(max_tokens=200, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed,
                                ngram_draft=4, repetition_stop=0)
        _, _, text, done, _ = run(engine, Generate(tokens, params, frozenset(), Constraint(grammar)))
        assert done.drafted > 0
        if done.finish_reason == "length":
            continue
        value = json.loads(text)
        assert set(value) == {"a", "b"} and isinstance(value["b"], int) and 0 <= value["b"] <= 99
