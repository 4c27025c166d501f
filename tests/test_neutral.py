"""The neutral vocabulary (localchat/neutral.py): on the ground floor, a typed sampling record,
and a reasoning value that carries an effort from each protocol's edge to the template (issue
23): `reasoning_effort: "high"` reaches gpt-oss's harmony template as "high"."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import localchat
from localchat.api.anthropic.request import MessagesRequest, to_request as anthropic_request
from localchat.api.body import parse
from localchat.api.ollama.chat import ChatBody, chat_request
from localchat.api.openai.schemas import ChatCompletionRequest
from localchat.api.responses.request import to_request as responses_request
from localchat.api.responses.schemas import ResponsesRequest
from localchat.engine.params import KNOBS, SamplingParams
from localchat.families import FAMILIES
from localchat.generation.constraints import codec_tools
from localchat.generation.conversation import render_conversation
from localchat.models import ModelSpec, Registry, Settings
from localchat.neutral import REASONING_OFF, REASONING_ON, GenerationRequest, Reasoning, Sampling

pytestmark = pytest.mark.fast

HI = [{"role": "user", "content": "Hi"}]


def openai_chat(fields: dict[str, Any]) -> GenerationRequest:
    return ChatCompletionRequest.model_validate({"messages": HI, **fields}).to_request()


def responses(fields: dict[str, Any]) -> GenerationRequest:
    return responses_request(parse(ResponsesRequest, {"input": "Hi", **fields}), [], Settings())


def anthropic(fields: dict[str, Any]) -> GenerationRequest:
    return anthropic_request(parse(MessagesRequest, {"model": "m", "max_tokens": 16, "messages": HI, **fields}),
                             Settings())


def ollama(fields: dict[str, Any]) -> GenerationRequest:
    registry = Registry({"m": ModelSpec(name="m", path=Path("/m.gguf"))}, "m")
    return chat_request(parse(ChatBody, {"model": "m", "messages": HI, **fields}), registry)


@pytest.mark.parametrize("edge, fields, reasoning", [
    (openai_chat, {}, None),
    (openai_chat, {"reasoning_effort": "high"}, Reasoning(True, "high")),
    (openai_chat, {"reasoning_effort": "low"}, Reasoning(True, "low")),
    (openai_chat, {"reasoning_effort": "none"}, REASONING_OFF),
    (openai_chat, {"reasoning_effort": "minimal"}, REASONING_OFF),
    (openai_chat, {"reasoning_effort": "xhigh"}, REASONING_ON),  # a value we do not know: on, the template's effort
    (openai_chat, {"chat_template_kwargs": {"enable_thinking": True}}, REASONING_ON),
    (openai_chat, {"chat_template_kwargs": {"enable_thinking": True}, "reasoning_effort": "high"},
     Reasoning(True, "high")),
    (openai_chat, {"chat_template_kwargs": {"enable_thinking": False}}, REASONING_OFF),
    (responses, {}, None),
    (responses, {"reasoning": {"effort": "high", "summary": "auto"}}, Reasoning(True, "high")),
    (responses, {"reasoning": {"effort": "medium"}}, Reasoning(True, "medium")),
    (responses, {"reasoning": {"effort": "none"}}, REASONING_OFF),
    (anthropic, {}, None),
    (anthropic, {"thinking": {"type": "enabled", "budget_tokens": 2048}}, REASONING_ON),
    (anthropic, {"thinking": {"type": "disabled"}}, REASONING_OFF),
    (ollama, {}, None),
    (ollama, {"think": True}, REASONING_ON),
    (ollama, {"think": False}, REASONING_OFF),
    (ollama, {"think": "high"}, Reasoning(True, "high")),
    (ollama, {"think": "low"}, Reasoning(True, "low")),
])
def test_each_protocol_maps_its_reasoning_field(edge: Any, fields: dict[str, Any], reasoning: Reasoning | None):
    assert edge(fields).reasoning == reasoning


def gpt_oss_prompt(request: GenerationRequest) -> str:
    family = FAMILIES["gpt-oss"]
    loaded = SimpleNamespace(template=family.template, family=family, bos_token="", eos_token=family.eos_token,
                             spec=SimpleNamespace(system_prompt_strip=None))
    return render_conversation(request, request.messages, loaded, codec_tools(request.output)).text  # type: ignore[arg-type]


@pytest.mark.parametrize("edge, fields, effort", [
    (openai_chat, {"reasoning_effort": "high"}, "high"),
    (openai_chat, {"reasoning_effort": "low"}, "low"),
    (openai_chat, {}, "medium"),  # the template's default
    (openai_chat, {"reasoning_effort": "none"}, "low"),  # harmony cannot turn reasoning off: the least there is
    (responses, {"reasoning": {"effort": "high"}}, "high"),
    (ollama, {"think": "high"}, "high"),
    (ollama, {"think": True}, "medium"),
    (anthropic, {"thinking": {"type": "enabled", "budget_tokens": 2048}}, "medium"),
])
def test_the_effort_reaches_the_gpt_oss_template(edge: Any, fields: dict[str, Any], effort: str):
    prompt = gpt_oss_prompt(edge(fields))
    assert f"\nReasoning: {effort}\n" in prompt and prompt.count("Reasoning:") == 1


def test_a_switch_family_reads_the_effort_as_on():
    qwen = FAMILIES["chatml"]
    assert qwen.template_vars(Reasoning(True, "high")) == {"enable_thinking": True}
    assert qwen.template_vars(REASONING_OFF) == {"enable_thinking": False} and qwen.template_vars(None) == {}


def test_reasoning_is_an_effort_only_when_on():
    with pytest.raises(ValueError):
        Reasoning(False, "high")
    with pytest.raises(ValueError):
        Reasoning(True, "max")  # type: ignore[arg-type]
    assert Reasoning.of(None) is None and Reasoning.of(False) == REASONING_OFF
    assert Reasoning.of("high") == Reasoning(True, "high")


def test_sampling_is_the_engine_knobs_each_unset_plus_stop_logit_bias_and_ignore_eos():
    fields = {f.name: f for f in dataclasses.fields(Sampling)}
    assert list(fields) == [*KNOBS, "stop", "ignore_eos", "n_indent", "t_max_predict_ms", "logit_bias"]
    assert all(getattr(Sampling(), name) is None for name in [*KNOBS, "stop", "ignore_eos", "n_indent", "t_max_predict_ms"])
    base = SamplingParams()
    assert Sampling().over(base) == base
    over = Sampling(temperature=0.0, seed=7, stop=("\n",), logit_bias={"5": 1.0}).over(base)
    assert (over.temperature, over.seed, over.stop, over.top_k) == (0.0, 7, ("\n",), base.top_k)
    assert over.logit_bias == {}  # left to generation, which checks the token ids


def test_the_neutral_module_is_on_the_ground_floor():
    """It imports nothing of localchat's at run time (no server limit either: generation reads those)."""
    path = Path(localchat.__file__).parent / "neutral.py"
    imported = {node.module for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ImportFrom)
                and node.level}
    assert imported == {"engine.params"}  # under TYPE_CHECKING only
    source = path.read_text()
    assert "if TYPE_CHECKING:\n    from .engine.params import TokenLogprob\n" in source
