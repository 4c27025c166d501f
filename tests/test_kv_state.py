"""kv_state's parse pinned to llama.cpp's layout (issue 44, item 3): saves of sequences of every
kind of model the engine keeps (the tiny GGUFs' architectures, llama and qwen3; heads of 16 and
32 values; f16, q8_0 and q4_0 K/V caches; V transposed or not, as flash attention is off or on),
taken with the engine's own helpers after the edits a shifted reuse makes, parse to the positions
decoded and are put together again byte for byte; llama.cpp takes the rebuilt save back and gives
the same bytes; `joined` (the shifted reuse's edit) makes a save llama.cpp takes. A layout it does
not know (another llama.cpp) is read instead of moved, said once. Found here: llama.cpp (0.3.36,
CPU) crashes shifting a quantized K cache: decoder.shiftable says no to one (a test below)."""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator
from pathlib import Path

import llama_cpp as C
import pytest

from localchat.devtools import tinymodels
from localchat.engine import LocalEngine
from localchat.engine.cache import kv_state
from localchat.engine.llama.batch import Batch
from localchat.engine.core.decoder import open_context, shiftable
from localchat.engine.llama.model import Model
from localchat.engine.cache.prompt_store import copy_state, put_state
from localchat.families import FAMILIES
from test_prompt_reuse import prompts, run
from conftest import tiny_engine
from localchat.devtools.tinymodels import write_tiny_model

UNKNOWN = "layout this version does not know"
TYPES = {"f16": (C.GGML_TYPE_F16, 2, 1), "q8_0": (C.GGML_TYPE_Q8_0, 34, 32), "q4_0": (C.GGML_TYPE_Q4_0, 18, 32)}
# (architecture, attention heads, K and V cache types, flash attention): each a context the engine
# opens and shifts; heads of 16 values (the tiny models' 4 heads) take a quantized K only without
# flash attention and no quantized V (it needs flash attention), heads of 32 take them all
KINDS = [
    ("llama", 4, ("f16", "f16"), "auto"),
    ("llama", 4, ("f16", "f16"), "off"),  # V transposed
    ("qwen3", 4, ("f16", "f16"), "auto"),
    ("qwen3", 4, ("f16", "f16"), "off"),
    ("llama", 4, ("q8_0", "f16"), "off"),
    ("llama", 2, ("q8_0", "q8_0"), "auto"),
    ("qwen3", 2, ("q8_0", "q8_0"), "auto"),
    ("llama", 2, ("q4_0", "q8_0"), "auto"),
    ("qwen3", 2, ("f16", "q4_0"), "auto"),
    ("qwen3", 2, ("q8_0", "f16"), "off"),
]


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], Path]:
    folder = tmp_path_factory.mktemp("kv")
    out = {}
    for arch in ("llama", "qwen3"):
        for heads in (4, 2):
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(tinymodels, "N_HEAD", heads)
                out[arch, heads] = write_tiny_model(folder / f"{arch}-{heads}.gguf", FAMILIES["chatml"], n_ctx=512,
                                                    arch=arch)
    return out


class Seqs:
    """A context of the engine's (decoder.open_context: one stream per sequence) and its batch."""

    def __init__(self, model: Model, cache_types: tuple[str, str], flash: str, mp: pytest.MonkeyPatch) -> None:
        if flash == "off":
            defaults = C.llama_context_default_params

            def params():
                p = defaults()
                p.flash_attn_type = C.LLAMA_FLASH_ATTN_TYPE_DISABLED
                return p
            mp.setattr(C, "llama_context_default_params", params)
        self.ctx = open_context(model, n_ctx=256, parallel=3, n_batch=64, n_threads=1, rope=None,
                                cache_types=cache_types)
        mp.undo()
        self.mem = C.llama_get_memory(self.ctx)
        self.batch = Batch(64)

    def decode(self, seq: int, start: int, n: int) -> None:
        """n tokens of sequence `seq` at positions start…start + n - 1."""
        for at in range(start, start + n, 64):
            k = min(64, start + n - at)
            for i in range(k):
                self.batch.set(i, 10 + (at + i) * 7 % 90, at + i, seq, at + i == start + n - 1)
            assert self.batch.decode(self.ctx, k) == 0

    def close(self) -> None:
        self.batch.close()
        C.llama_free(self.ctx)


