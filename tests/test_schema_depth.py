"""Deep and recursive schemas: a 200-long `$ref` chain and a recursive tree become loops of
grammar rules (no Python recursion) and a random-weight model writes valid JSON under them;
only a schema deeper than `max_schema_depth` itself is refused; repeated sub-schemas share rules."""

from __future__ import annotations

import asyncio
import copy
import json
import re
from collections.abc import Iterator

import jsonschema
import openai
import pytest

from localchat.engine import Constraint, LocalEngine, Generate, SamplingParams, Text
from localchat.families import FAMILIES, render_prompt
from localchat.grammars import validate
from localchat.grammars.gbnf import MAX_BYTES
from localchat.grammars.metaschema import schema_problem
from localchat.grammars.schema import convert
from conftest import tiny_engine
from localchat.devtools.tinymodels import vocabulary

CTX = 8192
CHAIN = {"$defs": {**{f"d{i}": {"type": "object", "properties": {"n": {"$ref": f"#/$defs/d{i + 1}"}},
                                "required": ["n"], "additionalProperties": False} for i in range(199)},
                   "d199": {"type": "integer", "minimum": 0, "maximum": 9}},
         "$ref": "#/$defs/d0"}
TREE = {"type": "object", "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 9},
                                         "kids": {"type": "array", "items": {"$ref": "#"}, "maxItems": 2}},
        "required": ["v", "kids"], "additionalProperties": False}


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> Iterator[LocalEngine]:
    yield from tiny_engine(tmp_path_factory, n_ctx=CTX)


def _no_blanks() -> dict[int, float]:
    """Whitespace between JSON tokens is optional: leaving it out keeps the outputs short."""
    tokens, _ = vocabulary(FAMILIES["chatml"])
    return {tokens.index(t): -100.0 for t in ("▁", "<0x20>", "<0x0A>", "<0x09>")}


def _generate(engine: LocalEngine, grammar: str, seed: int, max_tokens: int) -> tuple[str, str]:
    prompt = engine.tokenizer.tokenize(render_prompt(FAMILIES["chatml"].template, [{"role": "user", "content": "go"}]).segments)
    params = SamplingParams(max_tokens=max_tokens, seed=seed, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
                            logit_bias=_no_blanks())

    async def run() -> tuple[str, str]:
        out, finish = "", ""
        async for event in engine.generate(Generate(prompt, params, frozenset(), Constraint(grammar))):
            if isinstance(event, Text):
                out += event.text
            else:
                finish = event.finish_reason
        return out, finish

    return asyncio.run(run())


def test_a_200_long_ref_chain_converts_and_generates_valid_json(engine: LocalEngine):
    assert schema_problem(CHAIN) is None  # 4 levels of JSON: well within max_schema_depth
    converter = convert(CHAIN)
    grammar = converter.grammar(converter.root_rule)
    validate(grammar)
    assert not converter.loosened
    text, finish = _generate(engine, grammar, seed=1, max_tokens=2000)
    assert finish == "stop", text[-200:]
    value = json.loads(text)
    jsonschema.validate(value, CHAIN)
    assert text.count('{"n":') == 199  # the grammar forces the whole chain


def test_a_recursive_tree_is_a_recursive_rule_and_generates_valid_json(engine: LocalEngine):
    converter = convert(TREE)
    grammar = converter.grammar(converter.root_rule)
    validate(grammar)
    rules = dict(line.split(" ::= ", 1) for line in grammar.splitlines())
    tree = rules["root"]
    assert re.search(rf"\b{tree}\b", rules[tree] + " ".join(rules.values())), "a rule that refers to itself"
    finished = 0
    for seed in range(4):
        text, finish = _generate(engine, grammar, seed, max_tokens=1500)
        if finish == "length":
            continue
        finished += 1
        jsonschema.validate(json.loads(text), TREE)
    assert finished >= 2, "most trees end by themselves"


def test_repeated_sub_schemas_share_rules():
    address = {"type": "object", "properties": {
        f"line{i}": {"type": "string", "maxLength": 40 + i, "description": "a line"} for i in range(12)},
        "required": ["line0"]}
    schema = {"type": "object", "properties": {}}
    for i in range(400):  # the same sub-schema written out 400 times, each with its own description
        schema["properties"][f"p{i}"] = {**copy.deepcopy(address), "description": f"address number {i}"}
    assert len(json.dumps(schema)) > 300_000
    converter = convert(schema)
    grammar = converter.grammar(converter.root_rule)
    validate(grammar)  # within the default max_grammar_bytes
    assert len(grammar) < MAX_BYTES // 4
    assert grammar.count("line11") < 10  # the address's rules exist once


def test_only_a_schema_deeper_than_max_schema_depth_is_refused(client: openai.OpenAI):
    def nested(levels: int) -> dict:
        schema: dict = {"type": "integer"}
        for _ in range(levels - 1):
            schema = {"type": "array", "items": schema, "maxItems": 1}
        return schema

    ask = dict(model="tiny-chatml", messages=[{"role": "user", "content": "x"}], max_tokens=3)
    fmt = lambda s: {"type": "json_schema", "json_schema": {"name": "x", "schema": s}}  # noqa: E731
    client.chat.completions.create(**ask, response_format=fmt(nested(64)))  # 64 levels: the default limit
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(**ask, response_format=fmt(nested(65)))
    assert "max_schema_depth" in err.value.body["message"] and "64" in err.value.body["message"]
