"""The generation service's facade, as every protocol reaches it (generation/service.py `Chat`,
generation/models.py, embed.py, rerank.py, tokens.py), over the scripted engine (engine/fake.py):
no model runs. One embeddings path answers OpenAI's `/v1/embeddings` and Ollama's `/api/embed`
and `/api/embeddings` (the same vectors, the same refusals in each protocol's shape); reranking,
tokens, the models listed and described, loading by an empty request, LoRA scales."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from conftest import TINY_CTX
from localchat.api import create_app
from localchat.engine.fake import FakeEngine
from localchat.generation import Chat, ModelHost
from localchat.generation.embed import MAX_TOKENS
from localchat.models import ModelSpec, Registry, Settings

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def http(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    chatml = tiny_models["chatml"]
    lora = tmp_path_factory.mktemp("loras") / "lora.gguf"
    lora.write_bytes(b"")  # the scripted engine never reads it
    specs = [ModelSpec(name="chat", path=chatml, context_length=TINY_CTX),
             ModelSpec(name="embedder", path=tiny_models["embed"], context_length=TINY_CTX),  # the GGUF pools
             ModelSpec(name="meaned", path=chatml, context_length=TINY_CTX, embedding=True),  # models.toml's
             ModelSpec(name="judge", path=chatml, context_length=TINY_CTX, rerank=True),
             ModelSpec(name="adapted", path=chatml, context_length=TINY_CTX,
                       loras=[{"name": "one", "path": lora, "scale": 0.5}, {"name": "two", "path": lora, "scale": 0}])]
    registry = Registry({s.name: s for s in specs}, "chat", settings=Settings(worker=False))

    def engine(path: Path, *, n_ctx: int, parallel: int, name: str, **_: object) -> FakeEngine:
        return FakeEngine(lambda request, choice: ["Hi"], n_ctx=n_ctx, parallel=parallel, name=name)

    host = ModelHost(registry, engine=engine)
    with TestClient(create_app(Chat(host), webui=False), base_url="http://127.0.0.1",
                    client=("127.0.0.1", 50000)) as client:  # a loopback client, as the server wants
        yield client
    host.close()


def ok(r: Any) -> Any:
    assert r.status_code == 200, r.text
    return r.json()


def unit(v: list[float]) -> bool:
    return math.isclose(math.sqrt(sum(x * x for x in v)), 1.0, rel_tol=1e-9)


# -- embeddings: one path, two protocols -----------------------------------------------------------

def test_openai_and_ollama_embed_alike(http: TestClient):
    openai = ok(http.post("/v1/embeddings", json={"model": "embedder", "input": ["hi", "the sea"]}))
    assert openai["model"] == "embedder" and [d["index"] for d in openai["data"]] == [0, 1]
    vectors = [d["embedding"] for d in openai["data"]]
    assert vectors[0] != vectors[1] and all(unit(v) for v in vectors)
    assert openai["usage"] == {"prompt_tokens": 2 + 7, "total_tokens": 9}
    ids = ok(http.post("/v1/embeddings", json={"model": "embedder", "input": [[104, 105], [1]]}))
    assert ids["data"][0]["embedding"] == vectors[0] and ids["usage"]["prompt_tokens"] == 3  # "hi": bytes 104 105
    ollama = ok(http.post("/api/embed", json={"model": "embedder:latest", "input": ["hi", "the sea"]}))
    assert ollama["model"] == "embedder:latest" and ollama["embeddings"] == vectors
    assert ollama["prompt_eval_count"] == 9 and ollama["total_duration"] >= ollama["load_duration"] >= 0
    assert ok(http.post("/api/embeddings", json={"model": "embedder", "prompt": "hi"}))["embedding"] == vectors[0]
    one = ok(http.post("/v1/embeddings", json={"model": "embedder", "input": "hi", "encoding_format": "base64"}))
    assert isinstance(one["data"][0]["embedding"], str)


def test_a_model_embeds_by_its_gguf_or_by_models_toml(http: TestClient):
    assert ok(http.post("/v1/embeddings", json={"model": "meaned", "input": "hi"}))["data"][0]["embedding"]
    r = http.post("/v1/embeddings", json={"model": "chat", "input": "hi"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "model"
    assert "embedding = true" in r.json()["error"]["message"]
    r = http.post("/api/embed", json={"model": "chat", "input": "hi"})
    assert r.status_code == 400 and "embedding = true" in r.json()["error"]
    r = http.post("/v1/embeddings", json={"model": "nope", "input": "hi"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_token_ids_are_checked_against_the_vocabulary(http: TestClient):
    r = http.post("/v1/embeddings", json={"model": "embedder", "input": [[1, 2], [104, 256]]})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "input.1" and "token 256 is outside the vocabulary" in r.json()["error"]["message"]


def test_dimensions_openai_refuses_ollama_shortens(http: TestClient):
    n = len(ok(http.post("/v1/embeddings", json={"model": "embedder", "input": "hi"}))["data"][0]["embedding"])
    assert ok(http.post("/v1/embeddings", json={"model": "embedder", "input": "hi", "dimensions": n}))
    r = http.post("/v1/embeddings", json={"model": "embedder", "input": "hi", "dimensions": n - 1})
    assert r.status_code == 400 and r.json()["error"]["param"] == "dimensions"
    short = ok(http.post("/api/embed", json={"model": "embedder", "input": "hi", "dimensions": n - 1}))["embeddings"]
    assert len(short[0]) == n - 1 and unit(short[0])
    r = http.post("/api/embed", json={"model": "embedder", "input": "hi", "dimensions": n + 1})
    assert r.status_code == 400 and "dimensions" in r.json()["error"]


def test_ollama_truncates_unless_told_not_to(http: TestClient):
    long = "x" * (MAX_TOKENS + 10)
    assert ok(http.post("/api/embed", json={"model": "embedder", "input": long}))["prompt_eval_count"] == MAX_TOKENS
    whole = ok(http.post("/api/embed", json={"model": "embedder", "input": long, "truncate": False}))
    assert whole["prompt_eval_count"] == MAX_TOKENS + 10  # the scripted engine takes it; a real one refuses (400)
    empty = ok(http.post("/api/embed", json={"model": "embedder", "input": ""}))
    assert empty["embeddings"] == [] and empty["prompt_eval_count"] == 0
    assert ok(http.post("/api/embeddings", json={"model": "embedder"}))["embedding"] == []


# -- reranking, tokens ----------------------------------------------------------------------------

def test_rerank_through_the_service(http: TestClient):
    body = ok(http.post("/v1/rerank", json={"model": "judge", "query": "sea", "top_n": 2, "return_documents": True,
                                            "documents": ["a", "a longer document", {"text": "mid one"}]}))
    assert [r["index"] for r in body["results"]] == [1, 2]  # the scripted engine: longer prompts score higher
    assert body["results"][0]["document"] == {"text": "a longer document"} and body["usage"]["prompt_tokens"] > 0
    r = http.post("/rerank", json={"model": "chat", "query": "q", "documents": ["d"]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "model"


def test_tokenize_and_detokenize(http: TestClient):
    assert ok(http.post("/tokenize", json={"model": "chat", "content": "hi"})) == {"tokens": [104, 105]}
    pieces = ok(http.post("/tokenize", json={"model": "chat", "content": "hi", "with_pieces": True}))
    assert pieces == {"tokens": [{"id": 104, "piece": "h"}, {"id": 105, "piece": "i"}]}
    assert ok(http.post("/detokenize", json={"model": "chat", "tokens": [104, 105]})) == {"content": "hi"}
    r = http.post("/detokenize", json={"model": "chat", "tokens": [104, 999]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tokens" and "999" in r.json()["error"]["message"]


# -- the models: listed, described, loaded, LoRA scales -------------------------------------------

def test_the_models_listed_and_described(http: TestClient):
    cards = {c["id"]: c for c in ok(http.get("/v1/models"))["data"]}
    assert set(cards) == {"chat", "embedder", "meaned", "judge", "adapted"}
    assert cards["chat"]["default"] and not cards["embedder"]["default"]
    assert cards["embedder"]["capabilities"] == ["embedding"] and cards["chat"]["context_length"] == TINY_CTX
    assert {m["name"] for m in ok(http.get("/api/tags"))["models"]} == set(cards)
    assert ok(http.post("/api/show", json={"model": "embedder:latest"}))["capabilities"] == ["embedding"]
    r = http.post("/api/show", json={"model": "nope"})
    assert r.status_code == 404 and isinstance(r.json()["error"], str)
    health = ok(http.get("/health"))
    assert {m["name"] for m in health["models"]} == set(cards) and health["loads"] >= 0
    props = ok(http.get("/props", params={"model": "chat"}))
    assert props["model_alias"] == "chat" and props["default_generation_settings"]["n_ctx"] == TINY_CTX


def test_an_empty_ollama_request_loads_and_unloads(http: TestClient):
    assert ok(http.post("/api/generate", json={"model": "judge"}))["done_reason"] == "load"
    assert "judge" in [m["name"] for m in ok(http.get("/api/ps"))["models"]]
    health = ok(http.get("/health"))
    assert "judge" in [m["name"] for m in health["loaded"]]
    assert next(m for m in health["models"] if m["name"] == "judge")["loaded"]
    assert ok(http.post("/api/chat", json={"model": "judge", "keep_alive": 0}))["done_reason"] == "unload"
    for _ in range(100):  # unloaded once idle, by a task of the event loop
        if "judge" not in [m["name"] for m in ok(http.get("/api/ps"))["models"]]:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("keep_alive 0 did not unload the model")
    assert ok(http.post("/api/generate", json={"model": "judge", "keep_alive": 0}))["done_reason"] == "unload"
    assert "judge" not in [m["name"] for m in ok(http.get("/api/ps"))["models"]]  # nothing was loaded to unload


def test_lora_scales(http: TestClient):
    listed = ok(http.get("/lora-adapters", params={"model": "adapted"}))
    assert [(a["id"], a["name"], a["scale"]) for a in listed] == [(0, "one", 0.5), (1, "two", 0.0)]
    assert ok(http.post("/lora-adapters?model=adapted", json=[{"id": 1, "scale": 0.25}])) == {"success": True}
    listed = ok(http.get("/lora-adapters", params={"model": "adapted"}))
    assert [a["scale"] for a in listed] == [0.0, 0.25]  # an adapter not listed gets 0
    r = http.post("/lora-adapters?model=adapted", json=[{"name": "three", "scale": 1}])
    assert r.status_code == 400 and r.json()["error"]["param"] == "body.0"
    assert ok(http.get("/lora-adapters")) == []  # the default model has none
