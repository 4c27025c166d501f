"""A new folder reads only what changed: a prompt that matches a slot's cache but for a span
(a path, a date) reuses the cached cells after it, moved to their new positions (matching.py's
shifted_matches, prefix_cache.PrefixCache._shift, kv_state.py). Real llama.cpp, a tiny model."""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path

import llama_cpp as C
import pytest
from llama_cpp import Llama

from localchat.engine import Done, Generate, LocalEngine, SamplingParams, Text
from localchat.engine.cache import kv_state, prefix_cache
from localchat.engine.params import SpeedParams
from localchat.engine.state.job import TILE_ROWS, chunk_size
from localchat.engine.cache.matching import (SHIFT_EDIT, SHIFT_FRESH, SHIFT_MIN, SHIFT_SPAN, moved_stretches, shifted_match,
                                             shifted_matches)
from localchat.families import FAMILIES
from localchat.models import Registry, shipped_config
from conftest import tiny_engine
from localchat.devtools.tinymodels import write_tiny_model

FIXTURES = Path(__file__).parent / "fixtures" / "agents"


@pytest.mark.fast
def test_the_cached_tokens_are_met_again_after_a_span():
    rng = random.Random(1)
    head, tail = [rng.randrange(1000) for _ in range(40)], [rng.randrange(1000) for _ in range(400)]
    old, new = [*head, 7, 7, 7, *tail, 5, 5], [*head, 8, 8, 8, 8, 8, *tail, 6]
    at, span, length = shifted_match(old, new, len(head), len(head))
    assert (at, span) == (len(head) + 3, 5) and length == len(tail)  # (the new prompt's last token is read)
    deleted = [*head, *tail, 9]
    assert shifted_match(old, deleted, len(head), len(head)) == (len(head) + 3, 0, len(tail))
    assert shifted_matches(old, [*head, 8, *tail[:SHIFT_MIN - 10], 1, 2], len(head)) == []  # too little kept
    far = [*head, *([8] * (SHIFT_SPAN + 1)), *tail, 6]
    assert shifted_matches(old, far, len(head)) == []  # the span is longer than SHIFT_SPAN
    # two spans (a path, then a date further on): two stretches moved
    mid = [rng.randrange(1000) for _ in range(300)]
    old2, new2 = [*head, 1, *mid, 2, 2, *tail, 5], [*head, 3, 3, 3, *mid, 4, *tail, 6]
    assert shifted_matches(old2, new2, len(head)) == [(len(head) + 1, 3, len(mid)),
                                                      (len(head) + 1 + len(mid) + 2, 1, len(tail))]


@pytest.mark.fast
def test_cells_move_past_a_short_span_or_a_moved_block_only():
    """scripts/cachecheck on the 0.5B (seed 44, sequence 2): a rule of the system message replaced,
    the cells after it moved, and the answer's first token's probability off by 0.46-0.53 from a
    cold read: those cells saw the old rule. Cells move past short edits (at most SHIFT_EDIT tokens
    on each side: a path, a date, a name), or past one side of a block moved elsewhere in the prompt;
    after any other span they are read again. Two unlike paragraphs of the agents' prompts share no
    stretch of SHIFT_SAME tokens between edits of SHIFT_EDIT (0 of 300 pairs, Qwen's tokenizer)."""
    rng = random.Random(3)
    head, tail = [rng.randrange(1000) for _ in range(40)], [rng.randrange(1000) for _ in range(400)]
    line, other = [rng.randrange(1000, 2000) for _ in range(40)], [rng.randrange(2000, 3000) for _ in range(40)]
    short = [rng.randrange(2000, 3000) for _ in range(SHIFT_EDIT)]
    old = [*head, *line, *tail, 5]
    assert shifted_matches(old, [*head, *short, *tail, 6], len(head)) == []  # the cached side is too long
    assert shifted_matches(old, [*head, *other, *tail, 6], len(head)) == []  # a line replaced
    assert shifted_matches(old, [*head, *tail, 6], len(head)) == []  # a line deleted
    assert shifted_matches([*head, *tail, 5], [*head, *line, *tail, 6], len(head)) == []  # a line put in
    old = [*head, *line[:SHIFT_EDIT], *tail, 5]
    assert shifted_matches(old, [*head, *short, *tail, 6], len(head)) == [(len(head) + SHIFT_EDIT, SHIFT_EDIT, len(tail))]
    # a folder renamed in every line of a file list: short edits between the file names both hold
    names = [[rng.randrange(3000, 4000) for _ in range(6)] for _ in range(10)]
    listed = lambda folder: [t for name in names for t in (*folder, *name)]  # noqa: E731
    old, new = [*head, *listed(line[:8]), *tail, 5], [*head, *listed(short[:11]), *tail, 6]
    assert shifted_matches(old, new, len(head)) == [(len(old) - len(tail) - 7, len(new) - len(head) - len(tail) - 7,
                                                     len(tail) + 6)]  # (from the last file's name on)
    unlike = [[rng.randrange(4000, 5000) for _ in range(6)] for _ in range(10)]
    new = [*head, *[t for name in unlike for t in (*short[:11], *name)], *tail, 6]
    assert shifted_matches(old, new, len(head)) == []  # (other files: nothing both hold)
    # a block moved after the tail: left out here, met again further on; the tail's cells move
    task = [rng.randrange(1000) for _ in range(300)]
    old, new = [*head, *line, *tail, *task, 5], [*head, *tail, *line, *task, 6]
    assert shifted_matches(old, new, len(head)) == [(len(head) + len(line), 0, len(tail)),
                                                    (len(head) + len(line) + len(tail), len(line), len(task))]
    # two blocks swapped, both too short to be met again alone (an environment block put after a short task)
    before, after = [*head, *line, *task[:200], *tail, 5], [*head, *task[:200], *line, *tail, 6]
    assert shifted_matches(before, after, len(head)) == [(len(head) + 240, 240, len(tail))]
    # and back: put in before the tail, left out after it
    assert shifted_matches(new, old, len(head)) == [(len(head), len(line), len(tail)),
                                                    (len(head) + len(tail) + len(line), 0, len(task))]


