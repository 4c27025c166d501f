"""The grammar layer: the GBNF check agrees with llama.cpp, and schema grammars only ever
produce valid JSON (a random-weight model is a good fuzzer: it wanders all over a grammar)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from localchat.engine import Constraint, LocalEngine, Generate, SamplingParams, Text
from localchat.errors import GrammarError
from localchat.families import FAMILIES, render_prompt
from localchat.generation.constraints import value_check
from localchat.grammars import validate
from localchat.grammars.schema import convert
from localchat.grammars.numbers import integer_range
from localchat.grammars.regex import pattern_to_gbnf
from conftest import tiny_engine

VALID = 10  # the first ten are ordinary grammars both must accept
GRAMMARS = [
    'root ::= "a"', 'root ::= [a-z]+ "!"', 'root ::= x\nx ::= "b" | "c" x', "root ::= [^\\x00-\\x1F]{2,5}",
    'root ::= ( "a" | "b" )* # comment', 'root ::= "\\u00e9\\U0001F30A"', 'root ::= .', 'root ::= ""',
    'root ::= "a"{3}', 'root ::= "a"\nother ::= "b"',
    'root ::=\n  "a"\n  | "b"',  # a newer llama.cpp takes this; ours, like the older parser, does not
    "root ::= [", 'root ::= "a', "root ::= undefined", 'root ::= x\nx ::= x "a"', 'root ::= ("a"?)*',
    'start ::= "a"', 'root ::= "a"{0,100000}', 'root ::= "\\q"', "root ::= []*", 'root ::= "a" "b" )',
    'root ::= *"a"', "root = 'a'", 'root ::= "\\x4"', 'root ::= x\nx ::= y "a"\ny ::= x?',
]

CHILD = r"""
import sys, json
import llama_cpp as C
from localchat.engine.llama import model  # quiets llama.cpp
C.llama_backend_init()
mp = C.llama_model_default_params(); mp.vocab_only = True
vocab = C.llama_model_get_vocab(C.llama_model_load_from_file(sys.argv[1].encode(), mp))
print(1 if C.llama_sampler_init_grammar(vocab, sys.argv[2].encode(), b"root") else 0, flush=True)
"""


@pytest.mark.parametrize("grammar", GRAMMARS)
def test_validator_never_passes_what_llama_cpp_rejects(grammar: str, tiny_models: dict[str, Path]):
    try:
        validate(grammar)
        ours = True
    except GrammarError:
        ours = False
    run = subprocess.run([sys.executable, "-c", CHILD, str(tiny_models["chatml"]), grammar],
                         capture_output=True, text=True, timeout=60)
    theirs = run.returncode == 0 and run.stdout.strip() == "1"
    assert theirs or not ours, f"passed a grammar llama.cpp rejects (rc {run.returncode})"
    if GRAMMARS.index(grammar) < VALID:
        assert ours and theirs
    # Stricter than llama.cpp where that is safer: a loop over something that can match nothing
    # ('("a"?)*', which llama.cpp's left-recursion check misses) and repetitions over 2000.


def test_integer_ranges_are_exact():
    for lo, hi in [(0, 9), (5, 123), (-50, 20), (-30, -4), (None, 5), (3, None), (123, 4567)]:
        rx = re.compile(integer_range(lo, hi).replace('"', "").replace(" ", ""))
        for n in range(-200, 5000):
            assert bool(rx.fullmatch(str(n))) == ((lo is None or n >= lo) and (hi is None or n <= hi)), (lo, hi, n)


def test_pattern_subset():
    assert pattern_to_gbnf("^[A-Z]{2}-\\d{3}$") is not None
    assert pattern_to_gbnf("(?=lookahead)") is None  # falls back to a plain string
    assert pattern_to_gbnf("(a)\\1") is None


SCHEMAS = [
    {"type": "object", "properties": {"shape": {"enum": ["circle", "square"]}, "dims": {
        "type": "object", "properties": {"radius": {"type": "number"}, "side": {"type": "number"},
                                         "w": {"type": "integer"}},
        "oneOf": [{"required": ["radius"]}, {"required": ["side"]}]}}, "required": ["shape", "dims"]},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "boolean"}},
     "not": {"required": ["a", "b"]}, "dependencies": {"c": ["a"]}},
    {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 9},
                                                          "kids": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                                                   "maxItems": 2}},
                        "required": ["v"]}}, "$ref": "#/$defs/node"},
    {"type": "array", "prefixItems": [{"type": "string", "format": "date"}, {"type": "string", "format": "time"}],
     "items": False, "minItems": 2},
    {"type": "object", "properties": {"when": {"type": "string", "format": "date-time"},
                                      "id": {"type": "string", "format": "uuid"},
                                      "mail": {"type": "string", "format": "email"}}, "required": ["when", "id", "mail"]},
    {"type": "object", "properties": {"n": {"type": "number", "minimum": 0, "maximum": 100},
                                      "k": {"type": "integer", "exclusiveMinimum": 3, "exclusiveMaximum": 9},
                                      "p": {"type": "number", "exclusiveMinimum": 0}}, "required": ["n", "k", "p"]},
    {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
                                      "tags": {"type": "array", "items": {"type": "string", "maxLength": 3},
                                               "minItems": 1, "maxItems": 3},
                                      "x": {"type": ["integer", "null"]}, "c": {"const": "fixed"}},
     "required": ["code", "tags", "x", "c"]},
    {"anyOf": [{"type": "string", "maxLength": 4}, {"type": "integer", "minimum": 10, "maximum": 20}]},
    {"allOf": [{"type": "object", "properties": {"a": {"type": "string", "maxLength": 3}}, "required": ["a"]},
               {"properties": {"b": {"type": "integer", "minimum": 1}}, "required": ["b"]}]},
    {"type": "object", "additionalProperties": {"type": "integer", "maximum": 5}, "maxProperties": 3},
]


@pytest.fixture(scope="module")
def fuzz_engine(tmp_path_factory) -> Iterator[LocalEngine]:
    yield from tiny_engine(tmp_path_factory)


def closed(schema, part: bool = False):
    """The schema with no keys beyond those listed where it says nothing of others (a random
    model would write other keys, of any length, as JSON Schema allows); not in an allOf's
    parts, where that would refuse the other parts' keys."""
    if isinstance(schema, list):
        return [closed(s, part) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed(v, k == "allOf") for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out and "patternProperties" not in out and not part:
        out["additionalProperties"] = False
    if "allOf" in out and "additionalProperties" not in out:
        out["unevaluatedProperties"] = False  # (the keys its parts list)
    return out


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_random_model_under_a_schema_grammar_only_writes_valid_json(fuzz_engine: LocalEngine, index: int):
    """The grammar, and the checking of written values where the converter says the grammar
    holds a keyword only in part (as the server builds them): every finished answer is valid."""
    schema = closed(SCHEMAS[index])
    converter = convert(schema)
    grammar = converter.grammar(converter.root_rule)
    validate(grammar)
    constraint = Constraint(grammar, checks=(value_check("", schema, converter.loosened),) if converter.loosened else ())
    prompt = fuzz_engine.tokenizer.tokenize(render_prompt(FAMILIES["chatml"].template, [{"role": "user", "content": "go"}]).segments)
    checker = jsonschema.validators.validator_for(schema)
    finished = 0
    for seed in range(8):
        async def run() -> tuple[str, str]:
            out, finish = "", ""
            params = SamplingParams(max_tokens=400, seed=seed, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
            async for event in fuzz_engine.generate(Generate(prompt, params, frozenset(), constraint)):
                if isinstance(event, Text):
                    out += event.text
                else:
                    finish = event.finish_reason
            return out, finish

        text, finish = asyncio.run(run())
        if finish == "length":
            continue
        finished += 1
        value = json.loads(text)
        errors = [e.message for e in checker(schema, format_checker=checker.FORMAT_CHECKER).iter_errors(value)]
        assert not errors, f"{text!r}: {errors}"
    assert finished >= 3, "most outputs end by themselves"
