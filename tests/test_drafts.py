"""Drafts from the text (engine/drafting/drafts.py): the lookup, and the scheduler's verification — the
same tokens with drafts as without, kept or thrown away, under a grammar too."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterator
from dataclasses import replace

import pytest

from localchat.engine import Constraint, Done, Generate, LocalEngine, SamplingParams, Text
from localchat.engine.drafting.drafts import TextDrafter
from localchat.engine.params import SpeedParams
from localchat.families import FAMILIES, render_prompt
from localchat.grammars import validate
from localchat.grammars.schema import schema_to_gbnf
from localchat.models import Settings
from conftest import tiny_engine


@pytest.mark.fast
def test_the_lookup_drafts_what_followed_the_longest_match():
    # "2 3 4" occurred twice: after "1 2 3 4" (older, followed by 5 6) and after "8 2 3 4" (later, followed by 7)
    d = TextDrafter([0, 1, 2, 3, 4, 5, 6, 9, 8, 2, 3, 4, 7, 9, 1, 2, 3], limit=8)
    d.push(4)  # the text ends "1 2 3 4": the older occurrence matches one token more
    assert d.available(room=3) == [5, 6, 9]
    assert d.match == 4
    d.push(5)  # the text follows its source: the alignment moves on, nothing is looked up
    assert d.available(room=100) == [6, 9, 8, 2, 3, 4, 7, 9]  # the limit
    d.push(1)  # parts from it
    assert d.match == 0
    d.push(1)
    d.push(1)
    assert d.available(room=100) == []  # "1 1 1" never occurred: no draft
    assert TextDrafter([1, 2, 3, 1, 2, 3], limit=0).available(100) == []


@pytest.mark.fast
def test_a_repeat_drafts_past_the_end_of_the_text():
    d = TextDrafter([5, 1, 2, 3, 1, 2, 3], limit=8)  # "1 2 3" repeats: its source runs into the draft itself
    assert d.available(room=100) == [1, 2, 3, 1, 2, 3, 1, 2]


@pytest.mark.fast
def test_a_rename_is_learned_and_drafted_through():
    source = [10, 11, 12, 13, 50, 14, 15, 16, 17, 18, 19, 50, 20, 21, 22, 23, 24]  # 50: the old name
    d = TextDrafter([*source, 99, 10, 11, 12, 13], limit=20)  # the answer starts copying the source
    assert d.available(room=4) == [50, 14, 15, 16]
    for token in (60, 61, 14, 15, 16):  # it wrote the new name, two tokens, then went on as the source does
        d.push(token)
    assert d.available(room=9) == [17, 18, 19, 60, 61, 20, 21, 22, 23]  # 50 -> 60 61 from here on
    for token in (17, 18, 19, 60):
        d.push(token)
    assert d.available(room=3) == [61, 20, 21]
    d.verified(7, 4)  # (the draft's first four were kept)
    d.push(50)  # ... but here the model kept the old name after all: the alignment holds on through it?
    assert d.available(room=2) == []  # no: it parted from the draft (60 61 was expected), and nothing matches


@pytest.mark.fast
def test_a_substitution_the_model_refuses_after_a_token_is_not_used_after_it_again():
    source = [10, 11, 12, 50, 14, 15, 16, 17, 50, 18, 19, 20, 21, 30, 31, 50, 32, 33, 17, 50, 34]
    d = TextDrafter([*source, 99, 10, 11, 12], limit=20)
    assert d.available(room=1) == [50]
    for token in (60, 14, 15, 16):  # 50 -> 60 learned once the text meets its source again
        d.push(token)
    assert d.available(room=3) == [17, 60, 18]
    d.push(17)  # the model kept 17, then wrote 50, not 60
    d.push(50)
    d.verified(3, 1)
    assert d.available(room=2) == [18, 19]  # still aligned, through the old name
    for token in (18, 19, 20, 21, 30):
        d.push(token)
    assert d.available(room=7) == [31, 60, 32, 33, 17, 50, 34]  # after 31 still 60; after 17 no more


@pytest.mark.fast
def test_a_new_alignment_is_trusted_no_more_than_its_run_of_foreseen_tokens():
    source = list(range(100, 300))
    d = TextDrafter([*source, 99, *source[:3]], limit=64)
    for start in (0, 60, 120):  # three long copies, each found by a lookup and foreseen 50 tokens in a row
        if start:
            d.push(7)  # parted from its source
            for token in source[start:start + 3]:
                d.push(token)
        assert d.available(room=1) == [source[start + 3]]
        for token in source[start + 3:start + 53]:
            d.push(token)
    d.push(7)
    for token in source[180:183]:
        d.push(token)
    assert d.available(room=4) == [283, 284, 285, 286] and d.match == 3
    # the counts saw only kept tokens, but this alignment has foreseen none yet: by the rule of
    # succession, after 3 tokens matched the next k are all kept with a chance of 4 / (4 + k)
    assert d.survival(4) == pytest.approx([4 / 5, 4 / 6, 4 / 7, 4 / 8])


@pytest.mark.fast
def test_a_prediction_is_the_first_source():
    prompt = [7, 8, 20, 21, 22, *range(100, 120), 1, 2, 3, 30, 31, 32, 9]  # "1 2 3" followed by 30 31 32
    predicted = [20, 21, 22, 1, 2, 3, 40, 41, 42, 43]  # the prediction has it followed by 40 41 42 43
    d = TextDrafter([*prompt, 20], limit=16, prediction=predicted)  # the answer begins as predicted
    assert d.match == 1 and d.available(room=3) == [21, 22, 1]
    for token in (21, 22, 1, 2, 3):
        d.push(token)
    assert d.match == 6 and d.available(room=100) == [40, 41, 42, 43]
    d.push(5)  # parts from it
    for token in (1, 2, 3):
        d.push(token)
    # "1 2 3" again: the prompt's occurrence is the latest and matches as long, the prediction's wins
    assert d.available(room=2) == [40, 41]
    # without a prediction the latest occurrence wins
    assert TextDrafter([*prompt, 20, 21, 22, 1, 2, 3], limit=16).available(room=2) == [30, 31]
    # an answer that begins otherwise is aligned when a lookup finds the prediction
    d = TextDrafter([*prompt, 50], limit=16, prediction=predicted)
    assert d.match == 0 and d.available(room=2) == []
    for token in (3, 40, 41):
        d.push(token)
    assert d.available(room=2) == [42, 43]
    # the answer made an edit ("77 1 2 3" followed by 70 71) and makes it again: its own occurrence
    # matches one token longer than the prediction's "22 1 2 3", and wins
    d = TextDrafter([*prompt, 50], limit=16, prediction=predicted)
    for token in (77, 1, 2, 3, 70, 71, 9, 77, 1, 2, 3):
        d.push(token)
    assert d.available(room=2) == [70, 71] and d.match == 4


@pytest.mark.fast
def test_a_predictions_accepted_tokens_are_those_the_answer_wrote_in_order():
    from localchat.engine.state.slot import in_order
    file = [10, 11, 12, 13, 14, 15, 16, 17]
    assert in_order(file, file) == 8
    assert in_order(file, [10, 11, 99, 12, 13, 14, 16, 17, 5]) == 7  # an insertion, a deletion (15), an addition
    assert in_order(file, [17, 16, 15]) == 1  # out of order: one of them
    assert in_order(file, []) == 0


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> Iterator[LocalEngine]:
    yield from tiny_engine(tmp_path_factory, parallel=2)


NO_DRAFTS = SpeedParams(ngram_draft=0)
TIE = 1e-3  # two runs' log-probabilities of a token differ by less, relative to their size (float sums vary with the batch)


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
        assert abs(logprobs[i] - other[1][i]) < TIE * max(1.0, abs(logprobs[i])), i
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

    def available(self: TextDrafter, room: int) -> list[int]:
        at = len(self.tokens) - n_prompt  # the generated tokens so far, the next one included
        draft = truth[at:at + min(rng.randint(1, 6), room)]
        if draft and rng.random() < 0.6:
            draft[rng.randrange(len(draft))] = rng.randrange(3, 200)
        return draft
    sure(monkeypatch)
    monkeypatch.setattr(TextDrafter, "available", available)


def sure(monkeypatch: pytest.MonkeyPatch) -> None:
    """The drafter is sure of every draft: the cost model drafts as much of it as pays for a step."""
    monkeypatch.setattr(TextDrafter, "survival", lambda self, n: [1.0] * n)


def test_drafts_change_nothing_but_the_speed(engine: LocalEngine, monkeypatch: pytest.MonkeyPatch):
    """Greedy: the same tokens with drafts as without, each log-probability within TIE (a
    token's logits come from a bigger batch: llama.cpp's sums may differ in the last bits)."""
    tokens = prompt(engine, "Tell me about the sea and the world, the sea and the world.")
    plain = SamplingParams(max_tokens=48, temperature=0, repetition_stop=0, ignore_eos=True)
    cold = run(engine, Generate(tokens, plain, frozenset(), logprobs=2, speed=NO_DRAFTS))
    ids, done = cold[0], cold[3]
    assert done.drafted == 0 and len(ids) == done.completion_tokens
    for seed in range(3):
        noisy_drafts(monkeypatch, ids, len(tokens), seed)
        again = run(engine, Generate(tokens, plain, frozenset(), logprobs=2, speed=SpeedParams(ngram_draft=8)))
        same_greedy_tokens(cold, again)
        assert again[3].drafted > again[3].kept > 0 and again[3].completion_tokens == done.completion_tokens


def test_a_prediction_changes_nothing_but_the_speed(engine: LocalEngine):
    """A prediction (Predicted Outputs) drafts; the answer is the same. The answer itself as the
    prediction: all of it accepted; another text: none of it, rejected."""
    tokens = prompt(engine, "Tell me about the sea and the world, the sea and the world.")
    params = SamplingParams(max_tokens=48, temperature=0, repetition_stop=0, ignore_eos=True)
    cold = run(engine, Generate(tokens, params, frozenset(), logprobs=2, speed=NO_DRAFTS))
    ids, done = cold[0], cold[3]
    assert done.prediction is None  # (below: drafts on, ngram_draft's default)
    same = run(engine, Generate(tokens, params, frozenset(), logprobs=2, prediction=tuple(ids)))
    if same_greedy_tokens(cold, same) == len(ids):
        assert same[3].prediction == (len(ids), 0) and same[3].kept > 0
    other = [t for t in range(3, 400) if t not in set(ids)][:24]  # tokens the answer never wrote
    again = run(engine, Generate(tokens, params, frozenset(), logprobs=2, prediction=tuple(other)))
    if same_greedy_tokens(cold, again) == len(ids):
        assert again[3].prediction == (0, len(other))
    # without drafts the prediction drafts nothing, and usage still says how much of it was written
    half = ids[:len(ids) // 2] + other
    alone = run(engine, Generate(tokens, params, frozenset(), logprobs=2, prediction=tuple(half), speed=NO_DRAFTS))
    if same_greedy_tokens(cold, alone) == len(ids):
        assert alone[3].prediction == (len(ids) // 2, len(other)) and alone[3].drafted == 0


def test_sampled_output_is_the_same_draw_with_drafts(engine: LocalEngine, monkeypatch: pytest.MonkeyPatch):
    """Seeded sampling: each token is drawn from the model's distribution given the ones before
    it, drafted or not, so the same seed writes the same tokens."""
    tokens = prompt(engine, "Write anything.")
    params = SamplingParams(max_tokens=40, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=7, repetition_stop=0,
                            ignore_eos=True)
    ids = run(engine, Generate(tokens, params, frozenset(), logprobs=0, speed=NO_DRAFTS))[0]
    noisy_drafts(monkeypatch, ids, len(tokens), 1)
    ids2, _, _, done, _ = run(engine, Generate(tokens, params, frozenset(), logprobs=0,
                                                  speed=SpeedParams(ngram_draft=8)))
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

    def available(self: TextDrafter, room: int) -> list[int]:  # anything at all: most of it invalid JSON
        return [rng.randrange(3, 300) for _ in range(min(4, room))]
    sure(monkeypatch)
    monkeypatch.setattr(TextDrafter, "available", available)
    for seed in range(4):
        params = SamplingParams(max_tokens=200, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed,
                                repetition_stop=0)
        _, _, text, done, _ = run(engine, Generate(tokens, params, frozenset(), Constraint(grammar),
                                                   speed=SpeedParams(ngram_draft=4)))
        assert done.drafted > 0
        if done.finish_reason == "length":
            continue
        value = json.loads(text)
        assert set(value) == {"a", "b"} and value["b"] == int(value["b"]) and 0 <= value["b"] <= 99  # (2.0: an integer)


LONG = 48  # tokens a truthful draft holds: over 32 kept at once


def truthful(monkeypatch: pytest.MonkeyPatch, truths: dict[tuple[int, ...], list[int]]) -> list[int]:
    """Each sequence drafts LONG tokens of its plain run's output (`truths`, by prompt): drafts kept
    whole, long ones. Returns the list the most tokens kept at once by each drafter go to."""
    longest: list[int] = []
    init, verified = TextDrafter.__init__, TextDrafter.verified

    def start(self: TextDrafter, history: list[int], limit: int, views=(), prediction=None) -> None:
        init(self, history, limit, views, prediction)
        prompt = next(p for p in truths if tuple(history[:len(p)]) == p)
        self.truth, self.base = truths[prompt], len(self.tokens) - len(history) + len(prompt)

    def available(self: TextDrafter, room: int) -> list[int]:
        at = len(self.tokens) - self.base  # the generated tokens so far, the next one included
        return self.truth[at:at + min(LONG, room)]

    def done(self: TextDrafter, drafted: int, kept: int) -> None:
        verified(self, drafted, kept)
        longest.append(kept)
    sure(monkeypatch)
    monkeypatch.setattr(TextDrafter, "__init__", start)
    monkeypatch.setattr(TextDrafter, "available", available)
    monkeypatch.setattr(TextDrafter, "verified", done)
    return longest


def long_cases(engine: LocalEngine) -> list[tuple[list[int], SamplingParams, Constraint | None]]:
    """Free text, JSON under a schema, a forced tool call: each long enough for long drafts."""
    from localchat.generation.constraints import OutputRules, ToolSpec, build, codec_tools

    text = {"type": "string", "minLength": 200, "maxLength": 400}
    schema = {"type": "object", "properties": {"story": text}, "required": ["story"], "additionalProperties": False}
    tool = ToolSpec("write_file", "Write a file.", {"type": "object", "properties": {"path": {"type": "string"},
                                                                                      "content": text},
                                                    "required": ["path", "content"]})
    params = SamplingParams(max_tokens=160, temperature=0, repetition_stop=0, ignore_eos=True)
    grammar = schema_to_gbnf(schema)
    validate(grammar)
    rules = OutputRules(tools=(tool,), tool_choice="write_file")
    call = build(rules, codec_tools(rules), FAMILIES["chatml"], False, Settings().max_grammar_bytes)
    return [(prompt(engine, "Tell me about the sea."), params, None),
            (prompt(engine, "A story as JSON."), replace(params, ignore_eos=False), Constraint(grammar)),
            (prompt(engine, "Write the file."), replace(params, ignore_eos=False), call)]


def test_long_drafts_change_nothing_alone_or_two_at_once(engine: LocalEngine, monkeypatch: pytest.MonkeyPatch):
    """Drafts of LONG tokens, over 32 kept at once: greedy text identical to drafts off, free, under a
    JSON schema and in a forced tool call, one at a time and two slots at once."""
    cases = long_cases(engine)
    plain = [run(engine, Generate(tokens, p, frozenset(), c, logprobs=2, speed=NO_DRAFTS))
             for tokens, p, c in cases]
    assert all(len(r[0]) > LONG for r in plain)
    longest = truthful(monkeypatch, {tuple(tokens): r[0] for (tokens, _, _), r in zip(cases, plain)})
    for (tokens, p, c), alone in zip(cases, plain):
        drafted = run(engine, Generate(tokens, p, frozenset(), c, logprobs=2))
        same_greedy_tokens(alone, drafted)
        assert drafted[3].drafted > 0
    assert max(longest) > 32

    async def two(a: int, b: int):
        async def one(i: int):
            tokens, p, c = cases[i]
            return await asyncio.to_thread(run, engine, Generate(tokens, p, frozenset(), c, logprobs=2))
        return await asyncio.gather(one(a), one(b))
    longest.clear()
    for a, b in ((0, 1), (1, 2)):
        first, second = asyncio.run(two(a, b))
        same_greedy_tokens(plain[a], first)
        same_greedy_tokens(plain[b], second)
    assert max(longest) > 32


def test_a_grammar_cuts_a_draft_at_the_first_token_it_forbids(engine: LocalEngine):
    from localchat.engine.sampling.sampling import Sampler

    grammar = schema_to_gbnf({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                              "additionalProperties": False})
    model = engine.model
    sampler = Sampler(SamplingParams(temperature=0), model.vocab, model.n_vocab, Constraint(grammar), model.piece,
                      lambda text: model.tokenize([(text, True)]))
    try:
        ok = model.tokenize([('{"a": 12}', True)])
        assert sampler.allowed(ok) == len(ok)
        bad = model.tokenize([('{"b": 1}', True)])
        assert sampler.allowed(bad) < len(bad)
        assert sampler.allowed(ok) == len(ok)  # judging changed nothing: the sampler's grammar is where it was
    finally:
        sampler.close()
