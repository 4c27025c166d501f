"""OpenAI's Predicted Outputs on /v1/chat/completions: `prediction` is the first source of drafts
(engine/drafting/drafts.py), the answer is the same with or without it, and usage says how much of it the
answer wrote (`accepted_prediction_tokens`) and how much it did not (`rejected_prediction_tokens`),
as OpenAI reports them. What is refused gets OpenAI's error shape.

Tiny models have random weights: the answers are compared with each other (greedy, token by token
up to a near-tie), never with an expected text."""

from __future__ import annotations

import httpx
import openai
import pytest

MODEL = "tiny-chatml"
ASK = [{"role": "user", "content": "Copy this: the sea and the world, the sea and the world."}]
TIE = 1e-3  # two runs' log-probabilities of a token differ by less (float sums vary with the batch)


def greedy(client: openai.OpenAI, **extra):
    # each read cold (cache_prompt off): a prompt read from the cache is decoded in other batches
    extra.setdefault("extra_body", {"ignore_eos": True, "repetition_stop": 0, "cache_prompt": False})
    return client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=40, temperature=0, logprobs=True,
                                          top_logprobs=2, **extra)


def compared(plain, other) -> int:
    """How many tokens both answers share, each log-probability within TIE; they may part only
    where the plain answer's two best tokens were within 2 * TIE."""
    a, b = plain.choices[0].logprobs.content, other.choices[0].logprobs.content
    for i, (x, y) in enumerate(zip(a, b)):
        assert abs(x.logprob - y.logprob) < TIE * max(1.0, abs(x.logprob)), i
        if x.token != y.token:
            top = x.top_logprobs
            assert top[0].logprob - top[1].logprob < 2 * TIE, f"token {i}: {x.token!r} then {y.token!r}, not a tie"
            return i
    assert len(a) == len(b)
    return len(a)


def tokens(http: httpx.Client, text: str) -> list[int]:
    return http.post("/tokenize", json={"model": MODEL, "content": text, "parse_special": False}).json()["tokens"]


def test_a_prediction_drafts_and_changes_nothing(client: openai.OpenAI, http: httpx.Client):
    plain = greedy(client)
    text = plain.choices[0].message.content
    assert plain.usage.completion_tokens_details is None  # no prediction: nothing said of one
    same = greedy(client, prediction={"type": "content", "content": text})
    details = same.usage.completion_tokens_details
    predicted = tokens(http, text)
    assert details.accepted_prediction_tokens + details.rejected_prediction_tokens == len(predicted)
    if compared(plain, same) == len(plain.choices[0].logprobs.content):
        assert same.choices[0].message.content == text
        # the answer's own tokens (the text read again may split otherwise: a tiny model writes odd bytes)
        written = [int(t.token.removeprefix("token_id:")) for t in greedy(
            client, extra_body={"return_tokens_as_token_ids": True, "ignore_eos": True, "repetition_stop": 0,
                                "cache_prompt": False}).choices[0].logprobs.content]
        alike = next((i for i, (a, b) in enumerate(zip(written, predicted)) if a != b), min(len(written), len(predicted)))
        assert details.accepted_prediction_tokens >= alike  # aligned from the start, as far as they agree
    # text parts, as OpenAI takes them too; a prediction unlike the answer
    other = greedy(client, prediction={"type": "content", "content": [{"type": "text", "text": "Nothing "},
                                                                      {"type": "text", "text": "like it."}]})
    compared(plain, other)
    details = other.usage.completion_tokens_details
    assert details.accepted_prediction_tokens + details.rejected_prediction_tokens == len(tokens(http, "Nothing like it."))
    assert details.rejected_prediction_tokens > 0


def test_a_prediction_streams_its_usage(client: openai.OpenAI):
    stream = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=8, stream=True,
                                            stream_options={"include_usage": True},
                                            prediction={"type": "content", "content": "the sea"})
    usage = [c.usage for c in stream if c.usage is not None]
    assert len(usage) == 1 and usage[0].completion_tokens_details.rejected_prediction_tokens is not None


@pytest.mark.parametrize("extra, param", [
    ({"prediction": {"type": "content", "content": 42}}, "prediction"),
    ({"prediction": {"type": "content", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}}, "prediction"),
    ({"prediction": {"type": "text", "content": "x"}}, "prediction"),
    ({"prediction": "x"}, "prediction"),
    ({"prediction": {"type": "content", "content": "x"}, "n": 2}, "n"),
])
def test_a_prediction_it_cannot_take_is_refused(http: httpx.Client, extra: dict, param: str):
    r = http.post("/v1/chat/completions", json={"model": MODEL, "messages": ASK, "max_tokens": 1, **extra})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"].startswith(param), error
