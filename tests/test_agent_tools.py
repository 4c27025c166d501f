"""Agent-sized tool sets (100 tools, ~200 KB of schemas): the forced-call grammar makes every
call valid for its schema, on each tool syntax. The prompt for such a set is ~60k tokens, more
than the test models hold, so a random tiny model writes under the grammar from a short prompt:
the grammar, not the prompt, is what makes a call valid."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import jsonschema
import pytest

from localchat.devtools.agent_tools import agent_tools
from localchat.engine import Done, LocalEngine, Generate, SamplingParams, Text
from localchat.families import FAMILIES, render_prompt
from localchat.generation.constraints import OutputRules, ToolSpec, build, codec_tools
from localchat.models import Settings
from localchat.neutral import ToolCallArguments, ToolCallStart
from localchat.devtools.tinymodels import write_tiny_model

TOOLS = agent_tools()
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
RULES = OutputRules(tools=tuple(ToolSpec(t["function"]["name"], t["function"]["description"],
                                         t["function"]["parameters"]) for t in TOOLS), tool_choice="required")


def generate(engine: LocalEngine, prompt: list[int], constraint, seed: int) -> tuple[str, str]:
    # A random model writes 100,000-character strings if let, and (JSON Schema allows them) other keys
    # in a free-form object without end: lean it towards closing them, and away from one more member.
    ends = {t: 6.0 for text in ('"', "}", "]") for t in engine.model.tokenize_bytes(text.encode(), False)}
    ends.update({t: -6.0 for t in engine.model.tokenize_bytes(b",", False)})

    async def run() -> tuple[str, str]:
        text, finish = "", ""
        params = SamplingParams(max_tokens=400, seed=seed, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
                                logit_bias=ends)
        async for event in engine.generate(Generate(prompt, params, frozenset(), constraint)):
            if isinstance(event, Text):
                text += event.text
            elif isinstance(event, Done):
                finish = event.finish_reason
        return text, finish

    return asyncio.run(run())


@pytest.mark.parametrize("family", ["chatml", "llama3", "mistral"])
def test_forced_calls_from_an_agent_sized_tool_set_validate(tmp_path: Path, family: str):
    fam = FAMILIES[family]
    constraint = build(RULES, codec_tools(RULES), fam, False, Settings().max_grammar_bytes)
    engine = LocalEngine(write_tiny_model(tmp_path / "m.gguf", fam, n_ctx=1024), n_ctx=1024, parallel=1,
                    visible=fam.visible_tokens)
    try:
        prompt = engine.tokenizer.tokenize(render_prompt(fam.template, [{"role": "user", "content": "go"}]).segments)
        complete = 0
        for seed in range(12):  # until two generations end (how many do is the model's choice)
            if complete == 2:
                break
            text, finish = generate(engine, prompt, constraint, seed)
            if finish == "length":
                continue  # a random model may write a long string; cut off, it cannot be judged
            complete += 1
            split = fam.splitter(codec_tools(RULES))
            pieces = split.push(text) + split.finish()
            names = [p.name for p in pieces if isinstance(p, ToolCallStart)]
            args: dict[int, str] = {}
            for p in pieces:
                if isinstance(p, ToolCallArguments):
                    args[p.index] = args.get(p.index, "") + p.fragment
            assert names, f"no call in {text[:200]!r}"
            for i, name in enumerate(names):
                jsonschema.validate(json.loads(args[i]), SCHEMAS[name])
        assert complete >= 2, "too few generations finished to judge"
    finally:
        engine.close()
