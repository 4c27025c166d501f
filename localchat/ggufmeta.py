"""Read a GGUF file's metadata (not its tensors) quickly.

gguf.GGUFReader parses every tensor and array element into numpy views, which takes seconds
for a 262k-token vocabulary; here the header is walked once with `struct`, using the gguf
package's own format constants.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

from gguf import GGUF_MAGIC, GGUFValueType

_SCALARS = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d",
}
# Large numeric arrays (scores, token types, merges' siblings) are skipped, not decoded.
_KEEP_NUMERIC_ARRAYS = ("tokenizer.ggml.token_type",)


class NotGGUF(ValueError):
    pass


def read_metadata(path: Path) -> dict[str, Any]:
    """All key/value pairs of a GGUF file; raises NotGGUF for anything else."""
    try:
        with open(path, "rb") as f:
            if _unpack(f, "<I") != GGUF_MAGIC:
                raise NotGGUF(f"{path} is not a GGUF file (bad magic number)")
            version = _unpack(f, "<I")
            if version not in (2, 3):
                raise NotGGUF(f"{path}: unsupported GGUF version {version}")
            n_tensors = _unpack(f, "<Q")
            n_kv = _unpack(f, "<Q")
            meta: dict[str, Any] = {"GGUF.version": version}
            for _ in range(n_kv):
                key = _string(f)
                meta[key] = _value(f, GGUFValueType(_unpack(f, "<I")), key)
            meta["GGUF.tensor_count"] = n_tensors
            meta["GGUF.parameter_count"] = _parameter_count(f, n_tensors)
            return meta
    except (struct.error, ValueError, UnicodeDecodeError, MemoryError) as exc:
        if isinstance(exc, NotGGUF):
            raise
        raise NotGGUF(f"{path} is not a readable GGUF file: {exc}") from exc


def _parameter_count(f: BinaryIO, n_tensors: int) -> int:
    """Sum of the tensors' element counts, from the tensor infos that follow the metadata."""
    total = 0
    for _ in range(n_tensors):
        _string(f)  # name
        n_dims = _unpack(f, "<I")
        count = 1
        for _ in range(n_dims):
            count *= _unpack(f, "<Q")
        _unpack(f, "<I")  # type
        _unpack(f, "<Q")  # offset
        total += count
    return total


def _unpack(f: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise ValueError("the file ends inside its header")
    return struct.unpack(fmt, data)[0]


def _string(f: BinaryIO) -> str:
    n = _unpack(f, "<Q")
    if n > 1 << 26:
        raise ValueError("implausible string length in its header")
    return f.read(n).decode("utf-8", errors="replace")


def _value(f: BinaryIO, vtype: GGUFValueType, key: str) -> Any:
    if vtype == GGUFValueType.STRING:
        return _string(f)
    if vtype in _SCALARS:
        return _unpack(f, _SCALARS[vtype])
    if vtype == GGUFValueType.ARRAY:
        itype = GGUFValueType(_unpack(f, "<I"))
        count = _unpack(f, "<Q")
        if itype == GGUFValueType.STRING:
            return [_string(f) for _ in range(count)]
        fmt = _SCALARS[itype]
        size = struct.calcsize(fmt)
        if key not in _KEEP_NUMERIC_ARRAYS:
            f.seek(size * count, 1)
            return None
        return list(struct.unpack(f"<{count}{fmt[1]}", f.read(size * count)))
    raise ValueError(f"unknown GGUF value type {vtype}")
