"""Text to a model's tokens and back, as llama-server's `/tokenize` and `/detokenize` do it, and
the one check that token ids a client sends are the model's (detokenize, embeddings of ids)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from ..engine.base import Tokenizer
from ..errors import InvalidRequest
from .models import Models


@dataclass(frozen=True)
class Tokenized:
    tokens: list[int]
    pieces: list[str] | None  # each token's text (invalid UTF-8 replaced), when asked for


def check_vocabulary(tokens: Sequence[int], vocab: Tokenizer, where: str, param: str) -> None:
    """Every id is one of the model's tokens (a 400 naming the first that is not)."""
    bad = next((t for t in tokens if not 0 <= t < vocab.n_vocab), None)
    if bad is not None:
        raise InvalidRequest(f"{where}: token {bad} is outside the vocabulary (0..{vocab.n_vocab - 1})", param=param)


async def tokenize(models: Models, model: str | None, text: str, *, add_special: bool = False,
                   parse_special: bool = True, pieces: bool = False) -> Tokenized:
    """The text's tokens (control tokens' texts read as those tokens with parse_special); with
    add_special, the model's BOS token first if it adds one."""
    async with models.hold(model) as loaded:
        vocab = loaded.engine.tokenizer

        def run() -> list[int]:
            tokens = vocab.tokenize_bytes(text.encode("utf-8", "replace"), parse_special=parse_special)
            return [vocab.bos, *tokens] if add_special and vocab.bos is not None else tokens

        tokens = await asyncio.to_thread(run)
    return Tokenized(tokens, await pieces_of(models, model, tokens) if pieces else None)


async def pieces_of(models: Models, model: str | None, tokens: list[int]) -> list[str]:
    """Each token's text (invalid UTF-8 replaced)."""
    async with models.hold(model) as loaded:
        vocab = loaded.engine.tokenizer
        # off the event loop: an upstream model's pieces are requests to its peer
        return await asyncio.to_thread(lambda: [vocab.piece(t).decode("utf-8", "replace") for t in tokens])


async def detokenize(models: Models, model: str | None, tokens: list[int]) -> str:
    """The tokens' text (invalid UTF-8 replaced); ids outside the vocabulary are a 400 (`tokens`)."""
    async with models.hold(model) as loaded:
        vocab = loaded.engine.tokenizer
        check_vocabulary(tokens, vocab, "tokens", "tokens")
        text = await asyncio.to_thread(lambda: b"".join(vocab.piece(t) for t in tokens))  # (an upstream's: requests)
        return text.decode("utf-8", "replace")