@pytest.mark.fast
def test_the_first_tokens_after_each_span_are_read_again_not_moved():
    """A moved stretch's first SHIFT_FRESH tokens attend to the new span most: they are read with it.
    A stretch no longer than that is read whole, with the span before it."""
    F = SHIFT_FRESH
    assert moved_stretches([(10, 3, 300), (320, 0, 400)]) == [(10 + F, 3 + F, 300 - F), (320 + F, F, 400 - F)]
    assert moved_stretches([(10, 3, F), (30, 2, 300)]) == [(30 + F, 3 + F + 2 + F, 300 - F)]
    assert moved_stretches([(10, 3, F)]) == []
    # what a shifted reuse reads: the span, then the stretch's first F tokens; the cells it moves end where they did
    at, span, length = moved_stretches([(10, 3, 300)])[0]
    assert at + length == 10 + 300 and span == 3 + F


@pytest.mark.real  # the shipped 0.5B's tokenizer
@pytest.mark.parametrize("client", ["claude", "codex", "opencode", "qwen", "pi", "cline", "cn"])
def test_a_new_folder_still_moves_every_agents_prompt(client: str):
    """The spans moved cells may pass are short edits or moved blocks only: a new project folder in
    each agent's recorded first request (tests/fixtures/agents, the folder in every file path) is
    still all moved but for the paths themselves and the SHIFT_FRESH tokens after each: under 2% of
    the prompt read (measured 0.3-1.6%; the paths alone 0.05-0.8%). aider's first request names no folder."""
    first = json.loads((FIXTURES / f"{client}.json").read_text())["requests"][0]
    text = json.dumps(first.get("body", first))  # (its JSON as the prompt: the folder where the client put it)
    vocab = Llama(str(Registry.load(shipped_config()).resolve("qwen2.5-coder-0.5b").file()), vocab_only=True,
                  verbose=False)
    old, new = (vocab.tokenize(t.encode(), add_bos=False, special=True) for t in
                (text, text.replace("/home/user/project", "/home/user/other-app").replace("-home-user-project",
                                                                                        "-home-user-other-app")))
    assert old != new
    n = len(os.path.commonprefix([old, new]))
    moved = sum(length for _, _, length in moved_stretches(shifted_matches(old, new, n)))
    assert len(new) - n - moved < 0.02 * len(new), (len(new), n, moved)


@pytest.mark.fast
def test_no_cached_cell_moves_into_the_turn_being_answered():
    """aider ends each new message with the same long rules: its "Say hi." cached, then "run this
    command" read with the rules' cells moved, answered "Ok." as to the old message (cold: the
    command). A moved stretch starts before the last message (fresh_from) and ends at its first
    difference at the latest: from there on all is read."""
    rng = random.Random(2)
    head, rules = [rng.randrange(1000) for _ in range(40)], [rng.randrange(1000) for _ in range(400)]
    old, new = [*head, 7, 7, *rules, 5], [*head, 8, 8, 8, *rules, 6]
    assert shifted_matches(old, new, len(head)) == [(len(head) + 2, 3, len(rules))]  # (no turn given)
    assert shifted_matches(old, new, len(head), fresh_from=len(head)) == []  # the message is the span on
    # a stretch that starts before the message runs on into it up to the message's first difference (the same
    # reminders open each new task): those cells saw only the old span; the rules after the new text are read
    reminder = [rng.randrange(1000) for _ in range(100)]
    old = [*head, 7, 7, *rules, *reminder, 5, 5, *rules, 5]
    new = [*head, 8, 8, 8, *rules, *reminder, 6, *rules, 6]
    turn = len(head) + 3 + len(rules)
    assert shifted_matches(old, new, len(head), fresh_from=turn) == [(len(head) + 2, 3, len(rules) + len(reminder))]
    assert shifted_matches(old, new, len(head), fresh_from=len(head) + 3) == []  # (it would start in the message)


