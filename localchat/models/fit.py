"""Sizes that fit the machine: the memory a model needs for a context and a number of slots (from
its GGUF header), the memory free for it, and the context and slots chosen when models.toml and the
command line leave them open.

Needed = the weights (every file of the model) + the KV cache (bytes per token of all layers ×
context × slots, in the cache's type: what llama.cpp allocates, to the byte) + llama.cpp's compute
buffers (logits, activations and attention mask of one 512-token batch: an upper bound) + the
worker process. Free = the RAM the OS says is available (psutil), or the
GPU's free memory, as llama.cpp reports it, for a model offloaded whole (`gpu_layers = -1`); 10% of
it is left to the rest of the machine. LOCALCHAT_FAKE_FREE_MEMORY ("2G", "300M", bytes) replaces
the free RAM: a testing aid."""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from typing import Any

from ..engine.params import N_BATCH as N_UBATCH, SWA_FULL  # the engine's: one batch's tokens; SWA layers whole
from ..errors import ModelTooLarge
from .gguf import ModelInfo, size_on_disk

MiB = 1 << 20
CACHE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32,
               "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32}  # bytes per element of a KV cache type
CACHE_TYPE = "f16"  # llama.cpp's default
KvCache = tuple[str, str]  # the K cache's type, the V cache's (models.toml's cache_type_k, cache_type_v)
F16: KvCache = (CACHE_TYPE, CACHE_TYPE)
SLOTS = 4  # slots wanted when `parallel` is not set
CACHE_CAP = 32768  # tokens of KV cache for all slots together when `context_length` is not set: 4 × 8192
MIN_CONTEXT = 4096  # the least context chosen (llama-server's --fit-ctx); a model trained on less gets its own
PREFERRED_CONTEXT = 8192  # the context is halved down to this before slots are given up
OVERHEAD = 128 * MiB  # the worker process, the server's copy of the vocabulary, allocator slack
HEADROOM = 0.10  # share of the free memory left to the rest of the machine
# llama.cpp's sliding-window patterns: every n-th layer is global, the others see the window
SWA_EVERY = {"gemma2": 2, "gemma3": 6, "cohere2": 4, "gpt-oss": 2, "exaone4": 4, "llama4": 4}


