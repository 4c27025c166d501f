"""localchat renders exactly what the chat template renders (no server): Qwen2.5-Coder 0.5B's
template (the default model's; a copy in tests/fixtures, checked against the real GGUF when it
is on this machine) against plain jinja2 set up as Hugging Face sets it up (localchat/devtools/plain_jinja.py).
An empty text must stay empty for the template: Qwen's `{% if message.content %}` leaves out the
newline before an assistant's tool call only when it sees the text empty."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from localchat.families import FAMILIES, choose, render_prompt
from localchat.generation.conversation import render_conversation
from localchat.models import inspect
from localchat.models.catalog import Registry, shipped_config
from localchat.neutral import ChatMessage, GenerationRequest, PastCall
from localchat.devtools.plain_jinja import reference_render

FIXTURE = Path(__file__).parent / "fixtures" / "qwen2.5-coder-0.5b-instruct.jinja"
QWEN = FIXTURE.read_text()
BOS, EOS = "<|endoftext|>", "<|im_end|>"  # the 0.5B GGUF's (bos_token_id 151643, eos_token_id 151645)
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
CALL = {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}
ASK = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Weather in Zürich?"}]
RESULT = {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "21 °C"}
AGENT = [*ASK, {"role": "assistant", "content": "", "tool_calls": [CALL]}, RESULT,
         {"role": "assistant", "content": "Looking again.", "tool_calls": [CALL]}, RESULT,
         {"role": "assistant", "content": "21 °C."}, {"role": "user", "content": "And tomorrow?"}]


def _both(messages: list[dict[str, Any]], **extra: Any) -> tuple[str, str]:
    ours = render_prompt(QWEN, messages, bos_token=BOS, eos_token=EOS, **extra).text
    return ours, reference_render(QWEN, messages, bos_token=BOS, eos_token=EOS, **extra)


def _real_gguf() -> Path | None:
    where = Registry.load(shipped_config()).resolve("qwen2.5-coder-0.5b").location()
    return where if where is not None and where.is_file() else None


@pytest.mark.parametrize("tools", [[TOOL], None], ids=["tools", "no-tools"])
def test_an_empty_tool_call_turn_renders_as_the_template_does(tools):
    ours, theirs = _both(AGENT, tools=tools)
    assert ours == theirs
    assert "<|im_start|>assistant\n<tool_call>\n" in ours and "\n\n<tool_call>" not in ours
    assert "<|im_start|>assistant\nLooking again.\n<tool_call>\n" in ours  # a text beside the call stays


def test_no_text_beside_a_call_renders_as_an_empty_one():
    """None (an OpenAI client's `content: null`) is the empty string to the template, as llama.cpp gives it."""
    silent = [*ASK, {"role": "assistant", "content": None, "tool_calls": [CALL]}, RESULT]
    empty = [*ASK, {"role": "assistant", "content": "", "tool_calls": [CALL]}, RESULT]
    assert render_prompt(QWEN, silent).text == render_prompt(QWEN, empty).text == reference_render(QWEN, empty)
    pieces = [*ASK, {"role": "assistant", "content": [("", True)], "tool_calls": [CALL]}, RESULT]
    assert render_prompt(QWEN, pieces).text == reference_render(QWEN, empty)


def test_the_server_path_renders_as_the_template_does():
    """Through generation (the neutral messages, the template's own tool handling): the same bytes."""
    conversation = (ChatMessage.of("system", "You are terse."), ChatMessage.of("user", "Weather in Zürich?"),
                    ChatMessage("assistant", (), (PastCall("get_weather", {"city": "Zürich"}, "call00001"),)),
                    ChatMessage.of("tool", "21 °C", tool_call_id="call00001", name="get_weather"))
    family = FAMILIES["chatml"]
    loaded = SimpleNamespace(template=QWEN, family=family, bos_token=BOS, eos_token=EOS,
                             spec=SimpleNamespace(system_prompt_strip=None))
    ours = render_conversation(GenerationRequest(messages=conversation), conversation, loaded, []).text  # type: ignore[arg-type]
    assert ours == reference_render(QWEN, [*ASK, {"role": "assistant", "content": "", "tool_calls": [CALL]}, RESULT],
                                    bos_token=BOS, eos_token=EOS)


def test_message_text_still_goes_behind_placeholders():
    """Only an empty text skips the placeholder: a text holding a control token's characters is
    still one plain segment (never parsed as the token)."""
    prompt = render_prompt(QWEN, [{"role": "user", "content": "a <|im_end|> b"}])
    assert ("a <|im_end|> b", True) in prompt.segments
    assert all(plain is False for text, plain in prompt.segments if text != "a <|im_end|> b")


def test_tojson_keeps_what_the_template_asks_for():
    """HF's tojson: non-ASCII kept unless the template asks for ensure_ascii (Reka Edge's does)."""
    template = "{{ messages[0].content }}|{{ {'c': 'Zürich'} | tojson }}|{{ {'c': 'Zürich'} | tojson(ensure_ascii=True) }}"
    messages = [{"role": "user", "content": "x"}]
    assert render_prompt(template, messages).text == reference_render(template, messages) == 'x|{"c": "Zürich"}|{"c": "Z\\u00fcrich"}'


def test_the_fixture_is_the_real_models_template_and_chatml_fits_its_vocabulary():
    path = _real_gguf()
    if path is None:
        pytest.skip("the Qwen2.5-Coder 0.5B GGUF is not on this machine (localchat models pull qwen2.5-coder-0.5b)")
    info = inspect(path)
    assert info.chat_template == QWEN
    assert (info.bos_token, info.eos_token) == (BOS, EOS)
    family = choose(None, info).family
    assert family is FAMILIES["chatml"]
    assert set(family.control_tokens) | set(family.stop_tokens) <= info.tokens
    assert family.eos_token == info.eos_token
    assert {"<tool_call>", "</tool_call>"} <= info.tokens  # the Hermes codec's tags are tokens of its own


def test_a_call_without_an_id_has_no_id_for_the_template():
    """As llama.cpp and HF leave it: an id the client left out is undefined, not None."""
    template = ("{% for m in messages %}{% for c in m.tool_calls or [] %}{{ c.function.name }}:{{ c.id is defined }};"
                "{% endfor %}{% endfor %}")
    conversation = (ChatMessage.of("user", "u"), ChatMessage("assistant", (), (PastCall("f", {}), PastCall("f", {}, "c1"))))
    loaded = SimpleNamespace(template=template, family=FAMILIES["chatml"], bos_token="", eos_token="",
                             spec=SimpleNamespace(system_prompt_strip=None))
    request = GenerationRequest(messages=conversation, continue_final=False)
    assert render_conversation(request, conversation, loaded, []).text == "f:False;f:True;"  # type: ignore[arg-type]


def test_whitespace_at_a_texts_ends_is_the_templates_to_trim():
    """The placeholder holds the text without the whitespace at its ends: a template that trims
    (Llama 3.x's `| trim`) trims it, one that does not keeps it, a blank text stays blank."""
    trims = "{% for m in messages %}[{{ m.content | trim }}]{{ m.content.strip() == '' }}{% endfor %}"
    messages = [{"role": "user", "content": "  pasted code\n\n"}, {"role": "assistant", "content": " \n"},
                {"role": "user", "content": "ok"}]
    for template in (trims, QWEN):
        ours = render_prompt(template, messages, add_generation_prompt=False)
        assert ours.text == reference_render(template, messages, add_generation_prompt=False)
    assert ("pasted code", True) in render_prompt(QWEN, messages, add_generation_prompt=False).segments
