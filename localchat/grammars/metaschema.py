"""A request's JSON schemas checked against their draft's metaschema (with `jsonschema`)
before anything is converted: `{"type": 123}` is a clear error instead of a loose grammar.

The check is cached by a hash of the schema's canonical JSON, so an agent that sends the
same hundred tools with every request pays for it once."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from typing import Any

from jsonschema.exceptions import SchemaError
from jsonschema.validators import Draft202012Validator, validator_for

DEFAULT_MAX_DEPTH = 64
DEPTH_CAP = 96  # the most `max_schema_depth` may be: deeper, checking and converting outgrow Python's stack
CACHE_SIZE = 4096  # checked schemas remembered (a digest and a short message each)
_MESSAGE_CHARS = 300

_cache: OrderedDict[str, str | None] = OrderedDict()
_lock = threading.Lock()


def depth(value: Any) -> int:
    """How deeply JSON objects and arrays nest in `value` (a scalar: 0, `{}`: 1); no recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def schema_problem(schema: Any, max_depth: int = DEFAULT_MAX_DEPTH) -> str | None:
    """None if `schema` is a valid JSON Schema nested at most `max_depth` deep, else what is
    wrong with it. The draft is the one its `$schema` names, else 2020-12."""
    try:  # ASCII, so lone surrogates are escaped; NaN and Infinity (which Python's JSON reader takes) refused
        canonical = json.dumps(schema, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except RecursionError:
        return f"the schema is nested more than {max_depth} levels deep"
    except ValueError:
        return "the schema holds NaN or Infinity, which are not JSON numbers"
    except TypeError as exc:
        return f"the schema is not JSON: {exc}"
    key = hashlib.sha256(f"{max_depth}\n{canonical}".encode()).hexdigest()
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    problem = _check(schema, max_depth)
    with _lock:
        _cache[key] = problem
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return problem


def _check(schema: Any, max_depth: int) -> str | None:
    levels = depth(schema)
    if levels > max_depth:
        return f"the schema is nested {levels} levels deep; at most {max_depth} (max_schema_depth)"
    cls = _validator_class(schema)
    try:
        cls.check_schema(schema, format_checker=None)  # the structure only: formats differ between regex dialects
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        message = exc.message if len(exc.message) <= _MESSAGE_CHARS else exc.message[:_MESSAGE_CHARS] + "…"
        return f"not a valid JSON Schema ({_draft(cls)}): " + (f"at {where!r}: " if where else "") + message
    except RecursionError:
        return f"the schema is nested too deeply to check (max_schema_depth is {max_depth})"
    return None


def _validator_class(schema: Any) -> Any:
    declared = schema.get("$schema") if isinstance(schema, dict) else None
    if not isinstance(declared, str):  # absent, or not a string (which 2020-12's metaschema reports)
        return Draft202012Validator
    try:
        return validator_for(schema, default=Draft202012Validator)  # an unknown $schema: 2020-12
    except ValueError:  # a $schema that is not even a URI
        return Draft202012Validator


def _draft(cls: Any) -> str:
    m = re.fullmatch(r"Draft(\d{4})(\d\d)Validator", cls.__name__) or re.fullmatch(r"Draft(\d+)Validator", cls.__name__)
    return "draft " + "-".join(m.groups()) if m else cls.__name__


def clear_cache() -> None:
    with _lock:
        _cache.clear()
