"""A scripted engine, for fast tests of everything above the engine (splitting, framing, the
protocols): it plays back the text a script gives for each request, as the real engines emit
it — Started, Text events, each choice's Done — with a byte tokenizer, no model and no thread.
Each piece counts as one generated token (for max_tokens and the loop detector, where the same
piece is the same token).

    FakeEngine(lambda request, choice: ["Hello", " world"])
    ModelHost(registry, engine=fake_factory(script))  # every model of the registry plays it"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import ContextOverflow
from .base import Emit, Stream
from .params import Done, Generate, Started, Text
from .repetition import detector

Script = Callable[[Generate, int], Iterable[str]]  # (request, choice index) → the pieces of text it generates


class ByteTokenizer:
    """Every UTF-8 byte is a token; the given special strings (control tokens) have their own."""

    def __init__(self, specials: Iterable[str] = ()) -> None:
        self.specials = list(dict.fromkeys(specials))
        self.n_vocab = 256 + len(self.specials)
        self.bos: int | None = None
        self.fim: dict[str, int] = {}
        self._split = re.compile("(" + "|".join(map(re.escape, self.specials)) + ")") if self.specials else None

    def tokenize(self, segments: Iterable[tuple[str, bool]]) -> list[int]:
        return [t for text, plain in segments for t in self.tokenize_bytes(text.encode(), parse_special=not plain)]

    def tokenize_bytes(self, data: bytes, parse_special: bool) -> list[int]:
        if not parse_special or self._split is None:
            return list(data)
        out: list[int] = []
        for k, part in enumerate(self._split.split(data.decode("utf-8", "replace"))):
            out += [256 + self.specials.index(part)] if k % 2 else list(part.encode())
        return out

    def token_id(self, text: str) -> int | None:
        return 256 + self.specials.index(text) if text in self.specials else None

    def piece(self, token: int) -> bytes:
        return bytes([token]) if token < 256 else self.specials[token - 256].encode()


class FakeEngine:
    def __init__(self, script: Script, *, n_ctx: int = 4096, parallel: int = 4, specials: Iterable[str] = (),
                 delay: float = 0.0, **_: Any) -> None:
        self.script, self.delay = script, delay
        self.tokenizer = ByteTokenizer(specials)
        self.n_ctx, self.parallel, self.n_adapters = n_ctx, parallel, 0
        self.requests: list[Generate] = []  # every request submitted, for tests to look at
        self._busy = 0

    def check_fits(self, tokens: list[int]) -> None:
        if len(tokens) >= self.n_ctx:
            raise ContextOverflow(f"prompt is too long: {len(tokens)} tokens > {self.n_ctx} maximum", field="messages")

    def submit(self, request: Generate) -> Stream:
        self.check_fits(request.tokens)
        self.requests.append(request)
        return Stream(self._start, self._cancel, request)

    def _start(self, request: Generate, emit: Emit) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(self._play(request, emit))

    def _cancel(self, task: asyncio.Task[None]) -> None:
        task.cancel()

    async def _play(self, request: Generate, emit: Emit) -> None:
        self._busy += request.n
        try:
            emit(Started())
            for i in range(request.n):
                budget, made, reason, why = request.params.max_tokens or self.n_ctx, 0, "stop", None
                loop, ids = detector(request.params.repetition_stop), {}  # a piece is a token
                for piece in self.script(request, i):
                    if made >= budget:
                        reason = "length"
                        break
                    await asyncio.sleep(self.delay)
                    made += 1
                    emit(Text(piece, i, (), made))
                    if loop is not None and loop.push(ids.setdefault(piece, len(ids))):
                        reason, why = "length", "repetition"
                        break
                emit(Done(reason, len(request.tokens), made, 0, i, None, why))
            emit(None)
        finally:
            self._busy -= request.n

    async def embed(self, inputs: list[list[int]]) -> list[list[float]]:
        vectors = []
        for tokens in inputs:
            digest = hashlib.sha256(bytes(t % 256 for t in tokens)).digest()
            raw = [b - 127.5 for b in digest[:8]]
            norm = sum(x * x for x in raw) ** 0.5 or 1.0
            vectors.append([x / norm for x in raw])
        return vectors

    async def rerank(self, prompts: list[list[int]], judge: tuple[int, int] | None = None) -> list[float]:
        return [len(p) / (len(p) + 1) for p in prompts]  # longer pairs rank higher: enough for ordering tests

    def stats(self) -> dict[str, Any]:
        return {"slots": self.parallel, "busy": self._busy, "queued": 0, "n_ctx": self.n_ctx, "bytes": 0,
                "worker": None}

    def close(self) -> None:
        pass


def fake_factory(script: Script, **options: Any) -> Callable[..., FakeEngine]:
    """An engine factory for ModelHost: every model it loads plays `script`."""
    def make(path: Any, *, n_ctx: int, parallel: int, **_: Any) -> FakeEngine:
        return FakeEngine(script, n_ctx=n_ctx, parallel=parallel, **options)
    return make
