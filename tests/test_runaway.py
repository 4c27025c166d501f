"""Runaway answers on a real server (real llama.cpp, a tiny model): a generation forced into a
loop ends soon as "length" and the access log says why; `repetition_stop` 0 (per request or per
model) lets it run to max_tokens; a client that leaves mid-stream is logged with what it made.

The loop is forced, never left to the model: a grammar allows only " hello" again and again,
and a logit bias makes the single token "▁hello" the way to write it (the tiny vocabulary could
also spell it letter by letter, which would not repeat token for token)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import TINY_CTX, Server
from localchat.engine.params import SamplingParams
from localchat.families import FAMILIES
from localchat.devtools.tinymodels import vocabulary

DEFAULT = SamplingParams().repetition_stop
HELLO = vocabulary(FAMILIES["chatml"])[0].index("▁hello")  # the tiny chatml model's token
HI = [{"role": "user", "content": "Hi"}]
LOOP = {"messages": HI, "grammar": 'root ::= (" hello")+', "logit_bias": {str(HELLO): 100}, "ignore_eos": True,
        "temperature": 0}


@pytest.fixture(scope="module")
def looping(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose models are the tiny chatml model: with the engine's default, with the
    detector off, with a short span; and one for the cancelled requests (its own log lines). All
    four stay loaded: no test here waits for another's model to go."""
    path = tmp_path_factory.mktemp("runaway") / "models.toml"
    model = f'path = "{tiny_models["chatml"]}"\ncontext_length = {TINY_CTX}\n'
    path.write_text(f'default = "loop-default"\nmax_loaded_models = 4\n[models.loop-default]\n{model}'
                    f'[models.loop-off]\n{model}[models.loop-off.sampling]\nrepetition_stop = 0\n'
                    f'[models.loop-short]\n{model}[models.loop-short.sampling]\nrepetition_stop = 40\n'
                    f'[models.loop-cancel]\n{model}')
    server = Server(path)
    yield server
    server.stop()


def log_lines(server: Server, model: str, path: str = "/v1/chat/completions") -> list[str]:
    return [line for line in server.output().splitlines() if f" {path} " in line and f"model={model} " in line]


