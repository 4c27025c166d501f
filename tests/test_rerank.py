"""Reranking: `/v1/rerank` and `/rerank` with a tiny Qwen3-Reranker-shaped model (rank pooling,
a yes/no classifier head) and a tiny chat model with `rerank = true` (asked yes or no)."""

from __future__ import annotations

import httpx
import pytest

QUERY = "hello world"
DOCS = ["the sea", "hello", "a tool call", "value true", "the name of the world"]


def _rerank(http: httpx.Client, model: str, path: str = "/v1/rerank", **extra) -> dict:
    r = http.post(path, json={"model": model, "query": QUERY, "documents": DOCS, **extra})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("model", ["tiny-reranker", "tiny-judge"])
def test_scores_come_best_first_and_belong_to_their_documents(http: httpx.Client, model: str):
    body = _rerank(http, model)
    results = body["results"]
    assert sorted(r["index"] for r in results) == list(range(len(DOCS)))
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    assert all(0.0 <= s <= 1.0 for s in scores)  # both are softmaxes over (yes, no)
    assert len(set(scores)) > 1  # the documents are told apart
    assert body["model"] == model and body["usage"]["prompt_tokens"] > 0
    # each score is that document's own: ranking it alone gives the same score
    for r in results[:2]:
        alone = http.post("/rerank", json={"model": model, "query": QUERY, "documents": [DOCS[r["index"]]]}).json()
        assert alone["results"][0]["relevance_score"] == pytest.approx(r["relevance_score"], abs=1e-4)


def test_top_n_and_return_documents(http: httpx.Client):
    full = _rerank(http, "tiny-reranker")["results"]
    top = _rerank(http, "tiny-reranker", "/rerank", top_n=2, return_documents=True)["results"]
    assert [r["index"] for r in top] == [r["index"] for r in full[:2]]
    assert [r["document"]["text"] for r in top] == [DOCS[r["index"]] for r in top]
    assert "document" not in full[0]
    objects = http.post("/v1/rerank", json={"model": "tiny-reranker", "query": QUERY,
                                            "documents": [{"text": d} for d in DOCS], "top_n": 99}).json()
    assert [r["index"] for r in objects["results"]] == [r["index"] for r in full]


def test_a_model_that_cannot_rerank_is_a_400(http: httpx.Client):
    r = http.post("/v1/rerank", json={"model": "tiny-chatml", "query": QUERY, "documents": DOCS})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == "model" and "rerank = true" in error["message"]


@pytest.mark.parametrize("body, param", [
    ({"query": QUERY, "documents": []}, "documents"),
    ({"query": QUERY}, "documents"),
    ({"documents": DOCS}, "query"),
    ({"query": QUERY, "documents": DOCS, "top_n": 0}, "top_n"),
    ({"query": QUERY, "documents": ["ok", 5]}, "documents.1"),
])
def test_bad_requests_name_the_field(http: httpx.Client, body: dict, param: str):
    r = http.post("/v1/rerank", json={"model": "tiny-reranker", **body})
    assert r.status_code == 400 and r.json()["error"]["param"] == param


def test_a_reranker_does_not_embed(http: httpx.Client):
    r = http.post("/v1/embeddings", json={"model": "tiny-reranker", "input": "x"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "model"
