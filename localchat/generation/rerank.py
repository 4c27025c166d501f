"""The rerank use-case: a query and documents in, the documents' relevance scores out, best first.

A GGUF with rank pooling (a classifier head) scores each (query, document) prompt as llama-server
does: its own `rerank` prompt template when it has one, else the pair framed with its special
tokens. A model with `rerank = true` in models.toml and no classifier head is asked, in its own
chat template, whether the document meets the query (Qwen3-Reranker's question); the score is
P(yes) against P(no) for its answer's first token."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ..errors import InvalidRequest
from ..families import render_prompt
from ..models.host import RANK_POOLING, LoadedModel
from .models import Models

JUDGE_SYSTEM = ('Judge whether the Document meets the requirements based on the Query and the Instruct provided. '
                'Note that the answer can only be "yes" or "no".')
JUDGE_TASK = "Given a web search query, retrieve relevant passages that answer the query"


@dataclass(frozen=True)
class RerankRequest:
    query: str
    documents: list[str]
    model: str | None = None
    top_n: int | None = None  # None: every document


@dataclass(frozen=True)
class Ranked:
    index: int  # the document's place in the request
    score: float


@dataclass(frozen=True)
class Ranking:
    model: str
    results: list[Ranked]  # best first, at most top_n
    prompt_tokens: int


async def rerank(models: Models, request: RerankRequest) -> Ranking:
    async with models.hold(request.model) as loaded:
        if not loaded.can_rerank:
            raise InvalidRequest(
                f"the model {loaded.spec.name} cannot rerank: its GGUF has no rank pooling (a reranker's classifier "
                f"head). Use a reranker, or set `rerank = true` under [models.{loaded.spec.name}] in models.toml to "
                "score documents by asking the model", param="model")
        prompts, judge = await asyncio.to_thread(_prompts, loaded, request.query, request.documents)
        scores = await loaded.engine.rerank(prompts, judge)
    order = sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)[: request.top_n]
    return Ranking(loaded.spec.name, [Ranked(i, scores[i]) for i in order], sum(map(len, prompts)))


def _prompts(loaded: LoadedModel, query: str, documents: list[str]) -> tuple[list[list[int]], tuple[int, int] | None]:
    """Blocking: one prompt per document, and the judge's (yes, no) token ids when the model is asked."""
    if loaded.info.pooling_type == RANK_POOLING:
        return [_ranked(loaded, query, d) for d in documents], None
    model = loaded.engine.tokenizer
    yes, no = (model.tokenize_bytes(word, parse_special=False)[:1] for word in (b"yes", b"no"))
    if not yes or not no or yes == no:
        raise InvalidRequest(f"the model {loaded.spec.name} cannot say yes or no in one token; it cannot rerank",
                             param="model")
    return [_judged(loaded, query, d) for d in documents], (yes[0], no[0])


def _ranked(loaded: LoadedModel, query: str, document: str) -> list[int]:
    """A reranker's prompt: its template's own text may hold special tokens, the query and
    document never do."""
    model = loaded.engine.tokenizer

    def plain(text: str) -> list[int]:
        return model.tokenize_bytes(text.encode("utf-8", "replace"), parse_special=False)

    template = loaded.info.rerank_template
    if not template:
        return model.pair(plain(query), plain(document))
    tokens: list[int] = []
    for i, part in enumerate(template.replace("{document}", "\x00d").replace("{query}", "\x00q").split("\x00")):
        if i:
            tokens += plain(query if part[0] == "q" else document)
            part = part[1:]
        tokens += model.tokenize_bytes(part.encode(), parse_special=True) if part else []
    return tokens


def _judged(loaded: LoadedModel, query: str, document: str) -> list[int]:
    """The judge's question in the model's chat template, its answer about to begin."""
    user = f"<Instruct>: {JUDGE_TASK}\n<Query>: {query}\n<Document>: {document}"
    prompt = render_prompt(loaded.template, [{"role": "system", "content": JUDGE_SYSTEM},
                                             {"role": "user", "content": user}],
                           bos_token=loaded.bos_token, eos_token=loaded.eos_token)
    segments = list(prompt.segments)
    think = loaded.family.reasoning
    if think and prompt.text.rstrip().endswith(think[0]):  # a thinking model: an empty thought, then the answer
        segments.append(("\n" if prompt.text.endswith("\n") else "\n\n") + think[1] + "\n\n", False)
    return loaded.engine.tokenizer.tokenize(segments)