def log_line(server: Server, model: str, path: str = "/v1/chat/completions", before: int = 0) -> str:
    """The access-log line of the latest request to `model`, once there are more than `before`
    (it is written once the response has ended, which may be after the client has read it)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        lines = log_lines(server, model, path)
        if len(lines) > before:
            return lines[-1]
        time.sleep(0.1)
    raise AssertionError(f"no access-log line for {model}:\n{server.output()[-2000:]}")


def loaded(health: Server | dict) -> tuple[int, list[tuple[str, object]]]:
    """/health's count of model loads, and each loaded model's worker (pid, state, crashes)."""
    if isinstance(health, Server):
        health = httpx.get(health.url + "/health", timeout=10).json()
    return health["loads"], [(m["name"], m["worker"]) for m in health["loaded"]]


def server_lines(server: Server) -> list[str]:
    """What the server printed beside its access log (loads, unloads, a worker restarted)."""
    return [line for line in server.output().splitlines() if not re.match(r"\d\d:\d\d:\d\d (GET|POST) ", line)][-30:]


def chat(server: Server, model: str, max_tokens: int, **extra: object) -> tuple[str, int]:
    r = httpx.post(server.url + "/v1/chat/completions", json={**LOOP, "model": model, "max_tokens": max_tokens, **extra},
                   timeout=120)
    assert r.status_code == 200, r.text
    body = r.json()
    return body["choices"][0]["finish_reason"], body["usage"]["completion_tokens"]


def test_a_forced_loop_ends_soon_as_length(looping: Server):
    before = len(log_lines(looping, "loop-default"))
    finish, tokens = chat(looping, "loop-default", 1000)
    assert finish == "length" and tokens == DEFAULT  # period 1: the span is the whole answer
    assert "finish=length reason=repetition" in log_line(looping, "loop-default", before=before)


def test_the_request_turns_it_off_or_sets_the_span(looping: Server):
    before = len(log_lines(looping, "loop-default"))
    assert chat(looping, "loop-default", 300, repetition_stop=0) == ("length", 300)
    line = log_line(looping, "loop-default", before=before)
    assert "generated=300 finish=length" in line and "reason=" not in line
    assert chat(looping, "loop-default", 300, repetition_stop=50) == ("length", 50)


def test_the_model_sets_the_default(looping: Server):
    assert chat(looping, "loop-off", 300) == ("length", 300)
    assert chat(looping, "loop-short", 300) == ("length", 40)
    assert chat(looping, "loop-off", 300, repetition_stop=60) == ("length", 60)  # the request wins


def test_messages_ends_with_max_tokens(looping: Server):
    """Anthropic's Messages has no grammar: the bias alone repeats "▁hello" (its probability is 1 - e⁻¹⁰⁰)."""
    before = len(log_lines(looping, "loop-default", "/v1/messages"))
    r = httpx.post(looping.url + "/v1/messages", json={"model": "loop-default", "max_tokens": 1000, "messages": HI,
                                                        "logit_bias": {str(HELLO): 100}, "temperature": 0}, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["stop_reason"] == "max_tokens" and r.json()["usage"]["output_tokens"] == DEFAULT
    assert "finish=length reason=repetition" in log_line(looping, "loop-default", "/v1/messages", before=before)


def test_a_cancelled_stream_is_logged_with_what_it_generated(looping: Server):
    """...and with what it read from the cache: the same request again finds its prompt there."""
    # (no drafts: a loop drafted 64 tokens a step could end before the client leaves)
    body = {**LOOP, "model": "loop-cancel", "max_tokens": 1500, "repetition_stop": 0, "ngram_draft": 0, "stream": True}
    for attempt in range(2):
        seen, before = 0, len(log_lines(looping, "loop-cancel"))
        health = httpx.get(looping.url + "/health", timeout=10).json()
        with httpx.Client(timeout=60) as h, h.stream("POST", looping.url + "/v1/chat/completions", json=body) as r:
            for line in r.iter_lines():
                seen += '"content":" hello"' in line  # a token a chunk
                if seen >= 5:
                    break
        line = log_line(looping, "loop-cancel", before=before)
        generated = int(re.search(r"generated=(\d+)", line).group(1))  # type: ignore[union-attr]
        prompt, cached = (int(re.search(rf"{k}=(\d+)", line).group(1)) for k in ("prompt", "cached"))  # type: ignore[union-attr]
        assert seen <= generated < 1500 and "finish=cancelled" in line, line
        # all but the last token, which makes the logits (what else the server did meanwhile, if not)
        assert cached == prompt - 1 if attempt else cached >= 0, (line, loaded(health), loaded(looping), server_lines(looping))


def test_an_abandoned_answer_is_logged_with_what_it_generated(looping: Server):
    """A client that gives up on a whole (non-streamed) answer: the line counts the tokens made."""
    body = {**LOOP, "model": "loop-cancel", "max_tokens": 1500, "repetition_stop": 0, "ngram_draft": 0}
    lines = []
    # (a fast machine may finish 1500 tiny-model tokens within a second, or in the moment between the
    # client's giving up and the server's seeing it: then the next, shorter wait)
    for wait in (1.0, 0.3, 0.1, 0.03, 0.01):
        before = looping.output().count("model=loop-cancel ")
        try:
            httpx.post(looping.url + "/v1/chat/completions", json=body, timeout=wait)
            continue
        except httpx.TimeoutException:
            pass
        deadline = time.monotonic() + 15
        while looping.output().count("model=loop-cancel ") == before and time.monotonic() < deadline:
            time.sleep(0.1)
        lines.append(line := log_line(looping, "loop-cancel"))
        if "finish=length" not in line:
            break
    else:
        pytest.fail(f"every answer was done before the server saw the client go: {lines}")
    generated = int(re.search(r"generated=(\d+)", line).group(1))  # type: ignore[union-attr]
    assert 0 < generated < 1500 and "finish=cancelled" in line, line
