"""The checks of the template conformance table (scripts/families.py), one template at a time."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import jsonschema

from families_exact import compare
from localchat.api.openai.messages import Message as OpenAIMessage, said
from localchat.families import Family, choose, render_prompt, template_caps
from localchat.generation.constraints import OutputRules, ToolSpec, codec_tools
from localchat.generation.conversation import _template_messages, _with_tools
from localchat.models.gguf import inspect
from localchat.serve_process import ServeProcess
from localchat.devtools.tinymodels import value_ends, vocabulary, write_tiny_model
from localchat.devtools.tool_schemas import ADD, WEATHER

# Protocol routes are checked for these (one per syntax that thinks only when asked).
PROTOCOL_TEMPLATES = {"Qwen-Qwen2.5-7B-Instruct", "Qwen3-Coder", "Mistral-Small-3.2-24B-Instruct-2506",
                      "meta-llama-Llama-3.1-8B-Instruct", "moonshotai-Kimi-K2", "deepseek-ai-DeepSeek-V3.1"}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add", "description": "Add two numbers", "parameters": ADD}}]
SCHEMAS = {"get_weather": WEATHER, "add": ADD}
ARGS = {"city": "Paris", "days": 2}
CALL = {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": ARGS}}
ASK = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Weather in Paris?"}]
# (the assistant answers the result before the next user turn: Mistral's templates refuse two
# user turns with only a call between them)
HISTORY = [*ASK, {"role": "assistant", "content": "", "tool_calls": [CALL]},
           {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "21 degrees"},
           {"role": "assistant", "content": "21 degrees."}, {"role": "user", "content": "And tomorrow?"}]
# Texts in a template that are special tokens in its model's vocabulary.
_CONTROL = re.compile(r"<\|[^|<>\s'\"]{1,40}\|>|<｜[^｜\s'\"]{1,40}｜>|\[/?[A-Z][A-Z_]{1,30}\]|<\|[a-z_\"]{1,20}>|"
                      r"<[a-z_]{1,20}\|>|<(?:BOS_TOKEN|EOS_TOKEN)>|\[gMASK\]|<sop>|<s>|</s>|<bos>|<eos>")
_TAGS = re.compile(r"</?(?:think|tool_call|tool_response|arg_key|arg_value|minimax:tool_call|seed:tool_call|"
                   r"seed:think|function_calls|tool_calls)>")


@dataclass
class Prepared:
    name: str  # the template's file name, without .jinja
    source: str
    family: Family
    gguf: Path
    vocab: list[str]

    @property
    def model(self) -> str:
        return "t-" + self.name.lower()


@dataclass
class Row:
    name: str
    family: str = ""
    codec: str = ""
    renders: str = "—"
    history: str = "—"
    call: str = "—"
    reasoning: str = "—"
    protocols: str = "—"
    exact: str = "—"
    has_tools: bool = False
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    @property
    def why(self) -> str:
        return "; ".join(self.problems)


def prepare(path: Path, work: Path) -> Prepared:
    """A tiny GGUF with this template and the special tokens it and its family use."""
    source = path.read_text()
    info = SimpleNamespace(architecture="llama", chat_template=source, tokens=frozenset())
    family = choose(None, info).family
    control = tuple(dict.fromkeys(t for t in _CONTROL.findall(source) if t not in family.control_tokens))
    extra = tuple(dict.fromkeys(_TAGS.findall(source)))
    gguf = write_tiny_model(work / f"{path.stem}.gguf", family, n_ctx=8192, chat_template=source,
                            control=control, extra=extra)
    return Prepared(path.stem, source, family, gguf, vocabulary(family, extra, control)[0])


class Server(ServeProcess):
    """A quiet server of `config`, up, with an HTTP client of its own."""

    def __init__(self, config: Path) -> None:
        super().__init__("--config", str(config), "--quiet")
        if not self.wait(180):
            out = self.output()
            self.stop()
            raise RuntimeError(f"localchat serve did not come up:\n{out}")
        self.http = httpx.Client(base_url=self.url, timeout=300)

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return self.http.post(path, json=body)

    def stop(self, grace: float = 15) -> None:
        super().stop(grace)


def _rules(choice: str = "auto") -> OutputRules:
    return OutputRules(tools=tuple(ToolSpec(t["function"]["name"], t["function"]["description"],
                                            t["function"]["parameters"]) for t in TOOLS), tool_choice=choice)


def _render(p: Prepared, messages: list[dict[str, Any]], generation: bool = True) -> str:
    """The messages (as the OpenAI route reads them) and the tools as generation gives them to the
    template (the calls and results written by the template, or else by the codec), rendered."""
    conversation = tuple(said(i, OpenAIMessage.model_validate(m)) for i, m in enumerate(_openai(messages)))
    caps = template_caps(p.source) if p.source != p.family.template else None
    codec = None if caps and caps.calls else p.family.codec
    rendered, extra = _with_tools(_template_messages(conversation, None, codec), codec_tools(_rules()), p.family, caps)
    return render_prompt(p.source, rendered, bos_token=p.family.bos_token, eos_token=p.family.eos_token,
                         add_generation_prompt=generation, **extra).text


def _openai(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as an OpenAI client sends it (arguments as a JSON string)."""
    out = []
    for m in messages:
        if m.get("tool_calls"):
            m = {**m, "tool_calls": [{**c, "function": {**c["function"], "arguments": json.dumps(
                c["function"]["arguments"])}} for c in m["tool_calls"]]}
        out.append(m)
    return out


