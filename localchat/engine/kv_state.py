"""One sequence's K/V cells as llama.cpp saves them (prompt_store.copy_state), and the one
edit a shifted reuse needs (job.py's shifted_matches): the cells of one save followed by the cells
of another in a range of positions.

Why: llama.cpp reads a batch only at the sequence's last position + 1, so a new span cannot be
read in front of cells kept at later positions. The scheduler keeps the cells after the span
(moved to their new positions) in a save, reads the span, then puts both back as one sequence.

The layout (llama-context.cpp's state_seq_get_data: a magic number and the sequence's id, then
llama-kv-cache.cpp's state_write; llama-cpp-python 0.3.36): per cache (a sliding-window
model has two: refused here) the number of streams, then per stream its cell count, each cell's
position, seq id count (1) and seq id, then per layer the K rows, then the V rows (or, transposed,
per V row the cells' elements). A save that does not parse to its last byte is not edited."""

from __future__ import annotations

import struct


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
    try:
        a, b = _parse(first), _parse(second)
    except (ValueError, struct.error):
        return None
    if a is None or b is None or a[:2] != b[:2]:
        return None
    n_stream, strm = a[0], a[1]
    (pa, ma, ba), (pb, mb, bb) = a[2], b[2]
    keep = [i for i, p in enumerate(pb) if start <= p < end]
    if not keep or max(pa) >= start or len(ba) != len(bb):
        return None
    runs = _runs(keep)
    out: list[bytes | memoryview] = [bytes(first[:8]), struct.pack("<I", n_stream)]
    for s in range(n_stream):
        if s != strm:
            out.append(struct.pack("<I", 0))
            continue
        out.append(struct.pack("<I", len(pa) + len(keep)))
        out += ma
        out += [mb[i] for i in keep]
        for (size_a, xa), (size_b, xb) in zip(ba, bb):
            if size_a != size_b or (size_a == 0 and bytes(xa) != bytes(xb)):
                return None
            out.append(xa)
            if size_a:
                out += [xb[start * size_b:end * size_b] for start, end in runs]
    return bytearray(b"".join(out))
