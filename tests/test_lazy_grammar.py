"""tool_choice "auto": free text until the trigger, then the grammar, starting exactly at the
trigger's end even when the model's token runs past it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import jsonschema

from localchat.engine import Constraint, LocalEngine, Generate, SamplingParams, Text
from localchat.families import FAMILIES, render_prompt
from localchat.grammars import validate
from localchat.families.codecs.base import GrammarOptions
from localchat.neutral import ToolSpec
from localchat.devtools.tinymodels import vocabulary, write_tiny_model

ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"],
       "additionalProperties": False}
STRADDLE = "x<tool_call>y"  # one token: text, the whole trigger, and more text


def generate(engine: LocalEngine, family, bias: dict[int, float], constraint: Constraint | None) -> str:
    prompt = render_prompt(family.template, [{"role": "user", "content": "add"}])

    async def run() -> str:
        out = ""
        params = SamplingParams(max_tokens=300, seed=1, logit_bias=bias)
        async for event in engine.generate(Generate(engine.tokenizer.tokenize(prompt.segments), params, frozenset(), constraint)):
            out += event.text if isinstance(event, Text) else ""
        return out

    return asyncio.run(run())


def test_a_token_running_past_the_trigger_is_replaced_by_the_trigger(tmp_path: Path):
    family = FAMILIES["chatml"]
    engine = LocalEngine(write_tiny_model(tmp_path / "m.gguf", family, n_ctx=1024, extra=(STRADDLE,)), n_ctx=1024)
    try:
        straddle = vocabulary(family, (STRADDLE,))[0].index(STRADDLE)
        grammar = family.codec.grammar([ToolSpec("add", parameters=ADD)], GrammarOptions(parallel=False, lazy=True))
        validate(grammar)
        # Without a constraint the model writes the straddling token as it is …
        assert generate(engine, family, {straddle: 100}, None).startswith(STRADDLE)
        # … under the lazy grammar, "x" and the trigger come out, then a call that parses.
        text = generate(engine, family, {straddle: 100}, Constraint(grammar, ("<tool_call>",)))
        assert text.startswith("x<tool_call>\n{")
        body = text[len("x<tool_call>\n"):].split("\n</tool_call>")[0]
        call = json.loads(body)
        assert call["name"] == "add"
        jsonschema.validate(call["arguments"], ADD)
    finally:
        engine.close()


def test_free_text_stays_free_until_the_trigger(tmp_path: Path):
    family = FAMILIES["chatml"]
    engine = LocalEngine(write_tiny_model(tmp_path / "m.gguf", family, n_ctx=1024), n_ctx=1024)
    try:
        grammar = family.codec.grammar([ToolSpec("add", parameters=ADD)], GrammarOptions(parallel=False, lazy=True))
        no_trigger = {vocabulary(family)[0].index("<tool_call>"): -100}  # a model that does not write it
        free = generate(engine, family, no_trigger, None)
        lazy = generate(engine, family, no_trigger, Constraint(grammar, ("<tool_call>",)))
        assert lazy == free  # no trigger: the grammar never touched the output
    finally:
        engine.close()
