"""Generated schema shapes: whatever a schema looks like ($ref loops, anyOf of itself, allOf of
references, loops over patterns that can match nothing), the converter either refuses it with
a clear reason or makes a grammar the validator (and so llama.cpp) accepts: no left recursion,
no Python recursion."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localchat.errors import GrammarError
from localchat.grammars import validate
from localchat.grammars.regex import PatternError, compile_pattern
from localchat.grammars.schema import convert

REASONS = ("cannot be satisfied", "refers to itself", "points nowhere", "points at")  # the refusals these schemas may get

ATOMS = st.sampled_from(["a", "b", "[a-z]", "\\d", ".", "\\s", "[^,]", "(a|)", "()", "(b*)", "(c?)", "^", "$", "\\w"])
QUANTIFIERS = st.sampled_from(["", "", "*", "+", "?", "{0,2}", "{2}", "{1,}", "*?"])


def _regex() -> st.SearchStrategy[str]:
    piece = st.builds(lambda a, q: a + q if a not in "^$" else a, ATOMS, QUANTIFIERS)
    return st.recursive(piece, lambda inner: st.one_of(
        st.builds(lambda xs: "".join(xs), st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda xs, q: "(" + "|".join(xs) + ")" + q, st.lists(inner, min_size=1, max_size=3), QUANTIFIERS),
        st.builds(lambda x, q: "(?:" + x + ")" + q, inner, QUANTIFIERS)), max_leaves=6)


REFS = ["#", "#/$defs/a", "#/$defs/b", "#/$defs/a/items", "#/$defs/b/anyOf/0"]
LEAVES = st.one_of(
    st.sampled_from([{"type": "string"}, {"type": "integer", "minimum": -5, "maximum": 7}, {"type": "number"},
                     {"type": "boolean"}, {"type": "null"}, {"enum": ["x", 1, None]}, {"const": "k"}, True, {},
                     {"type": "string", "maxLength": 3}, {"type": "number", "exclusiveMinimum": 0, "maximum": 2.5}]),
    st.builds(lambda p: {"type": "string", "pattern": p}, _regex()),
    st.builds(lambda r: {"$ref": r}, st.sampled_from(REFS)),
)


def _grow(children: st.SearchStrategy) -> st.SearchStrategy:
    keys = st.sampled_from(["p", "q", "r"])
    return st.one_of(
        st.builds(lambda props, req, extra: {"type": "object", "properties": props, "required": req,
                                             **({"additionalProperties": extra} if extra is not None else {})},
                  st.dictionaries(keys, children, max_size=3), st.lists(keys, max_size=2, unique=True),
                  st.one_of(st.none(), st.just(False), children)),
        st.builds(lambda item, lo: {"type": "array", "items": item, "minItems": lo}, children, st.integers(0, 2)),
        st.builds(lambda xs: {"anyOf": xs}, st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda xs: {"oneOf": xs}, st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda xs: {"allOf": xs}, st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda r, c: {"$ref": r, **c} if isinstance(c, dict) else {"$ref": r},
                  st.sampled_from(REFS), children),
        st.builds(lambda c: {"type": ["string", "null", "object"], "anyOf": [c, {"type": "null"}]}, children),
        st.builds(lambda props, xs: {"properties": props, "anyOf": xs}, st.dictionaries(keys, children, max_size=2),
                  st.lists(st.builds(lambda k: {"required": [k]}, keys), min_size=1, max_size=2)),
    )


SCHEMAS = st.builds(lambda root, a, b: {"allOf": [root], "$defs": {"a": a, "b": b}},
                    st.recursive(LEAVES, _grow, max_leaves=10), st.recursive(LEAVES, _grow, max_leaves=6),
                    st.builds(lambda xs: {"anyOf": xs}, st.lists(st.recursive(LEAVES, _grow, max_leaves=4),
                                                                   min_size=1, max_size=3)))


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(SCHEMAS)
def test_every_grammar_made_passes_the_validator(schema):
    try:
        converter = convert(schema)
        grammar = converter.grammar(converter.root_rule)
    except GrammarError as exc:
        assert any(reason in exc.message for reason in REASONS), (json.dumps(schema), exc.message)
        return
    validate(grammar)


@settings(max_examples=400, deadline=None, database=None)
@given(_regex())
def test_every_pattern_grammar_passes_the_validator(pattern):
    try:
        body = compile_pattern(pattern)
    except PatternError:
        pytest.fail(f"{pattern!r} is a valid regex")
    except Exception as exc:  # an unsupported feature (an anchor in the middle) is fine
        assert type(exc).__name__ == "Unsupported", (pattern, exc)
        return
    validate(f"root ::= {body}")


@pytest.mark.parametrize("pattern", ["(", "a)", "[a-", "a{2,1}", "*a", "a**", "(?P<1>x)", "\\"])
def test_a_broken_pattern_is_an_error(pattern):
    with pytest.raises(PatternError):
        compile_pattern(pattern)


def test_an_allof_ref_back_to_the_schema_inside_its_own_anyof_is_merged_once():
    """Found by the test above (CI of b9028c1): an anyOf branch whose allOf holds `$ref: "#"` merged
    the whole schema in again at each level, its anyOf with it, until max_schema_depth. The
    schema's constraints are in the branch already (merged into the anyOf's parent): A and A is A."""
    schema = {"allOf": [{"type": ["string", "null", "object"], "anyOf": [
        {"allOf": [{"type": "string", "pattern": "a"}, {"$ref": "#"}, {"$ref": "#/$defs/b"}]}, {"type": "null"}]}],
        "$defs": {"a": {"type": "string"}, "b": {"anyOf": [{"type": "string", "pattern": "b"}]}}}
    converter = convert(schema)
    validate(converter.grammar(converter.root_rule))
    twice = {"anyOf": [{"allOf": [{"$ref": "#/$defs/t"}, {"required": ["x"]}]}, {"type": "null"}],
             "allOf": [{"$ref": "#/$defs/t"}],
             "$defs": {"t": {"type": ["object", "null"], "properties": {"x": {"type": "integer"}}}}}
    converter = convert(twice)  # the same $ref in the schema and in a branch: the branch keeps its own keywords
    validate(converter.grammar(converter.root_rule))
