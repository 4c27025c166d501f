"""Every family's tiny model chats through the server, streaming and not, with the SDK."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from localchat.engine import LocalEngine
from localchat.families import FAMILIES, render_prompt

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello world"},
            {"role": "assistant", "content": "the sea"}, {"role": "user", "content": "and the tool"}]


@pytest.mark.parametrize("name", FAMILIES)
def test_family_round_trips_a_chat(name: str, client: openai.OpenAI, tiny_models: dict[str, Path]):
    family = FAMILIES[name]
    engine = LocalEngine(tiny_models[name], n_ctx=2048)
    try:
        prompt = render_prompt(family.template, MESSAGES, bos_token=family.bos_token, eos_token=family.eos_token)
        expected_prompt_tokens = len(engine.tokenizer.tokenize(prompt.segments))
    finally:
        engine.close()

    r = client.chat.completions.create(model=f"tiny-{name}", messages=MESSAGES, max_tokens=12, seed=7)
    assert r.model == f"tiny-{name}"
    assert r.usage.prompt_tokens == expected_prompt_tokens
    assert r.choices[0].finish_reason in ("stop", "length")

    stream = client.chat.completions.create(model=f"tiny-{name}", messages=MESSAGES, max_tokens=12, seed=7,
                                            stream=True, stream_options={"include_usage": True})
    text, finish, usage = "", None, None
    for chunk in stream:
        usage = chunk.usage or usage
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    assert text == r.choices[0].message.content
    assert finish == r.choices[0].finish_reason
    assert usage.completion_tokens == r.usage.completion_tokens