@pytest.fixture
def kind(request, ggufs: dict[tuple[str, int], Path]) -> Iterator[tuple[Model, Seqs, tuple[str, str], str]]:
    arch, heads, cache_types, flash = request.param
    model = Model(ggufs[arch, heads])
    with pytest.MonkeyPatch.context() as mp:
        seqs = Seqs(model, cache_types, flash, mp)
    yield model, seqs, cache_types, flash
    seqs.close()
    model.close()


def check_layout(state: bytearray, cache_types: tuple[str, str], v_trans_expected: int | None) -> int:
    """The blocks' headers say what this cache holds: per layer a K row per cell of the cache's K
    type (64 values), then V rows, or with V transposed per V value an element per cell."""
    n_stream, strm, (cells, metas, blocks) = kv_state._parse(state)
    head = bytes(blocks[0][1])
    v_trans, n_layer = struct.unpack("<II", head)
    assert n_layer == tinymodels.N_LAYER
    if v_trans_expected is not None:
        assert v_trans == v_trans_expected
    k_type, k_row, per = TYPES[cache_types[0]]
    v_type, v_row, v_per = TYPES[cache_types[1]]
    headers = [bytes(b) for size, b in blocks[1:] if size == 0]
    assert headers[:n_layer] == [struct.pack("<iQ", k_type, 64 // per * k_row)] * n_layer
    if v_trans:
        assert headers[n_layer:] == [struct.pack("<iII", v_type, v_row, 64)] * n_layer
    else:
        assert headers[n_layer:] == [struct.pack("<iQ", v_type, 64 // v_per * v_row)] * n_layer
    return v_trans


@pytest.mark.parametrize("kind", KINDS, indirect=True, ids=lambda k: f"{k[0]}-{64 // k[1]}-{'-'.join(k[2])}-fa-{k[3]}")
def test_a_save_parses_to_its_cells_and_is_put_together_again_byte_for_byte(kind):
    model, seqs, cache_types, flash = kind
    assert shiftable(model, seqs.ctx)  # a kind the engine shifts
    seqs.decode(0, 0, 100)
    seqs.decode(1, 0, 37)
    seqs.decode(2, 0, 1)
    # a shifted reuse's moves (prefix_cache._shift): a span out, the cells after it moved 5 back, turned
    # (a quantized K cannot be turned: llama.cpp crashes; its cells stay where they are)
    assert C.llama_memory_seq_rm(seqs.mem, 0, 20, 30)
    moves = cache_types[0] == "f16"
    if moves:
        C.llama_memory_seq_add(seqs.mem, 0, 30, 100, -5)
        seqs.decode(0, 95, 1)
        assert C.llama_memory_seq_rm(seqs.mem, 0, 95, -1)
    expected = {0: [*range(20), *(range(25, 95) if moves else range(30, 100))], 1: list(range(37)), 2: [0]}
    v_trans = None if flash == "auto" and cache_types[1] == "f16" else int(flash == "off")
    for seq, cells in expected.items():
        state = copy_state(seqs.ctx, seq)
        assert kv_state.positions(state) == cells
        assert kv_state.rebuilt(state) == state
        check_layout(state, cache_types, v_trans)
        # llama.cpp takes the rebuilt save back, and gives the same bytes
        assert put_state(seqs.ctx, seq, kv_state.rebuilt(state))
        assert copy_state(seqs.ctx, seq) == state
    # a save a byte longer, or cut short, does not parse: it is never edited
    state = copy_state(seqs.ctx, 1)
    assert kv_state.rebuilt(state + b"\0") is None and kv_state.rebuilt(state[:-1]) is None


@pytest.mark.parametrize("kind", [KINDS[0], KINDS[1], KINDS[8]], indirect=True, ids=["llama-f16", "llama-f16-vt",
                                                                                     "qwen3-f16-q4_0"])
def test_joined_makes_a_save_llama_cpp_takes(kind):
    """The shifted reuse's edit on real saves: the moved cells saved, the span read, both joined
    into one sequence that llama.cpp takes and gives back byte for byte."""
    _, seqs, _, _ = kind
    seqs.decode(0, 0, 100)
    assert C.llama_memory_seq_rm(seqs.mem, 0, 20, 30)
    C.llama_memory_seq_add(seqs.mem, 0, 30, 100, -5)
    seqs.decode(0, 95, 1)
    assert C.llama_memory_seq_rm(seqs.mem, 0, 95, -1)
    moved = copy_state(seqs.ctx, 0)  # 0…19, 25…94
    assert C.llama_memory_seq_rm(seqs.mem, 0, 20, -1)
    seqs.decode(0, 20, 5)  # the new span
    merged = kv_state.joined(copy_state(seqs.ctx, 0), moved, 25, 95)
    assert merged is not None and kv_state.positions(merged) == list(range(95))
    assert kv_state.rebuilt(merged) == merged
    assert put_state(seqs.ctx, 0, merged) and copy_state(seqs.ctx, 0) == merged
    seqs.decode(0, 95, 3)  # and decodes after it


@pytest.mark.parametrize("kind", [KINDS[4], KINDS[5], KINDS[8]], indirect=True,
                         ids=["llama-q8_0-k", "llama-q8_0-q8_0", "qwen3-q4_0-v"])
def test_a_quantized_k_cache_is_not_shifted(kind):
    """llama.cpp 0.3.36 segfaults turning a quantized K cache's RoPE (a shifted reuse with cache_type_k
    q8_0 or q4_0 killed the worker); a quantized V alone shifts."""
    model, seqs, cache_types, _ = kind
    assert shiftable(model, seqs.ctx, cache_types[0]) == (cache_types[0] == "f16")


@pytest.mark.fast
def test_an_unknown_layout_is_said_once(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    monkeypatch.setattr(kv_state, "_unknown_said", False)
    with caplog.at_level(logging.WARNING, logger="localchat.engine"):
        assert not kv_state.known(b"\0" * 7) and not kv_state.known(b"\1" * 40)
    assert [r.getMessage() for r in caplog.records].count(
        "prompt cache: llama.cpp's sequence state has a layout this version does not know; "
        "moved blocks are read again") == 1
    assert kv_state.joined(b"\0" * 7, b"\0" * 7, 0, 1) is None and kv_state.rebuilt(b"\0" * 7) is None


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalEngine]:
    yield from tiny_engine(tmp_path_factory, n_ctx=2048, costs=True, parallel=1, n_threads=1)


def test_a_save_of_a_layout_not_known_is_read_instead_and_said_once(engine: LocalEngine,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    caplog: pytest.LogCaptureFixture):
    """Another llama.cpp's sequence state (here: every save a byte longer than this parse reads):
    a prompt that differs from the slot's but for spans is answered as a cold read would answer it,
    from the common prefix only (nothing moved), and the log says why once, however often."""
    a, b, n_head, _ = prompts()
    cold = run(engine, b)
    assert cold[3].cached_tokens < n_head
    real = kv_state._parse
    monkeypatch.setattr(kv_state, "_parse", lambda state: real(bytes(state) + b"\0"))
    monkeypatch.setattr(kv_state, "_unknown_said", False)
    with caplog.at_level(logging.INFO, logger="localchat.engine"):
        there = run(engine, a)
        back = run(engine, b)
    assert there[3].cached_tokens == back[3].cached_tokens == n_head  # the prefix; nothing moved
    messages = [r.getMessage() for r in caplog.records]
    assert sum(UNKNOWN in m for m in messages) == 1, messages
    assert not any("moved past" in m or "could not be put back" in m for m in messages), messages
    for i, (x, y) in enumerate(zip(cold[0], back[0])):  # b's answer: its cold one (up to a near-tie)
        assert abs(cold[1][i] - back[1][i]) < 1e-2 * max(1.0, abs(cold[1][i])), i
        if x != y:
            assert cold[2][i] < 2e-2, (i, cold[2][i])
            break
    monkeypatch.setattr(kv_state, "_parse", real)  # the layout known again: the cells move
    assert run(engine, a)[3].cached_tokens > n_head