@pytest.mark.fast
def test_no_prompt_chunk_leaves_a_last_chunk_under_a_tile():
    """A prompt's last chunk is at least TILE_ROWS tokens where it is longer (llama.cpp's CPU flash
    attention computes fewer rows with another, F16 kernel: job.py): a cached read of 512 + 20
    tokens reads 468 then 64, as a cold read of the whole prompt reads its last token."""
    def chunks(pending: int, room: int) -> list[int]:
        out = []
        while pending:
            out.append(chunk_size(pending, room))
            pending -= out[-1]
        return out
    assert chunks(532, 512) == [468, 64]
    assert chunks(1587, 512) == [512, 512, 499, 64]
    assert chunks(1600, 512) == [512, 512, 512, 64]  # (a rest of 64 is left as it is)
    assert chunks(40, 512) == [40] and chunks(512, 512) == [512]  # all that fits is read at once
    assert chunks(100, 30) == [30, 6, 30, 30, 4]  # a step with little room: the rest is read as room allows
    assert all(min(chunks(n, 512)[-1], n) >= min(n, TILE_ROWS) for n in range(1, 3000, 7))


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> Iterator[LocalEngine]:
    yield from tiny_engine(tmp_path_factory, n_ctx=2048, costs=True, parallel=1)


def run(engine: LocalEngine, tokens: list[int], reuse: int = 64) -> tuple[list[int], list[float], list[float], Done]:
    params = SamplingParams(max_tokens=24, temperature=0, repetition_stop=0, ignore_eos=True)

    async def go():
        ids, logprobs, margins, done = [], [], [], None
        async for event in engine.generate(Generate(tokens, params, frozenset(), logprobs=2,
                                                    speed=SpeedParams(ngram_draft=0, cache_reuse=reuse))):
            if isinstance(event, Text):
                ids += [t.id for t in event.logprobs]
                logprobs += [t.logprob for t in event.logprobs]
                margins += [t.top[0].logprob - t.top[1].logprob for t in event.logprobs]
            elif isinstance(event, Done):
                done = event
        return ids, logprobs, margins, done
    return asyncio.run(go())


def prompts() -> tuple[list[int], list[int], int, int]:
    """Two prompts alike but for a folder (9 tokens, then 4) and, 300 tokens on, a date (2, then 3)."""
    rng = random.Random(2)
    words = lambda k: [rng.randrange(3, 200) for _ in range(k)]  # noqa: E731
    head, mid, tail = words(50), words(300), words(400)
    folder_a, folder_b, date_a, date_b = words(9), words(4), words(2), words(3)
    return ([*head, *folder_a, *mid, *date_a, *tail], [*head, *folder_b, *mid, *date_b, *tail], len(head),
            len(mid) + len(tail))


def test_a_new_span_is_read_and_the_cells_after_it_are_moved(engine: LocalEngine):
    """There and back: B read cold, then A (B's cells between and after the spans moved), then B
    again (the same cells moved back): B's second answer is its first, each log-probability within 1e-3,
    up to a near-tie; with cache_reuse 0 nothing after the span is reused."""
    a, b, n_head, n_tail = prompts()
    cold = run(engine, b)
    there = run(engine, a)
    back = run(engine, b)
    assert cold[3].cached_tokens < n_head + 5  # (another prompt's, or none)
    # two stretches moved (after the folder, after the date), each but its first SHIFT_FRESH tokens
    assert there[3].cached_tokens == back[3].cached_tokens == n_head + n_tail - 1 - 2 * SHIFT_FRESH
    for i, (x, y) in enumerate(zip(cold[0], back[0])):
        assert abs(cold[1][i] - back[1][i]) < 1e-3 * max(1.0, abs(cold[1][i])), i
        if x != y:
            assert cold[2][i] < 2e-3, (i, cold[2][i])
            break
    off = run(engine, a, reuse=0)
    assert off[3].cached_tokens == n_head


