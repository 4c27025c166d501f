"""Editor routes: OpenAI completions with fill-in-the-middle, llama.cpp's /infill, /props,
/tokenize, /detokenize, and embeddings — real server, official openai SDK, tiny models with
FIM tokens and with a pooling type."""

from __future__ import annotations

import base64
import json
import re
import threading
import time

import httpx
import numpy as np
import openai

from conftest import GEMMA, Server

PREFIX, SUFFIX = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"


def plain_tokens(http: httpx.Client, text: str, model: str = "tiny-coder") -> list[int]:
    r = http.post("/tokenize", json={"model": model, "content": text, "parse_special": False})
    assert r.status_code == 200
    return r.json()["tokens"]


def test_fill_in_the_middle_through_the_openai_sdk(client: openai.OpenAI, http: httpx.Client):
    r = client.completions.create(model="tiny-coder", prompt=PREFIX, suffix=SUFFIX, max_tokens=8, seed=3,
                                  temperature=0.5)
    assert r.object == "text_completion" and r.id.startswith("cmpl-")
    assert isinstance(r.choices[0].text, str) and r.choices[0].finish_reason in ("stop", "length")
    # the prompt is [FIM_PRE] prefix [FIM_SUF] suffix [FIM_MID]: three tokens around the two texts
    assert r.usage.prompt_tokens == len(plain_tokens(http, PREFIX)) + len(plain_tokens(http, SUFFIX)) + 3
    plain = client.completions.create(model="tiny-coder", prompt=PREFIX, max_tokens=8, seed=3, temperature=0.5)
    assert plain.usage.prompt_tokens == len(plain_tokens(http, PREFIX))


