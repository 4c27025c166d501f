"""Read a GGUF file's metadata (not its tensors) quickly, and what it says about the model.

gguf.GGUFReader parses every tensor and array element into numpy views, which takes seconds
for a 262k-token vocabulary; here the header is walked once with `struct`, using the gguf
package's own format constants.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from gguf import GGUF_MAGIC, GGUFValueType, LlamaFileType

from ..errors import ModelUnavailable

_SCALARS = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d",
}
# Large numeric arrays (scores, token types, merges' siblings) are skipped, not decoded; kept:
# token types, and the per-layer hyperparameters some models give as arrays (one value a layer).
_KEEP_NUMERIC_ARRAYS = ("tokenizer.ggml.token_type",)
_KEEP_PER_LAYER = (".attention.head_count_kv", ".attention.head_count", ".attention.sliding_window_pattern",
                   ".feed_forward_length")
SPLIT = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
RANK_POOLING = 4  # llama.cpp's LLAMA_POOLING_TYPE_RANK: a reranker's classifier head
# The fill-in-the-middle tokens as llama.cpp's vocabulary finds them (llama-vocab.cpp): the id a
# `tokenizer.ggml.*` key gives (the current key, then the deprecated one), else a token with one of these texts.
FIM_TOKENS = {
    "pre": (("fim_pre_token_id", "prefix_token_id"), ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>",
                                                     "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>")),
    "suf": (("fim_suf_token_id", "suffix_token_id"), ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>",
                                                     "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>")),
    "mid": (("fim_mid_token_id", "middle_token_id"), ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>",
                                                     "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>")),
}


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
        if key not in _KEEP_NUMERIC_ARRAYS and not (key.endswith(_KEEP_PER_LAYER) and count <= 4096):
            f.seek(size * count, 1)
            return None
        return list(struct.unpack(f"<{count}{fmt[1]}", f.read(size * count)))
    raise ValueError(f"unknown GGUF value type {vtype}")


@dataclass(frozen=True)
class ModelInfo:
    """What the GGUF file says about itself."""

    architecture: str
    context_length: int | None
    chat_template: str | None
    bos_token: str
    eos_token: str
    tokens: frozenset[str]  # control and user-defined tokens only
    name: str | None = None
    parameters: int = 0
    quantization: str = "unknown"
    pooling_type: int | None = None  # declared by embedding models (1 mean, 2 cls, 3 last) and rerankers (4 rank)
    rerank_template: str | None = None  # a reranker's prompt, with {query} and {document}
    n_vocab: int = 0
    fim: bool = False  # the vocabulary has fill-in-the-middle tokens (prefix, suffix, middle), as llama.cpp finds them
    hparams: dict[str, Any] = field(default_factory=dict, compare=False)  # the `ARCH.*` keys, prefix removed
    files: tuple[Path, ...] = ()  # the file and, for a split GGUF, every part (llama.cpp loads them from the first)


def inspect(path: Path) -> ModelInfo:
    try:
        meta = read_metadata(path)
    except (OSError, NotGGUF) as exc:
        raise ModelUnavailable(str(exc)) from exc
    arch = str(meta.get("general.architecture", "unknown"))
    tokens: list[str] = meta.get("tokenizer.ggml.tokens") or []
    types: list[int] = meta.get("tokenizer.ggml.token_type") or []

    def token(key: str) -> str:
        i = meta.get(key)
        return tokens[i] if isinstance(i, int) and 0 <= i < len(tokens) else ""

    files = split_parts(path, meta.get("split.count"))
    parameters = meta.get("GGUF.parameter_count", 0)
    for part in files[1:]:  # the other parts of a split model hold the rest of the tensors
        try:
            parameters += read_metadata(part).get("GGUF.parameter_count", 0)
        except (OSError, NotGGUF):
            pass
    return ModelInfo(
        architecture=arch,
        context_length=meta.get(f"{arch}.context_length"),
        chat_template=meta.get("tokenizer.chat_template"),
        bos_token=token("tokenizer.ggml.bos_token_id"),
        eos_token=token("tokenizer.ggml.eos_token_id"),
        tokens=frozenset(t for t, kind in zip(tokens, types) if kind in (3, 4)),  # CONTROL, USER_DEFINED
        name=meta.get("general.name"),
        parameters=parameters,
        quantization=_quantization(meta.get("general.file_type")),
        pooling_type=meta.get(f"{arch}.pooling_type") or None,
        rerank_template=meta.get("tokenizer.chat_template.rerank"),
        n_vocab=len(tokens),
        fim=_has_fim(meta, tokens),
        hparams={k[len(arch) + 1:]: v for k, v in meta.items() if k.startswith(arch + ".")},
        files=files,
    )


def _has_fim(meta: dict[str, Any], tokens: list[str]) -> bool:
    """Whether llama.cpp will find the prefix, suffix and middle tokens /infill needs."""
    texts: set[str] | None = None
    for keys, names in FIM_TOKENS.values():
        if any(isinstance(i := meta.get(f"tokenizer.ggml.{k}"), int) and 0 <= i < len(tokens) for k in keys):
            continue
        texts = set(tokens) if texts is None else texts
        if not any(name in texts for name in names):
            return False
    return True


def split_parts(path: Path, count: Any = None) -> tuple[Path, ...]:
    """A GGUF's files: itself, or all N parts of a split model named `…-00001-of-0000N.gguf`."""
    m = SPLIT.match(path.name)
    if not m or int(m["count"]) <= 1:
        return (path,)
    n = int(m["count"]) if not isinstance(count, int) or count <= 1 else count
    return tuple(path.with_name(f"{m['prefix']}-{i:05d}-of-{n:05d}.gguf") for i in range(1, n + 1))


def size_on_disk(files: tuple[Path, ...]) -> int:
    """Bytes of all the files that exist (a split model's weights are in all its parts)."""
    return sum(f.stat().st_size for f in files if f.is_file())


def _quantization(file_type: int | None) -> str:
    try:
        return LlamaFileType(file_type).name.removeprefix("MOSTLY_") if file_type is not None else "unknown"
    except ValueError:
        return f"type {file_type}"


@dataclass(frozen=True)
class ProjectorInfo:
    """What a multimodal projector (mmproj GGUF) reads: images, audio."""

    vision: bool
    audio: bool


def inspect_projector(path: Path) -> ProjectorInfo:
    try:
        meta = read_metadata(path)
    except (OSError, NotGGUF) as exc:
        raise ModelUnavailable(f"the projector (mmproj) {path} cannot be read: {exc}") from exc
    if not any(k.startswith("clip.") for k in meta):
        raise ModelUnavailable(f"{path} is not a multimodal projector (mmproj) GGUF: it has no clip.* keys")
    return ProjectorInfo(vision=bool(meta.get("clip.has_vision_encoder")), audio=bool(meta.get("clip.has_audio_encoder")))

