"""GET /metrics (serve --metrics; api/metrics.py): scraped with prometheus_client's own parser
after real requests over three protocols on real llama.cpp (a tiny model), the counters move by
what the requests did — their usage as each protocol reported it — and the gauges show the
model's slots and cells. Off by default: a 404."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import Server

MODEL = "tiny-chatml"


@pytest.fixture(scope="module")
def metered(registry_file) -> Iterator[Server]:
    s = Server(registry_file, "--metrics", "--model", MODEL)
    yield s
    s.stop()


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = httpx.get(url + "/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.text) for sample in family.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_the_counters_move_by_what_the_requests_did(metered: Server):
    chat = openai.OpenAI(base_url=metered.url + "/v1", api_key="x", max_retries=0)
    claude = anthropic.Anthropic(base_url=metered.url, api_key="x", max_retries=0)
    before = scrape(metered.url)
    usage = [chat.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi there"}],
                                          max_tokens=6, temperature=0.7, seed=1).usage]
    stream = chat.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi there, again"}],
                                          max_tokens=5, seed=2, stream=True, stream_options={"include_usage": True})
    usage += [chunk.usage for chunk in stream if chunk.usage]
    message = claude.messages.create(model=MODEL, max_tokens=4, messages=[{"role": "user", "content": "Hello"}])
    bad = httpx.post(metered.url + "/v1/chat/completions", json={"model": MODEL, "messages": "not a list"})
    assert bad.status_code == 400
    after = scrape(metered.url)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("localchat_requests_total", model=MODEL, protocol="openai", status="200") == 2
    assert moved("localchat_requests_total", model=MODEL, protocol="anthropic", status="200") == 1
    assert sum(moved(name, **dict(labels)) for name, labels in after
               if name == "localchat_requests_total" and dict(labels)["status"] == "400") == 1
    prompt = sum(u.prompt_tokens for u in usage) + message.usage.input_tokens + (
        message.usage.cache_read_input_tokens or 0)
    cached = sum((u.prompt_tokens_details.cached_tokens or 0) if u.prompt_tokens_details else 0 for u in usage) + (
        message.usage.cache_read_input_tokens or 0)
    assert moved("localchat_prompt_tokens_total", model=MODEL) + moved("localchat_prompt_tokens_cached_total",
                                                                       model=MODEL) == prompt
    assert moved("localchat_prompt_tokens_cached_total", model=MODEL) == cached
    generated = sum(u.completion_tokens for u in usage) + message.usage.output_tokens
    assert moved("localchat_generated_tokens_total", model=MODEL) == generated > 0
    # a first token each (every request generated); time per token from those that wrote two or more
    assert moved("localchat_time_to_first_token_seconds_count", model=MODEL) == 3
    assert moved("localchat_time_to_first_token_seconds_sum", model=MODEL) > 0
    assert moved("localchat_time_per_output_token_seconds_count", model=MODEL) == sum(
        n > 1 for n in [*(u.completion_tokens for u in usage), message.usage.output_tokens])
    # what the model is doing now: idle, its slots' cells holding the last prompts
    slots = value(after, "localchat_slots", model=MODEL)
    assert slots >= 1 and value(after, "localchat_slots_busy", model=MODEL) == 0
    assert value(after, "localchat_requests_running", model=MODEL) == 0
    assert value(after, "localchat_requests_queued", model=MODEL) == 0
    assert 0 < value(after, "localchat_kv_cells_used", model=MODEL) <= value(after, "localchat_kv_cells", model=MODEL)
    assert value(after, "localchat_worker_restarts", model=MODEL) == 0


def test_off_by_default(http: httpx.Client):
    assert http.get("/metrics").status_code == 404


def test_prompt_tokens_by_client_from_the_user_agent(metered: Server):
    """Each request counted under the client its User-Agent names (Claude Code's claude-cli, Codex's
    codex_exec, …), read and from the cache apart; the SDKs under their own names."""
    before = scrape(metered.url)
    sent = {}
    for agent, client in (("claude-cli/2.1.330 (external, cli)", "claude"), ("codex_exec/0.169.0 (Linux)", "codex"),
                          ("QwenCode/0.24.4 (linux; x64)", "qwen"), ("", "other")):
        r = httpx.post(metered.url + "/v1/chat/completions", headers={"User-Agent": agent}, json={
            "model": MODEL, "messages": [{"role": "user", "content": f"Hello from {client}"}], "max_tokens": 1})
        assert r.status_code == 200, r.text
        sent[client] = r.json()["usage"]
    chat = openai.OpenAI(base_url=metered.url + "/v1", api_key="x", max_retries=0)
    usage = chat.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hello, SDK"}],
                                         max_tokens=1).usage
    sent["openai-sdk"] = {"prompt_tokens": usage.prompt_tokens,
                          "prompt_tokens_details": {"cached_tokens": usage.prompt_tokens_details.cached_tokens or 0}}
    after = scrape(metered.url)
    for client, u in sent.items():
        cached = u["prompt_tokens_details"]["cached_tokens"] or 0
        read = value(after, "localchat_client_prompt_tokens_total", model=MODEL, client=client) - value(
            before, "localchat_client_prompt_tokens_total", model=MODEL, client=client)
        kept = value(after, "localchat_client_prompt_tokens_cached_total", model=MODEL, client=client) - value(
            before, "localchat_client_prompt_tokens_cached_total", model=MODEL, client=client)
        assert (read, kept) == (u["prompt_tokens"] - cached, cached), client