def _nudge(p: Prepared, thinking: bool) -> dict[str, float]:
    """logit_bias for a tiny random model: end its reasoning at once, end raw values soon."""
    bias: dict[str, float] = {}
    index = {t: i for i, t in enumerate(p.vocab)}
    if thinking and p.family.reasoning and p.family.reasoning[1] in index:
        bias[str(index[p.family.reasoning[1]])] = 100
    for t in (*value_ends(p.family), *(("<|end|>",) if p.family.name == "gpt-oss" else ())):
        if t in index:
            bias[str(index[t])] = 8
    return bias


def _valid(calls: list[tuple[str, Any]]) -> str:
    if not calls:
        return "no call"
    for name, arguments in calls:
        try:
            jsonschema.validate(arguments, SCHEMAS[name])
        except (jsonschema.ValidationError, KeyError) as exc:
            return f"{name}: {str(exc).splitlines()[0]}"
    return ""


def check_template(p: Prepared, server: Server, protocols: bool) -> Row:
    from families_routes import forced_call, other_routes, reasoning, round_trip

    row = Row(p.name, p.family.name, p.family.codec.name)
    row.has_tools = "tool" in p.source or "function" in p.source
    info = inspect(p.gguf)  # the BOS / EOS the server gives the template (as llama.cpp does: the GGUF's)
    row.exact, problems, row.notes = compare(p.name, p.source, p.family, info.bos_token or p.family.bos_token,
                                             info.eos_token or p.family.eos_token)
    row.problems += [f"renders differently: {x}" for x in problems]
    r = server.post("/v1/chat/completions", {"model": p.model, "messages": _openai(HISTORY), "tools": TOOLS,
                                             "max_tokens": 1})
    row.renders = "ok" if r.status_code == 200 else f"{r.status_code}"
    if r.status_code != 200:
        row.problems.append(f"does not render the conversation: {r.json()['error']['message'][:160]}")
        return row
    try:
        prompt = _render(p, ASK)
    except Exception as exc:  # noqa: BLE001
        row.problems.append(f"render: {exc}")
        return row
    thinking = p.family.opens_reasoning(prompt)
    round_trip(p, row)
    forced_call(p, row, server, _nudge(p, thinking))
    reasoning(p, row, server, thinking)
    if protocols:
        other_routes(p, row, server, _nudge(p, thinking))
    return row
