"""One JSON value, exactly (a `const`, an `enum`'s member), as GBNF that allows what JSON
allows around it: whitespace between tokens, a number written as `1` or `1.0`, and (up to
PERMUTED_KEYS keys) an object's keys in any order, since JSON Schema compares values, not text."""

from __future__ import annotations

import json
from itertools import permutations
from typing import Any

from .gbnf import literal

PERMUTED_KEYS = 3  # objects with more keys are written in the order given


def value_literal(value: Any) -> str:
    """GBNF matching `value`'s JSON text (no whitespace after it)."""
    if isinstance(value, bool) or value is None:
        return literal(json.dumps(value))
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not value.is_integer():
            return literal(repr(value))
        whole = int(value)
        return f'{literal(str(whole))} ( "." "0"+ )?' if abs(whole) < 10 ** 16 else literal(json.dumps(value))
    if isinstance(value, str):
        return literal(json.dumps(value, ensure_ascii=False))
    if isinstance(value, list):
        if not value:
            return '"[" ws "]"'
        return '"[" ws ' + ' "," ws '.join(f"{_group(value_literal(v))} ws" for v in value) + ' "]"'
    if isinstance(value, dict):
        if not value:
            return '"{" ws "}"'
        keys = list(value)
        orders = list(permutations(keys)) if len(keys) <= PERMUTED_KEYS else [tuple(keys)]
        bodies = ['"{" ws ' + ' "," ws '.join(
            f'{literal(json.dumps(k, ensure_ascii=False))} ws ":" ws {_group(value_literal(value[k]))} ws'
            for k in order) + ' "}"' for order in orders]
        return bodies[0] if len(bodies) == 1 else "( " + " | ".join(bodies) + " )"
    raise TypeError(f"not a JSON value: {value!r}")


def _group(body: str) -> str:
    return f"( {body} )" if " " in body and not body.startswith("(") else body
