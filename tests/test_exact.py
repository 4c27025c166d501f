"""The grammar's pieces that must take every valid value and nothing else, checked against
Python itself over many values: decimal bounds, keys that are no listed name, formats as their
standards write them; and the checker of written values (grammars/check.py). No model runs:
each GBNF body is read as a regular expression (grammars/formats.to_regex)."""

from __future__ import annotations

import json
import random
import re
from decimal import Decimal

import pytest

from localchat.grammars import library
from localchat.grammars.check import ValueChecker
from localchat.grammars.formats import holds, to_regex
from localchat.grammars.keys import string_not_in
from localchat.grammars.numbers import decimal_range

pytestmark = pytest.mark.fast


def regex(body: str, rules: dict[str, str] | None = None) -> re.Pattern[str]:
    return re.compile(to_regex("root", {**library.rules(), **(rules or {}), "root": body}), re.DOTALL)


BOUNDS = ["0", "1", "0.25", "0.5", "1.5", "2", "10", "0.249", "0.2501", "12.345", "-0.25", "-1", "-1.5", "-10.01", "99"]


def test_decimal_bounds_take_exactly_the_numbers_between():
    rng = random.Random(1)
    for _ in range(300):
        low = (Decimal(rng.choice(BOUNDS)), rng.random() < 0.5) if rng.random() < 0.8 else None
        high = (Decimal(rng.choice(BOUNDS)), rng.random() < 0.5) if rng.random() < 0.8 else None
        body = decimal_range(low, high)
        if body is None:  # no number at all between them
            assert low is not None and high is not None and (low[0] > high[0] or low[0] == high[0])
            continue
        rx = regex(body)
        for _ in range(200):
            x = Decimal(rng.randint(-2000, 2000)) / Decimal(rng.choice([1, 10, 100, 1000, 10000]))
            text = format(x, "f")
            if text.startswith("-") and x == 0:
                continue
            want = (low is None or x > low[0] or low[1] and x == low[0]) and \
                (high is None or x < high[0] or high[1] and x == high[0])
            assert bool(rx.fullmatch(text)) == want, (low, high, text)


def test_a_key_that_is_no_listed_name():
    names = {"a", "ab", "abc", "b", 'q"uote', "path/x", "é"}
    rules: dict[str, str] = {}

    def add(body: str) -> str:
        name = f"k{len(rules)}"
        rules[name] = body
        return name

    rx = regex(string_not_in(names, add), rules)
    for key in ["", "a", "ab", "abc", "abcd", "b", "ba", "c", 'q"uote', "q", "path/x", "path/", "é", "éé", "x y"]:
        written = json.dumps(key, ensure_ascii=False)
        assert bool(rx.fullmatch(written)) == (key not in names), key


@pytest.mark.parametrize("fmt, good, bad", [
    ("date", ["2024-02-29", "2000-02-29", "1999-12-31"], ["2023-02-29", "1900-02-29", "2023-13-01", "0000-01-01"]),
    ("date-time", ["2024-01-01T10:00:00Z", "2024-01-01t10:00:00.123456789+01:00"], ["2024-01-01T24:00:00Z",
                                                                                   "2024-01-01 10:00:00Z"]),
    ("email", ["john.doe@example.com", "a+b@c", '"x y"@z.org', "o'neil@[1.2.3.4]"], ["no at", "a@", ".a@b"]),
    ("uri", ["http://localhost:8000/v1", "https://example.com/*", "urn:isbn:0451450523", "mailto:a@b.c",
             "ecdsa-koblitz-pubkey:14RZ", "http://[::1]:80/#frag"], ["not a uri", "//no-scheme", "http://a b"]),
    ("hostname", ["example.com", "localhost.", "a-b.c"], ["-bad.com", "a" * 64 + ".com", "a..b", "a." * 127 + "bc"]),
    ("ipv6", ["::1", "2001:db8::1", "::ffff:1.2.3.4", "1:2:3:4:5:6:7:8"], ["1::2::3", "12345::", ":"]),
    ("uuid", ["123e4567-e89b-12d3-a456-426614174000", "123E4567-E89B-12D3-A456-426614174000"], ["123e4567"]),
    ("duration", ["P1D", "PT1M", "P1Y2M3DT4H5M6S", "P1W"], ["P", "PT", "P1D2Y"]),
    ("json-pointer", ["", "/a/b", "/a~1b"], ["a", "/a~2"]),
])
def test_formats_as_their_standards_say(fmt: str, good: list[str], bad: list[str]):
    for value in good:
        assert holds(fmt, value), value
    for value in bad:
        assert not holds(fmt, value), value


