"""One sequence's K/V cells as llama.cpp saves them (prompt_store.copy_state), and the one
edit a shifted reuse needs (matching.py's shifted_matches): the cells of one save followed by the cells
of another in a range of positions.

Why: llama.cpp reads a batch only at the sequence's last position + 1, so a new span cannot be
read in front of cells kept at later positions. The scheduler keeps the cells after the span
(moved to their new positions) in a save, reads the span, then puts both back as one sequence.

The layout (llama-context.cpp's state_seq_get_data: a magic number and the sequence's id, then
llama-kv-cache.cpp's state_write; llama-cpp-python 0.3.36): per cache (a sliding-window
model has two: refused here) the number of streams, then per stream its cell count, each cell's
position, seq id count (1) and seq id, then per layer the K rows, then the V rows (or, transposed,
per V row the cells' elements). A save that does not parse to its last byte is not edited: the
shifted reuse reads the moved cells again instead (`known`: said once per process). The parse is
pinned to llama.cpp's layout by tests/test_kv_state.py: saves of every kind of model the engine
shifts, parsed and put together again (`rebuilt`), equal byte for byte."""

from __future__ import annotations

import logging
import struct

_log = logging.getLogger("localchat.engine")
_unknown_said = False  # the log said once that this llama.cpp's saves have a layout not known here


class _Reader:
    def __init__(self, data: bytes | bytearray) -> None:
        self.data, self.at = memoryview(data), 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.at + n > len(self.data):
            raise ValueError("past the end")
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]


def _stream(r: _Reader) -> tuple[list[int], list[bytes], list[tuple[int, memoryview]]] | None:
    """One stream of one sequence's save: (the cells' positions, each cell's meta bytes, the data
    blocks as (bytes per cell, the block), a header being (0, its bytes)), or None for an empty stream."""
    count = r.u32()
    if count == 0:
        return None
    positions, metas = [], []
    for _ in range(count):
        meta = bytes(r.take(12))
        pos, n_seq, _seq = struct.unpack("<iIi", meta)
        if n_seq != 1:
            raise ValueError("a cell of several sequences")
        positions.append(pos)
        metas.append(meta)
    head = r.take(8)
    v_trans, n_layer = struct.unpack("<II", head)
    blocks: list[tuple[int, memoryview]] = [(0, head)]

    def rows(size: int) -> None:
        blocks.append((size, r.take(size * count)))

    for _ in range(n_layer):  # K: a row per cell
        header = r.take(12)
        blocks.append((0, header))
        rows(struct.unpack("<iQ", header)[1])
    for _ in range(n_layer):  # V: a row per cell, or per V row an element per cell
        header = r.take(12)
        blocks.append((0, header))
        if not v_trans:
            rows(struct.unpack("<iQ", header)[1])
        else:
            _type, size_el, n_embd = struct.unpack("<iII", header)
            for _ in range(n_embd):
                rows(size_el)
    return positions, metas, blocks


def _parse(state: bytes | bytearray) -> tuple[int, int, tuple] | None:
    """(stream count, the stream that holds cells, that stream) of a one-cache save; None where it
    is not that (a sliding-window model's two caches, cells in several streams, another layout)."""
    r = _Reader(state)
    r.take(8)  # llama_context's: a magic number, the sequence's id
    n_stream = r.u32()
    found = None
    for s in range(n_stream):
        got = _stream(r)
        if got is not None:
            if found is not None:
                return None
            found = (s, got)
    if r.at != len(state) or found is None:
        return None
    return n_stream, found[0], found[1]


def _parsed(state: bytes | bytearray) -> tuple[int, int, tuple] | None:
    try:
        return _parse(state)
    except (ValueError, struct.error):
        return None


def known(state: bytes | bytearray) -> bool:
    """Whether a save has the layout parsed here; the first that has not (another llama.cpp
    version's) is said in the log, once per process."""
    global _unknown_said
    if _parsed(state) is not None:
        return True
    if not _unknown_said:
        _unknown_said = True
        _log.warning("prompt cache: llama.cpp's sequence state has a layout this version does not know; "
                     "moved blocks are read again")
    return False


def _assemble(head: bytes | memoryview, n_stream: int, strm: int, metas: list, blocks: list) -> bytearray:
    """A save of one stream's cells: llama_context's head, the stream count, empty streams but
    `strm`, which holds the cells' meta bytes and then the data blocks (bytes or memoryviews)."""
    out: list[bytes | memoryview] = [bytes(head), struct.pack("<I", n_stream)]
    for s in range(n_stream):
        if s != strm:
            out.append(struct.pack("<I", 0))
            continue
        out.append(struct.pack("<I", len(metas)))
        out += metas
        out += blocks
    return bytearray(b"".join(out))


def rebuilt(state: bytes | bytearray) -> bytearray | None:
    """The save put together again from its parse (each cell's meta bytes from its position and
    sequence id); None where it does not parse. Equal to the save byte for byte where the parse
    reads llama.cpp's layout as it is (tests/test_kv_state.py)."""
    got = _parsed(state)
    if got is None:
        return None
    n_stream, strm, (cells, metas, blocks) = got
    seq = struct.unpack("<i", metas[0][8:12])[0]
    return _assemble(state[:8], n_stream, strm, [struct.pack("<iIi", pos, 1, seq) for pos in cells],
                     [block for _, block in blocks])


def positions(state: bytes | bytearray) -> list[int] | None:
    """The positions of a save's cells, in its order (None where it does not parse)."""
    got = _parsed(state)
    return None if got is None else list(got[2][0])


def _runs(indexes: list[int]) -> list[tuple[int, int]]:
    """Sorted indexes as (start, end) runs."""
    runs: list[tuple[int, int]] = []
    for i in indexes:
        if runs and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


def joined(first: bytes | bytearray, second: bytes | bytearray, start: int, end: int) -> bytearray | None:
    """A save holding the cells of `first`, then those of `second` at positions start…end - 1
    (all past `first`'s); None when either does not parse or they do not match (another stream,
    another layout)."""
    a, b = _parsed(first), _parsed(second)
    if a is None or b is None or a[:2] != b[:2]:
        return None
    n_stream, strm = a[0], a[1]
    (pa, ma, ba), (pb, mb, bb) = a[2], b[2]
    keep = [i for i, p in enumerate(pb) if start <= p < end]
    if not keep or max(pa) >= start or len(ba) != len(bb):
        return None
    runs = _runs(keep)
    blocks: list[bytes | memoryview] = []
    for (size_a, xa), (size_b, xb) in zip(ba, bb):
        if size_a != size_b or (size_a == 0 and bytes(xa) != bytes(xb)):
            return None
        blocks.append(xa)
        if size_a:
            blocks += [xb[start * size_b:end * size_b] for start, end in runs]
    return _assemble(first[:8], n_stream, strm, ma + [mb[i] for i in keep], blocks)