def test_fill_in_the_middle_streamed(client: openai.OpenAI):
    stream = client.completions.create(model="tiny-coder", prompt=PREFIX, suffix=SUFFIX, max_tokens=6, seed=4,
                                       stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"] and chunks[-1].usage.completion_tokens == 6
    assert isinstance(text, str)


def test_suffix_on_a_model_without_fim_tokens_is_a_400(http: httpx.Client):
    r = http.post("/v1/completions", json={"model": GEMMA, "prompt": "x", "suffix": "y", "max_tokens": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "suffix"
    assert "fill-in-the-middle" in r.json()["error"]["message"]


def test_prompts_n_echo_and_legacy_logprobs(client: openai.OpenAI):
    r = client.completions.create(model=GEMMA, prompt=["The sea is", "A cat is"], n=2, max_tokens=4, seed=5,
                                  echo=True, logprobs=2, extra_body={"ignore_eos": True})
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert all(c.text.startswith("The sea is") for c in r.choices[:2])
    assert all(c.text.startswith("A cat is") for c in r.choices[2:])
    for c in r.choices:
        lp = c.logprobs
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 4
        assert all(x <= 0 for x in lp.token_logprobs) and all(len(t) == 2 for t in lp.top_logprobs)
        assert c.text.endswith("".join(lp.tokens))
    assert r.usage.completion_tokens == 16


def test_a_completion_is_answered_while_a_chat_streams(server: Server):
    """An editor's completion does not wait for a long chat to finish."""
    first_chat_token, chat_done = threading.Event(), threading.Event()

    def chat() -> None:
        body = {"model": GEMMA, "messages": [{"role": "user", "content": "A long story."}], "max_tokens": 300,
                "ignore_eos": True, "stream": True}
        with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=120) as r:
            for line in r.iter_lines():
                if '"content":"' in line and '"content":""' not in line:
                    first_chat_token.set()
        chat_done.set()

    t = threading.Thread(target=chat)
    t.start()
    try:
        assert first_chat_token.wait(60)
        with httpx.stream("POST", server.url + "/v1/completions", timeout=60, json={
                "model": GEMMA, "prompt": "def f(x):", "max_tokens": 4, "stream": True, "ignore_eos": True}) as r:
            got_token = any(line.startswith("data: {") and '"text":""' not in line for line in r.iter_lines())
        assert got_token and not chat_done.is_set(), "the completion waited for the chat"
    finally:
        t.join(120)


def test_infill_with_extra_files_reuses_the_prompt_cache(http: httpx.Client):
    body = {"model": "tiny-coder", "input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 4, "seed": 1,
            "input_extra": [{"filename": "util.py", "text": "def sub(a, b):\n    return a - b\n" * 5}]}
    first = http.post("/infill", json=body)
    assert first.status_code == 200
    a = first.json()
    assert a["stop"] is True and isinstance(a["content"], str) and a["tokens_evaluated"] > 40
    again = http.post("/infill", json={**body, "input_prefix": PREFIX + "a"}).json()
    assert again["tokens_cached"] > 30 and again["timings"]["cache_n"] == again["tokens_cached"]


def test_infill_streamed_and_warm_up(http: httpx.Client):
    with http.stream("POST", "/infill", json={"model": "tiny-coder", "input_prefix": PREFIX, "input_suffix": SUFFIX,
                                              "n_predict": 3, "stream": True, "seed": 2}) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1]["stop"] is True and all(e["stop"] is False for e in events[:-1])
    start = time.monotonic()
    warm = http.post("/infill", json={"model": "tiny-coder", "input_prefix": PREFIX * 20, "n_predict": 0})
    assert warm.status_code == 200 and warm.json()["content"] == "" and warm.json()["tokens_predicted"] == 0
    assert time.monotonic() - start < 30


def test_infill_on_a_model_without_fim_tokens(http: httpx.Client):
    r = http.post("/infill", json={"model": GEMMA, "input_prefix": "a", "input_suffix": "b"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "suffix"


def test_props_tokenize_detokenize(http: httpx.Client):
    props = http.get("/props", params={"model": GEMMA}).json()
    assert props["total_slots"] == 4 and props["default_generation_settings"]["n_ctx"] == 8192
    assert props["model_alias"] == GEMMA
    tokens = http.post("/tokenize", json={"model": GEMMA, "content": "Hello world"}).json()["tokens"]
    assert tokens and all(isinstance(t, int) for t in tokens)
    assert http.post("/detokenize", json={"model": GEMMA, "tokens": tokens}).json()["content"] == "Hello world"
    pieces = http.post("/tokenize", json={"model": GEMMA, "content": "Hello world", "with_pieces": True}).json()["tokens"]
    assert "".join(p["piece"] for p in pieces) == "Hello world"
    bad = http.post("/detokenize", json={"model": GEMMA, "tokens": [-1]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"


def test_tokenize_a_chat_request_as_the_server_reads_it(http: httpx.Client):
    """vLLM's /tokenize with `messages`: the prompt's tokens as a chat request reads them (its
    segments tokenized one by one, not the rendered text whole), so a client counts them exactly."""
    ask = {"model": GEMMA, "messages": [{"role": "system", "content": "Be brief.\n\n"},
                                        {"role": "user", "content": "\n\nSay hi."}]}
    tokens = http.post("/tokenize", json=ask).json()["tokens"]
    answer = http.post("/v1/chat/completions", json={**ask, "max_tokens": 1}).json()
    assert len(tokens) == answer["usage"]["prompt_tokens"]
    text = http.post("/apply-template", json=ask).json()["prompt"]
    plain = re.sub(r"<bos>|<start_of_turn>|<end_of_turn>", "", text)  # (control tokens detokenize to nothing)
    assert http.post("/detokenize", json={"model": GEMMA, "tokens": tokens}).json()["content"] == plain
    pieces = http.post("/tokenize", json={**ask, "with_pieces": True}).json()["tokens"]
    assert [p["id"] for p in pieces] == tokens and "".join(p["piece"] for p in pieces) == plain
    bad = http.post("/tokenize", json={"model": GEMMA, "messages": "hi"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "messages"


def test_embeddings(client: openai.OpenAI):
    r = client.embeddings.create(model="tiny-embed", input=["hello world", "hello world", "the sea and a tool"])
    v = np.array([d.embedding for d in r.data])
    assert v.shape == (3, 64) and [d.index for d in r.data] == [0, 1, 2]
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert abs(float(v[0] @ v[1]) - 1.0) < 1e-5  # cosine(x, x) = 1
    assert float(v[0] @ v[2]) < 0.999  # different inputs differ
    assert r.usage.prompt_tokens > 3
    b64 = client.embeddings.create(model="tiny-embed", input="hello world", encoding_format="base64")
    decoded = np.frombuffer(base64.b64decode(b64.data[0].embedding), dtype="<f4")
    assert np.allclose(decoded, v[0], atol=1e-5)
    ids = client.embeddings.create(model="tiny-embed", input=[[5, 6, 7], [5, 6, 7]])
    assert np.allclose(ids.data[0].embedding, ids.data[1].embedding)


def test_embeddings_refused_with_a_hint(http: httpx.Client):
    r = http.post("/v1/embeddings", json={"model": GEMMA, "input": "x"})
    assert r.status_code == 400 and "embedding = true" in r.json()["error"]["message"]
    r = http.post("/v1/embeddings", json={"model": "tiny-embed", "input": "x", "dimensions": 8})
    assert r.status_code == 400 and r.json()["error"]["param"] == "dimensions"
    r = http.post("/v1/embeddings", json={"model": "tiny-embed", "input": [[99999999]]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input.0"
