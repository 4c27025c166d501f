"""The embeddings use-case, for every protocol (OpenAI's `/v1/embeddings`, Ollama's `/api/embed`
and `/api/embeddings`): texts or token ids in, one L2-normalized vector per input out.

A model embeds when its GGUF declares a pooling type, or with `embedding = true` in models.toml
(mean pooling). Texts are tokenized as plain text, token ids checked against the vocabulary; an
input longer than one embedding takes (`MAX_TOKENS`) is cut when the request says `truncate`,
else refused by the engine. `dimensions` fewer than the model's are cut and normalized again
when the request says `shorten`; otherwise any other number than the model's is refused."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..engine.params import EMBED_BATCH
from ..errors import InvalidRequest
from ..models.host import LoadedModel
from .models import Models
from .tokens import check_vocabulary

MAX_TOKENS = EMBED_BATCH  # the longest input one embedding takes


@dataclass(frozen=True)
class EmbedRequest:
    inputs: Sequence[str | Sequence[int]]  # texts, or token ids
    model: str | None = None  # None: the default model
    keep_alive: float | None = None  # seconds the model stays loaded afterwards (negative: forever)
    truncate: bool = False  # cut inputs to MAX_TOKENS; False: a longer one is a 400
    dimensions: int | None = None  # None: the model's
    shorten: bool = False  # fewer dimensions than the model's: cut and normalize again (Ollama's); False: a 400


@dataclass(frozen=True)
class Embedding:
    model: str  # the model's registered name
    vectors: list[list[float]]  # one per input, in order
    prompt_tokens: int  # the tokens embedded
    ready: float  # time.perf_counter() once the model was loaded (Ollama's load_duration)


async def embed(models: Models, request: EmbedRequest) -> Embedding:
    async with models.hold(request.model, request.keep_alive) as loaded:
        if not loaded.can_embed:
            raise InvalidRequest(
                f"the model {loaded.spec.name} is not an embedding model: its GGUF declares no pooling type. "
                f"Set `embedding = true` under [models.{loaded.spec.name}] in models.toml to embed with it "
                "(mean pooling), or use an embedding model", param="model")
        ready = time.perf_counter()
        tokens = await asyncio.to_thread(_tokens, loaded, request.inputs, request.truncate)
        vectors = await loaded.engine.embed(tokens) if tokens else []
        name = loaded.spec.name
    if request.dimensions is not None and vectors:
        vectors = [_dimensions(v, request.dimensions, request.shorten) for v in vectors]
    return Embedding(name, vectors, sum(map(len, tokens)), ready)


def _tokens(loaded: LoadedModel, inputs: Sequence[str | Sequence[int]], truncate: bool) -> list[list[int]]:
    """Blocking: each input's tokens."""
    vocab = loaded.engine.tokenizer
    out = []
    for i, item in enumerate(inputs):
        if isinstance(item, str):
            tokens = vocab.tokenize([(item, True)])
        else:
            check_vocabulary(item, vocab, f"input[{i}]", f"input.{i}")
            tokens = list(item)
        out.append(tokens[:MAX_TOKENS] if truncate else tokens)
    return out


def _dimensions(vector: list[float], dimensions: int, shorten: bool) -> list[float]:
    if dimensions == len(vector):
        return vector
    if dimensions > len(vector) or not shorten:
        raise InvalidRequest(f"dimensions: this model's embeddings have {len(vector)} dimensions"
                             + ("" if shorten else " and cannot be shortened"), param="dimensions")
    cut = vector[:dimensions]
    norm = math.sqrt(sum(x * x for x in cut)) or 1.0
    return [x / norm for x in cut]