@dataclass(frozen=True)
class MemoryShape:
    """What the GGUF header says about memory."""

    weights: int  # bytes of every file of the model
    layers: tuple[tuple[int, int, bool], ...]  # per layer: K values per token, V values, sliding-window or not
    window: int  # the sliding window in tokens (0: none)
    n_vocab: int
    n_embd: int
    n_ff: int
    trained: int | None

    @classmethod
    def of(cls, info: ModelInfo) -> "MemoryShape":
        h = info.hparams
        n_layer = int(h.get("block_count") or 0)
        n_embd = int(h.get("embedding_length") or 0)
        heads = _per_layer(h.get("attention.head_count"), n_layer, 1)
        kv_heads = _per_layer(h.get("attention.head_count_kv"), n_layer, None)
        window = int(h.get("attention.sliding_window") or 0)
        swa = _sliding_layers(info.architecture, h.get("attention.sliding_window_pattern"), n_layer, window)
        layers = []
        for i in range(n_layer):
            head_dim = n_embd // max(heads[i], 1)
            k = int(h.get("attention.key_length") or head_dim)
            v = int(h.get("attention.value_length") or head_dim)
            n_kv = heads[i] if kv_heads[i] is None else kv_heads[i]
            layers.append((n_kv * k, n_kv * v, swa[i]))
        n_ff = max(_per_layer(h.get("feed_forward_length"), max(n_layer, 1), 0))
        return cls(size_on_disk(info.files), tuple(layers), window, info.n_vocab, n_embd, n_ff, info.context_length)

    def _bytes(self, cache: KvCache, windowed: bool) -> float:
        """Bytes per token of the layers kept whole (or of the sliding-window ones), K and V each in its type."""
        return sum(k * CACHE_BYTES[cache[0]] + v * CACHE_BYTES[cache[1]] for k, v, swa in self.layers
                   if (swa and not SWA_FULL) == windowed)

    def kv_per_token(self, cache: KvCache = F16) -> int:
        """Bytes of KV cache per token of context, sliding-window layers counted as the engine keeps them."""
        return int(self._bytes(cache, False))

    def kv_bytes(self, context: int, slots: int, cache: KvCache = F16) -> int:
        window_cells = min(context, -(-(self.window + N_UBATCH) // 256) * 256)  # llama.cpp's SWA cache size
        return int((self._bytes(cache, False) * context + self._bytes(cache, True) * window_cells) * slots)

    def compute_bytes(self, context: int, slots: int) -> int:
        """llama.cpp's compute buffer, bounded from above: one batch's logits (f32) with its
        activations, or its attention mask over a slot's context (f16; flash attention, llama.cpp's
        choice on CPU, CUDA and Metal, needs no more) with twice them, whichever is larger: the mask
        lives in the layers, the logits after them, so the buffer's peak holds one of the two (the
        0.5B's buffer is 300.8 MiB at 8k and at 32k: its logits; a tiny model's grows with the
        context: its mask); plus the output buffer (a row of logits per slot)."""
        activations = 4 * N_UBATCH * (4 * self.n_embd + self.n_ff)
        return 4 * slots * self.n_vocab + max(4 * N_UBATCH * self.n_vocab + activations,
                                              2 * N_UBATCH * context + 2 * activations)


def _per_layer(value: Any, n_layer: int, default: Any) -> list[Any]:
    if isinstance(value, list):
        return [int(v) for v in value[:n_layer]] + [default] * (n_layer - len(value))
    return [int(value) if value is not None else default] * n_layer


def _sliding_layers(arch: str, pattern: Any, n_layer: int, window: int) -> list[bool]:
    """Which layers attend through the sliding window: the GGUF's own per-layer pattern, else
    llama.cpp's pattern for the architecture (every n-th layer global, the others windowed)."""
    if not window:
        return [False] * n_layer
    if isinstance(pattern, list):
        return [bool(p) for p in pattern[:n_layer]] + [False] * (n_layer - len(pattern))
    every = int(pattern) if isinstance(pattern, int) and pattern > 0 else SWA_EVERY.get(arch, 0)
    return [bool(every) and i % every < every - 1 for i in range(n_layer)]


@dataclass(frozen=True)
class Need:
    weights: int
    kv: int
    compute: int
    overhead: int = OVERHEAD

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.compute + self.overhead


def need(shape: MemoryShape, context: int, slots: int, draft: MemoryShape | None = None,
         cache: KvCache = F16) -> Need:
    """With `draft`, a draft model's too (engine/drafting/draft_model.py): its weights, and its own context of as many
    slots of as many tokens (its cache f16), with its compute buffers."""
    own = Need(shape.weights, shape.kv_bytes(context, slots, cache), shape.compute_bytes(context, slots))
    if draft is None:
        return own
    return Need(own.weights + draft.weights, own.kv + draft.kv_bytes(context, slots),
                own.compute + draft.compute_bytes(context, slots))


@dataclass(frozen=True)
class Memory:
    free: int  # bytes
    where: str  # "RAM", "VRAM (CUDA0)", "RAM (LOCALCHAT_FAKE_FREE_MEMORY)"

    @property
    def budget(self) -> int:
        return int(self.free * (1 - HEADROOM))


def free_memory(gpu_layers: int = 0) -> Memory:
    fake = os.environ.get("LOCALCHAT_FAKE_FREE_MEMORY")
    if fake:
        return Memory(parse_bytes(fake), "RAM (LOCALCHAT_FAKE_FREE_MEMORY)")
    import psutil

    ram = Memory(psutil.virtual_memory().available, "RAM")
    gpu = _gpu_memory() if gpu_layers else None
    if gpu is None:
        return ram
    if gpu_layers < 0:  # the whole model on the GPU
        return gpu
    return Memory(ram.free + gpu.free, f"RAM + {gpu.where}")  # split: a rough sum of both


def _gpu_memory() -> Memory | None:
    """The first GPU llama.cpp sees and its free memory (ggml_backend_dev_memory); None on a CPU build."""
    import ctypes

    import llama_cpp as C
    from llama_cpp._ggml import libggml as g

    C.llama_backend_init()
    g.ggml_backend_dev_count.restype = ctypes.c_size_t
    g.ggml_backend_dev_get.restype, g.ggml_backend_dev_get.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    g.ggml_backend_dev_type.restype, g.ggml_backend_dev_type.argtypes = ctypes.c_int, [ctypes.c_void_p]
    g.ggml_backend_dev_name.restype, g.ggml_backend_dev_name.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
    g.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                          ctypes.POINTER(ctypes.c_size_t)]
    for i in range(g.ggml_backend_dev_count()):
        dev = g.ggml_backend_dev_get(i)
        if g.ggml_backend_dev_type(dev) in (1, 2):  # GGML_BACKEND_DEVICE_TYPE_GPU, _IGPU
            free, total = ctypes.c_size_t(), ctypes.c_size_t()
            g.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
            return Memory(free.value, f"VRAM ({g.ggml_backend_dev_name(dev).decode()})")
    return None


def parse_bytes(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"{text!r} is not a size: use bytes or a number with K, M, G or T")
    return int(float(m[1]) * 1024 ** " KMGT".index(m[2].upper() or " "))


def human(n: int) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**30 else f"{n / MiB:.0f} MB"


@dataclass(frozen=True)
class Sizing:
    context: int
    slots: int
    need: Need
    memory: Memory
    reason: str
    cache: KvCache = F16

    def describe(self) -> str:
        types = "" if self.cache == F16 else f" (K/V cache {self.cache[0]}/{self.cache[1]})"
        return f"{_slots(self.slots)} × {self.context} tokens{types}: {self.reason}"

    def as_dict(self) -> dict[str, Any]:
        return {"context_length": self.context, "slots": self.slots, "cache_type_k": self.cache[0],
                "cache_type_v": self.cache[1], "memory_needed_bytes": self.need.total,
                "memory_free_bytes": self.memory.free, "memory": self.memory.where, "need": asdict(self.need),
                "reason": self.reason}


def choose(shape: MemoryShape, memory: Memory, *, context: int | None = None, slots: int | None = None,
           draft: MemoryShape | None = None, cache: KvCache = F16) -> Sizing:
    """The context and slots a model gets (beside its draft model's, if it has one). Values given
    (models.toml, the command line) are kept, even past the free memory (the reason says so); the
    others are the largest that fit, tried in the order of `_candidates`. Raises ModelTooLarge when
    even the smallest does not fit."""
    free = f"{human(memory.budget)} of {memory.where} free to use"
    if context and slots:
        total = need(shape, context, slots, draft, cache).total
        over = f"; over the {free}: it may swap or fail" if total > memory.budget else ""
        return Sizing(context, slots, need(shape, context, slots, draft, cache), memory,
                      f"as set; needs {human(total)}{over}", cache)
    candidates = _candidates(shape.trained, context, slots)
    first = candidates[0]
    for ctx, n in candidates:
        n_need = need(shape, ctx, n, draft, cache)
        if n_need.total <= memory.budget:
            if (ctx, n) == first:
                default = f"the default (trained on {shape.trained or '?'} tokens; at most {CACHE_CAP} tokens of cache)"
                why = f"context as set, up to {SLOTS} slots" if context else \
                    f"slots as set, context {default}" if slots else default
            else:
                why = f"{_slots(first[1])} × {first[0]} tokens would need {human(need(shape, *first, draft, cache).total)}"
            return Sizing(ctx, n, n_need, memory, f"{why}; needs {human(n_need.total)} of {free}", cache)
    ctx, n = candidates[-1]
    raise ModelTooLarge(f"the model{' and its draft model' if draft else ''} need"
                        f"{'' if draft else 's'} {human(need(shape, ctx, n, draft, cache).total)} of memory with {_slots(n)} of {ctx} "
                        f"tokens, but {free} ({human(memory.free)} free, 10% kept for the rest of the machine); "
                        "free some memory, or set a smaller context_length or parallel in models.toml", param="model")


def largest_context(shape: MemoryShape, budget: int, slots: int = 1, cache: KvCache = F16) -> int:
    """The longest context (a multiple of 256, as llama.cpp pads it) whose memory fits `budget`
    bytes with `slots` slots and these cache types; 0 if none does."""
    low, high = 0, 1 << 22
    while high - low > 256:
        mid = (low + high) // 2 // 256 * 256
        low, high = (mid, high) if need(shape, mid, slots, cache=cache).total <= budget else (low, mid)
    return low


def _slots(n: int) -> str:
    return f"{n} slot{'s' if n != 1 else ''}"


def _candidates(trained: int | None, context: int | None, slots: int | None) -> list[tuple[int, int]]:
    """(context, slots), most wanted first: the context halved down to 8192, then fewer slots,
    then the context halved down to the minimum. A value given stays as it is."""
    trained = trained or PREFERRED_CONTEXT
    floor = min(trained, MIN_CONTEXT)
    counts = [slots] if slots else [SLOTS, 2, 1]
    ctx = context or max(min(trained, CACHE_CAP // counts[0] // 256 * 256), floor)  # llama.cpp pads to 256
    out: list[tuple[int, int]] = []
    for n in counts:
        low = floor if n == counts[-1] else min(PREFERRED_CONTEXT, trained)
        while True:
            out.append((ctx, n))
            if context or ctx // 2 < low:
                break
            ctx //= 2
    return out
