"""`prompt_cache_key` (OpenAI's field; Codex sends its session's id) keeps a conversation on its own
slot: a prompt no slot serves goes back to the slot its key last used, not to the least recently
used one, where another conversation's prompt would be lost. Real llama.cpp, a tiny model, two
slots, no prompt store (which would otherwise save the other conversation's cells first); the
official openai client on both routes that take the field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import OpenAI

from conftest import Server

MODEL = "tiny-chatml"


@pytest.fixture(scope="module")
def server(registry_file: Path, tmp_path_factory) -> Iterator[Server]:
    config = tmp_path_factory.mktemp("cache-key") / "models.toml"
    config.write_text("parallel = 2\nprompt_cache_bytes = 0\n" + registry_file.read_text())
    s = Server(config, "--model", MODEL)
    yield s
    s.stop()


def task(topic: str) -> str:
    return f"Read every file about {topic} in this folder and say what each one holds, file by file. " * 4


def chat(client: OpenAI, text: str, key: str) -> tuple[int, int]:
    """(prompt tokens, of them read from the cache)."""
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}], max_tokens=1,
                                       temperature=0, prompt_cache_key=key)
    return r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens


def respond(client: OpenAI, text: str, key: str) -> tuple[int, int]:
    r = client.responses.create(model=MODEL, input=text, max_output_tokens=16, temperature=0, prompt_cache_key=key)
    return r.usage.input_tokens, r.usage.input_tokens_details.cached_tokens


@pytest.mark.parametrize("ask", [chat, respond], ids=["chat-completions", "responses"])
def test_a_conversation_no_slot_serves_goes_back_to_its_own_slot(server: Server, ask):
    client = OpenAI(base_url=server.url + "/v1", api_key="unused")
    a, b = f"a-{ask.__name__}", f"b-{ask.__name__}"
    ask(client, task("apples"), a)  # conversation a takes a slot, b the other
    prompt, _ = ask(client, task("bridges"), b)
    ask(client, task("apples"), a)  # a again: b's slot is now the least recently used
    ask(client, task("compilers, a summary of everything so far"), a)  # a's history compacted: no slot serves it
    again, cached = ask(client, task("bridges"), b)
    assert again == prompt and cached == prompt - 1  # b's slot kept its prompt (all but the last token)