def test_the_checker_names_the_value_that_breaks_the_schema():
    schema = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True},
                                               "x": {"enum": [1, 2]}, "y": {"enum": [1, 2]}},
              "if": {"properties": {"x": {"const": 1}}}, "then": {"properties": {"y": {"const": 2}}}}
    checker = ValueChecker(schema)
    text = '{"tags": ["a", "b", "a"]'
    bad = checker.feed(text)
    assert bad is not None and bad.path == ("tags", 2) and text[bad.start:bad.end] == '"a"'  # told at the repeat
    checker.rewind(bad.start)
    assert checker.feed('"c"], "x": 1, "y": 1}') is not None  # the whole object breaks `then`: at y
    checker = ValueChecker(schema)
    text = '{"x": 1, "y": 1}'
    bad = checker.feed(text)
    assert bad is not None and bad.path == ("y",) and text[bad.start:bad.end] == "1"
    checker = ValueChecker({"type": "number", "multipleOf": 0.5})
    assert checker.feed("1.25") is None and checker.finish() is not None  # a number ends with the text
    assert ValueChecker({"type": "number", "multipleOf": 0.5}).feed("1.5 ") is None


@pytest.mark.parametrize("schema, draft4, good, bad", [
    ({"type": "integer"}, False, ["7", "-7", "7.0", "7.000", "2e3"], ["7.5", "7.", "1." + "0" * 41]),
    ({"type": "integer"}, True, ["7", "-7"], ["7.0", "2e3"]),  # drafts 3 and 4: 7.0 is no integer
    ({"type": "number", "multipleOf": 1}, True, ["6000", "6000.0", "2e3"], ["6000.5"]),  # a number in any draft
    ({"type": "number", "multipleOf": 1, "minimum": 0, "maximum": 99}, True, ["0", "99.0"], ["100", "-1", "1.5"]),
])
def test_whole_numbers_are_written_with_or_without_zeros(schema: dict, draft4: bool, good: list[str], bad: list[str]):
    from localchat.grammars.scalars import number_body
    rules: dict[str, str] = {}

    def define(hint: str, body: str | None) -> str:
        rules[hint] = body or ""
        return hint

    body = number_body(schema, schema["type"], lambda keyword: None, define, integral_floats=not draft4)
    rx = regex(body.removesuffix(" ws"), rules)
    assert [g for g in good if not rx.fullmatch(g)] == [] and [b for b in bad if rx.fullmatch(b)] == []


def test_strict_closes_only_objects_that_list_their_keys():
    """A strict answer's object that lists keys takes no others (objects.closed); one that
    lists none, or says what other keys take, or needs more keys than it lists, is as it was."""
    from localchat.grammars.schema import convert

    def grammar(schema: dict, closed: bool) -> str:
        c = convert(schema, closed=closed)
        return c.grammar(c.root_rule)

    for same in [{"type": "object"}, {"type": "object", "additionalProperties": {"type": "integer"}},
                 {"type": "object", "properties": {"a": {"type": "integer"}}, "minProperties": 2}]:
        assert grammar(same, True) == grammar(same, False), same
    listed = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert grammar(listed, True) != grammar(listed, False)
    assert grammar(listed, True) == grammar({**listed, "additionalProperties": False}, False)