def test_a_shifted_reuse_reads_as_a_cold_read(engine: LocalEngine):
    """A read cold, then B cold, then A from B's cells moved 5 positions back: A's answer is its
    cold one up to a near-tie, each log-probability close (the moved cells saw B's span, so not
    equal). Measured here: a mean difference of 0.008 (0.006 where the span keeps its length);
    0.097 when the moved cells kept their old RoPE (saved before llama.cpp turned them)."""
    a, b, n_head, n_tail = prompts()
    other = [random.Random(3).randrange(3, 200) for _ in range(300)]
    run(engine, other)
    cold = run(engine, a)
    run(engine, other)
    run(engine, b)
    shifted = run(engine, a)
    assert cold[3].cached_tokens < n_head and shifted[3].cached_tokens == n_head + n_tail - 1 - 2 * SHIFT_FRESH
    diffs = []
    for i, (x, y) in enumerate(zip(cold[0], shifted[0])):
        diffs.append(abs(cold[1][i] - shifted[1][i]))
        if x != y:
            assert cold[2][i] < 0.05, (i, cold[2][i])
            break
    assert sum(diffs) / len(diffs) < 0.03, diffs


def test_a_request_cancelled_inside_its_new_span_leaves_the_slot_usable(engine: LocalEngine):
    a, b, n_head, _ = prompts()
    run(engine, a)

    async def leave():
        params = SamplingParams(max_tokens=4, temperature=0)
        async for _ in engine.generate(Generate(b, params, frozenset(), speed=SpeedParams(ngram_draft=0, cache_reuse=64))):
            break  # the Started event: the span is not read yet
    asyncio.run(leave())
    again = run(engine, b)
    assert again[3].completion_tokens == 24 and again[3].cached_tokens >= n_head


@pytest.mark.parametrize("fault", ["put", "join"])
def test_moved_cells_that_cannot_join_are_read_instead(engine: LocalEngine, monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture, fault: str):
    """The moved cells wait in a save while the span before them is read (prefix_cache.land). If
    llama.cpp will not take the joined cells back ("put": the sequence is then empty) or the save
    cannot be joined ("join"), the rest is read instead: the answer is A's cold answer, the log says
    so once, and the slot serves the next request."""
    a, b, n_head, _ = prompts()
    run(engine, [random.Random(3).randrange(3, 200) for _ in range(300)])  # (A not cached: read cold)
    cold = run(engine, a)
    run(engine, b)
    if fault == "put":
        def put(ctx, seq, state):  # as llama.cpp leaves a sequence it could not fill: empty
            C.llama_memory_seq_rm(C.llama_get_memory(ctx), seq, -1, -1)
            return False
        monkeypatch.setattr(prefix_cache, "put_state", put)
    else:
        monkeypatch.setattr(kv_state, "joined", lambda *args: None)
    with caplog.at_level("WARNING", logger="localchat.engine"):
        again = run(engine, a)
    monkeypatch.undo()
    said = [r.getMessage() for r in caplog.records if "could not be put back" in r.getMessage()]
    assert len(said) == 1, said
    # "put": all read again; "join": the prefix, the first span and the SHIFT_FRESH tokens after it kept
    assert again[3].cached_tokens == (0 if fault == "put" else n_head + 9 + SHIFT_FRESH)
    assert again[3].completion_tokens == 24
    for i, (x, y) in enumerate(zip(cold[0], again[0])):  # (read in other chunks: equal up to a near-tie)
        assert abs(cold[1][i] - again[1][i]) < 1e-3 * max(1.0, abs(cold[1][i])), i
        if x != y:
            assert cold[2][i] < 2e-3, (i, cold[2][i])
            break
    assert run(engine, b)[3].completion_tokens == 24


def test_a_quantized_k_cache_reads_the_span_and_what_follows(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """llama.cpp 0.3.36 segfaults turning a q8_0 K cache's RoPE (tests/test_kv_state.py): with one,
    a prompt that differs in a span is served up to the span and the rest is read, no cell moved."""
    from localchat.devtools import tinymodels

    monkeypatch.setattr(tinymodels, "N_HEAD", 2)  # heads of 32 values: a q8_0 block's size
    path = write_tiny_model(tmp_path / "m.gguf", FAMILIES["chatml"], n_ctx=2048)
    engine = LocalEngine(path, n_ctx=2048, parallel=1, step_costs=str(tmp_path / "c.json"), cache_types=("q8_0", "f16"))
    try:
        a, b, n_head, _ = prompts()
        run(engine, b)
        again = run(engine, a)
        assert again[3].cached_tokens == n_head and again[3].completion_tokens == 24
    finally:
        engine.close()
