"""A draft model (engine/drafting/draft_model.py; `draft` in models.toml, `serve --draft-model`): SmolLM2
135M drafting for itself (the same vocabulary) over a real server — the text is the text without
drafts, under a grammar too, with two slots at once — and a draft model of another vocabulary
refused at load, the server serving on."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import openai
import pytest

from conftest import SMOLLM, TINY_CTX, Server, same_greedy_tokens, shipped
from localchat.errors import ModelUnavailable
from localchat.models import Registry, shipped_config
from localchat.models.fit import Memory, MemoryShape, choose
from localchat.models.gguf import inspect

MODEL = "smol-drafted"  # SmolLM2 with itself as its draft model, given on the command line
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 150},
                                           "tags": {"type": "array", "items": {"type": "string", "maxLength": 10},
                                                    "maxItems": 3}},
          "required": ["name", "age", "tags"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                           "parameters": {"type": "object", "properties": {
                                               "city": {"type": "string", "maxLength": 30},
                                               "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                                               "required": ["city", "days"], "additionalProperties": False}}}]


def smollm_file() -> Path:
    return Registry.load(shipped_config()).resolve(SMOLLM).file()


@pytest.fixture(scope="module")
@shipped
def server(registry_file: Path, tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    config = tmp_path_factory.mktemp("draft") / "models.toml"
    smol = smollm_file()
    config.write_text(registry_file.read_text() + (
        f'\n[models.{MODEL}]\npath = "{smol}"\ncontext_length = {TINY_CTX}\nparallel = 2\n'
        # a draft model of another vocabulary (an SPM tokenizer of 300-odd tokens)
        f'\n[models.smol-bad-draft]\npath = "{smol}"\ncontext_length = {TINY_CTX}\nparallel = 1\n'
        f'draft = "tiny-chatml"\n'
        f'\n[models.smol-no-draft]\npath = "{smol}"\ncontext_length = {TINY_CTX}\nparallel = 1\n'
        f'draft = "no-such-model"\n'))
    s = Server(config, "--model", MODEL, "--draft-model", SMOLLM)
    yield s
    alive = s.proc.poll() is None
    s.stop()
    assert alive, "the server died during the tests"


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="anything", max_retries=0, timeout=300)


def access_lines(server: Server, seen: int, count: int = 1) -> list[str]:
    """The access-log lines of chat requests after the first `seen`, once there are `count` more."""
    deadline = time.monotonic() + 10
    while True:
        lines = [line for line in server.output().splitlines() if "POST /v1/chat/completions" in line]
        if len(lines) >= seen + count or time.monotonic() > deadline:
            return lines[seen:]
        time.sleep(0.05)


def n_lines(server: Server) -> int:
    return len([line for line in server.output().splitlines() if "POST /v1/chat/completions" in line])


def drafts(line: str) -> tuple[int, int]:
    found = re.search(r"drafts=(\d+)/(\d+)", line)
    return (int(found[1]), int(found[2])) if found else (0, 0)


def ask(client: openai.OpenAI, content: str, draft: bool = True, **kwargs) -> dict:
    """A greedy answer with its tokens' log-probabilities (compared with same_greedy_tokens: a step
    of several tokens sums in another order than one token, so a near-tie may part two runs)."""
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": content}], temperature=0,
                                       seed=1, logprobs=True, top_logprobs=2, **{"max_tokens": 48, **kwargs},
                                       extra_body={} if draft else {"ngram_draft": 0})
    assert r.choices[0].message.content
    return r.model_dump()


def test_greedy_text_is_the_same_with_the_draft_model(client: openai.OpenAI, server: Server):
    seen = n_lines(server)
    plain = ask(client, "Write a Python function that adds two numbers.", draft=False)
    drafted = ask(client, "Write a Python function that adds two numbers.")
    same_greedy_tokens(plain, drafted)
    off, on = access_lines(server, seen, 2)
    assert drafts(off) == (0, 0)
    kept, made = drafts(on)
    assert made >= kept > 0, on  # the draft model is the model: nearly all its drafts are kept
    again = ask(client, "Write a Python function that adds two numbers.")  # the draft context's cells reused
    same_greedy_tokens(plain, again)


def test_two_slots_draft_at_once(client: openai.OpenAI, server: Server):
    prompts = ["List three colours of the sea.", "Explain what a Python list is, briefly."]
    alone = [ask(client, p) for p in prompts]
    seen = n_lines(server)
    together: list[dict] = [{}, {}]

    def run(i: int) -> None:
        together[i] = ask(client, prompts[i])
    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for one, two in zip(alone, together):
        same_greedy_tokens(one, two)
    assert all(drafts(line)[0] > 0 for line in access_lines(server, seen, 2))


def test_drafts_under_a_grammar_stay_valid(client: openai.OpenAI, server: Server):
    """The draft model drafts without the grammar; what the grammar forbids is never kept."""
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}
    messages = [{"role": "user", "content": "Describe a person as JSON: name, age and tags."}]
    seen = n_lines(server)
    for temperature, seed in ((0, 1), (1.0, 2), (1.0, 3)):
        r = client.chat.completions.create(model=MODEL, messages=messages, response_format=fmt, max_tokens=120,
                                           temperature=temperature, seed=seed)
        if r.choices[0].finish_reason == "stop":
            jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMA)
        else:
            assert r.choices[0].message.content.startswith("{")
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Weather in Paris?"}],
                                       tools=TOOLS, tool_choice="required", max_tokens=120, temperature=0)
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), TOOLS[0]["function"]["parameters"])
    assert sum(drafts(line)[1] for line in access_lines(server, seen, 4)) > 0


def test_a_draft_model_of_another_vocabulary_is_refused(client: openai.OpenAI, server: Server):
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(model="smol-bad-draft", messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=4)
    assert refused.value.status_code == 503
    message = refused.value.response.json()["error"]["message"]
    assert "cannot draft for" in message and "vocabularies are not the same" in message, message
    with pytest.raises(openai.APIStatusError) as missing:
        client.chat.completions.create(model="smol-no-draft", messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=4)
    assert missing.value.status_code == 503 and "no-such-model" in missing.value.response.json()["error"]["message"]
    assert ask(client, "Say hello.", max_tokens=8)  # the server serves on


@pytest.mark.fast
def test_the_draft_model_counts_in_the_memory_needed():
    info = inspect(smollm_file())
    shape = MemoryShape.of(info)
    memory = Memory(64 << 30, "RAM")
    alone = choose(shape, memory, context=2048, slots=2)
    both = choose(shape, memory, context=2048, slots=2, draft=shape)
    assert both.need.weights == 2 * alone.need.weights and both.need.kv == 2 * alone.need.kv
    with pytest.raises(ModelUnavailable, match="and its draft model need"):
        choose(shape, Memory(int(alone.need.total / 0.9) + (1 << 20), "RAM"), context=2048, draft=shape)


@pytest.mark.fast
def test_a_draft_model_is_a_file_entry_of_the_registry(tmp_path: Path):
    config = tmp_path / "models.toml"
    config.write_text('default = "a"\n[models.a]\npath = "a.gguf"\n[models.b]\npath = "b.gguf"\n'
                      '[models.up]\nupstream = "http://127.0.0.1:9"\n')
    registry = Registry.load(config, tmp_path / "none.toml")
    registry.set_draft(None, "b")
    assert registry.resolve("a").draft == "b"
    registry.reload()
    assert registry.resolve("a").draft == "b"  # this run's, kept across a reload
    with pytest.raises(ValueError, match="upstream"):
        registry.set_draft("a", "up")
    config.write_text(config.read_text() + 'draft = "a"\n')  # on the upstream entry: its peer's to say
    with pytest.raises(ValueError, match="draft"):
        Registry.load(config, tmp_path / "none.toml")
