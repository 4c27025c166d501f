"""Objects: the shapes an object may take (its keys, which are required, which must not appear,
what other keys may hold, how many keys in all) once anyOf/oneOf branches, `not: {required}`
and dependencies are worked out, and the rule for each shape.

Keys come in the order the schema lists them (`properties`), required or not; a key the
schema does not list may stand anywhere among them, unless `additionalProperties` is false
(JSON Schema's default is true, so that is the default here too). Small objects take their
keys in any order (ANY_ORDER_MAX listed keys at most: the grammar tracks which were written).
Counts (`minProperties`, `maxProperties`) are counted by the grammar. What a grammar cannot
hold exactly (oneOf branches that may overlap, a key matched by two patterns) it holds loosely
and says so (`loose`): the checker of completed values (check.py) does the rest."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from .combine import merge
from .converting import Converting
from .gbnf import literal
from .keys import string_not_in
from .kinds import disjoint, kinds
from .refrules import Unsatisfiable
from .refs import pointer
from .regex import PatternError, Unsupported, search_pattern

Schema = dict[str, Any] | bool
Loose = Callable[[str], None]
ANY_ORDER_MAX = 4  # objects listing at most this many keys take them in any order
MAX_SHAPES = 16  # shapes of one object (anyOf branches × `not` × dependencies) before some are held loosely
MAX_COUNT_STATES = 600  # (key, count) states for minProperties / maxProperties


@dataclass(frozen=True)
class ObjectShape:
    properties: dict[str, Schema]  # the listed keys, in the schema's order
    required: list[str]
    additional: Schema = True  # keys neither listed nor matching a pattern
    patterns: dict[str, Schema] = field(default_factory=dict)  # patternProperties
    names: Schema = True  # propertyNames
    excluded: frozenset[str] = frozenset()  # keys that must not appear
    low: int = 0  # minProperties
    high: int | None = None  # maxProperties


def object_rule(conv: Converting, schema: dict[str, Any], path: str) -> str:
    def resolve(branch: Schema) -> Schema:
        branch = conv.flatten(branch, path)
        for keyword in [k for k in ("anyOf", "oneOf", "if", "$ref", "not") if isinstance(branch, dict) and k in branch]:
            loose(keyword)  # a combinator inside a branch: not looked into (looser)
        if isinstance(branch, dict) and (types := kinds(branch)) is not None and "object" not in types:
            return False  # a branch for another type: no object matches it
        values = [branch.get("const")] if isinstance(branch, dict) and "const" in branch else \
            branch.get("enum") if isinstance(branch, dict) else None
        if isinstance(values, list) and not any(isinstance(v, dict) for v in values):
            return False
        return branch

    def loose(keyword: str) -> None:
        conv.loose(path, keyword)

    if isinstance(schema.get("oneOf"), list) and len(schema["oneOf"]) > 1 and \
            not disjoint(schema["oneOf"], conv.doc):  # type: ignore[attr-defined]
        loose("oneOf")  # one of them, held as any of them
    bodies = []
    for shape in object_shapes(schema, resolve, loose):
        for option in ([closed(shape), shape] if conv.closed else [shape]):
            try:
                bodies.append(_body(conv, option, path, loose))
                break
            except Unsatisfiable:  # (closed, too few keys for minProperties: open)
                continue
    if not bodies:
        raise Unsatisfiable
    return conv.add(path, " | ".join(dict.fromkeys(bodies)))


# -- shapes --------------------------------------------------------------------------------------

def object_shapes(schema: dict[str, Any], resolve: Callable[[Schema], Schema], loose: Loose) -> list[ObjectShape]:
    shapes = [_shape(schema, loose)]
    for key in ("oneOf", "anyOf"):
        branches = [resolve(b) for b in schema.get(key) or []]
        if branches:
            shapes = [both for shape in shapes for b in branches if b is not False
                      if (both := combine(shape, _shape(b, loose) if isinstance(b, dict) else _shape({}, loose),
                                          loose)) is not None]
    shapes = [s for shape in shapes for s in _apply_not(shape, schema.get("not"), loose)]
    shapes = [s for shape in shapes for s in _apply_dependencies(shape, schema, loose)]
    if len(shapes) > MAX_SHAPES:  # too many: the first ones, then the rest held loosely as one
        loose("dependencies" if "dependencies" in schema or "dependentRequired" in schema else "anyOf")
        shapes = shapes[:MAX_SHAPES]
    return shapes


def closed(shape: ObjectShape) -> ObjectShape:
    """A strict answer's object: one that lists its keys (`properties`, `patternProperties`)
    and leaves the others open takes none of them, as OpenAI's strict mode asks every object to
    say and XGrammar's strict_mode assumes. A valid value still, only a narrower one: under open
    objects a small model writes the schema itself back as keys until max_tokens. An object
    that lists no keys stays a free map."""
    if shape.additional is True and (shape.properties or shape.patterns):
        return replace(shape, additional=False)
    return shape


def _shape(schema: dict[str, Any], loose: Loose) -> ObjectShape:
    props = schema.get("properties")
    patterns = schema.get("patternProperties")
    additional = schema.get("additionalProperties", True)
    if "additionalProperties" not in schema and "unevaluatedProperties" in schema:
        additional = schema["unevaluatedProperties"]  # the keys nothing else evaluated: those, here
        if any(k in schema for k in ("if", "dependentSchemas", "not", "$ref", "$dynamicRef")):
            loose("unevaluatedProperties")  # a condition may evaluate more keys: any key, checked
            additional = True
    low, high = _count(schema.get("minProperties")), schema.get("maxProperties")
    return ObjectShape(dict(props) if isinstance(props, dict) else {},
                       list(dict.fromkeys(k for k in schema.get("required") or [] if isinstance(k, str))),
                       additional, dict(patterns) if isinstance(patterns, dict) else {},
                       schema.get("propertyNames", True), low=low,
                       high=_count(high) if isinstance(high, (int, float)) and not isinstance(high, bool) else None)


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    return max(int(-(-value // 1)), 0)


def key_schema(shape: ObjectShape, key: str) -> Schema:
    """What the value of `key` must be in an object of this shape."""
    if key in shape.excluded:
        return False
    matched = [s for p, s in shape.patterns.items() if _matches(p, key)]
    own = shape.properties[key] if key in shape.properties else (True if matched else shape.additional)
    for sub in matched:
        own = merge(own, sub)
    return own


def combine(a: ObjectShape, b: ObjectShape, loose: Loose) -> ObjectShape | None:
    """An object of both shapes (None if there is none). A key one lists and the other does not
    meets the other's patterns or additionalProperties."""
    props: dict[str, Schema] = {}
    for key in [*a.properties, *(k for k in b.properties if k not in a.properties)]:
        props[key] = merge(key_schema(a, key), key_schema(b, key))
    if (a.patterns and (b.patterns or b.additional is not True)) or (b.patterns and a.additional is not True):
        loose("patternProperties")  # two objects' patterns and extra keys at once: held as either's
    required = list(dict.fromkeys(a.required + b.required))
    excluded = a.excluded | b.excluded | {k for k, s in props.items() if s is False}
    if any(k in excluded for k in required):
        return None
    high = b.high if a.high is None else a.high if b.high is None else min(a.high, b.high)
    return ObjectShape({k: s for k, s in props.items() if s is not False}, required,
                       merge(a.additional, b.additional), {**a.patterns, **b.patterns}, merge(a.names, b.names),
                       excluded, max(a.low, b.low), high)


def _apply_not(shape: ObjectShape, negated: Any, loose: Loose) -> list[ObjectShape]:
    """`not: {required: [...]}` (or anyOf of such): one shape per listed key left out."""
    if negated is None or negated is False:
        return [shape]
    if negated is True:
        return []
    if not isinstance(negated, dict):
        return [shape]
    groups = [negated] if "anyOf" not in negated else [g for g in negated["anyOf"] if isinstance(g, dict)]
    if any(set(g) - {"required", "description", "title", "anyOf"} for g in groups) or \
            "anyOf" in negated and set(negated) - {"anyOf", "description", "title"} or "oneOf" in negated:
        loose("not")
        return [shape]
    shapes = [shape]
    for group in groups:
        keys = [k for k in group.get("required") or [] if isinstance(k, str)]
        if not keys:
            continue  # not {} : nothing passes... unless it had other keywords (loosened above)
        shapes = [replace(s, excluded=s.excluded | {k}, properties={p: v for p, v in s.properties.items() if p != k})
                  for s in shapes for k in keys if k not in s.required]
    return shapes


def _apply_dependencies(shape: ObjectShape, schema: dict[str, Any], loose: Loose) -> list[ObjectShape]:
    deps: dict[str, Any] = {}
    for word in ("dependencies", "dependentRequired", "dependentSchemas"):
        if isinstance(schema.get(word), dict):
            deps.update(schema[word])
    shapes = [shape]
    for key, needs in deps.items():
        if isinstance(needs, list):
            needed: ObjectShape | None = replace(_shape({}, loose), required=[n for n in needs if isinstance(n, str)])
        elif isinstance(needs, dict):
            if set(needs) - {"properties", "required", "additionalProperties", "patternProperties", "propertyNames",
                             "minProperties", "maxProperties", "type", "description", "title"} or \
                    (kinds(needs) or {"object"}) != {"object"}:
                loose("dependentSchemas" if "dependentSchemas" in schema else "dependencies")
                continue
            needed = _shape(needs, loose)
        elif needs is False:
            needed = None
        else:
            continue
        out = []
        for s in shapes:
            if key in s.excluded:
                out.append(s)
                continue
            present = combine(replace(s, required=list(dict.fromkeys([*s.required, key]))), needed, loose) \
                if needed is not None else None
            if key in s.required:
                out += [present] if present is not None else []
                continue
            out.append(replace(s, excluded=s.excluded | {key},
                               properties={p: v for p, v in s.properties.items() if p != key}))
            if present is not None:
                out.append(present)
        shapes = out
    return shapes


# -- the rule for one shape ----------------------------------------------------------------------

def _body(conv: Converting, shape: ObjectShape, path: str, loose: Loose) -> str:
    keys = [k for k in shape.properties if k not in shape.excluded]
    keys += [k for k in shape.required if k not in shape.properties]
    members: list[tuple[str, bool]] = []
    for key in keys:
        required = key in shape.required
        try:
            if not _name_allowed(conv, key, shape.names):
                raise Unsatisfiable
            where = pointer(path, "properties", key)
            value = conv.child(key_schema(shape, key), where)
            members.append((conv.add(pointer(where, "kv"), f'{literal(_dump(key))} ":" ws {value}'), required))
        except Unsatisfiable:
            if required:
                raise
    extra = _extra(conv, shape, set(keys) | shape.excluded, path, loose)
    low, high = shape.low, shape.high
    if high is not None and high < sum(r for _, r in members) or extra is None and low > len(members):
        raise Unsatisfiable
    if extra is None and (high is None or high >= len(members)) and low <= sum(r for _, r in members):
        low, high = 0, None  # the counts hold whatever is written
    if 1 < len(members) <= ANY_ORDER_MAX and 2 ** len(members) * ((high if high is not None else low) + 1) \
            <= MAX_COUNT_STATES:
        return conv.shared(("any order", tuple(members), extra, low, high),
                           lambda: _any_order(conv, members, extra, low, high, path))
    if (len(members) + 1) * ((high if high is not None else low) + 1) > MAX_COUNT_STATES:
        loose("maxProperties" if high is not None else "minProperties")
        low, high = 0, None
    return conv.shared(("in order", tuple(members), extra, low, high),
                       lambda: _in_order(conv, members, extra, low, high, path))


def _in_order(conv: Converting, members: list[tuple[str, bool]], extra: str | None, low: int, high: int | None,
              path: str) -> str:
    """The members in their order, each required one present, extra keys anywhere among them,
    at least `low` and at most `high` keys in all. A state is (members passed, keys written):
    the count stops at `low` when there is no `high`. Each text has one way through: an extra
    key is written before the optional members are skipped (`after` rules), a member after
    (`skip` rules); with extra keys allowed at every skipped place, llama.cpp's stacks would
    multiply by the members at each extra key (eslintrc's rules: 15 s a token)."""
    n = len(members)
    top = high if high is not None else low
    required_from = [sum(r for _, r in members[i:]) for i in range(n + 1)]

    def clamp(c: int) -> int:
        return min(c, low) if high is None else c

    def alive(i: int, c: int) -> bool:
        if high is not None and c + required_from[i] > high:
            return False
        return extra is not None or c + (n - i) >= low

    states = {(kind, i, c) for kind in ("after", "skip") for i in range(n + 1) for c in range(top + 1) if alive(i, c)}

    def options(kind: str, i: int, c: int) -> list[str]:
        out = []
        room = high is None or c < high
        if kind == "after":  # an extra key here, or on to the members
            if extra is not None and room and ("after", i, clamp(c + 1)) in states:
                out.append(f'"," ws {extra} {{after {i} {clamp(c + 1)}}}')
            if ("skip", i, c) in states:
                out.append(f"{{skip {i} {c}}}")
            return out
        if i < n and room and ("after", i + 1, clamp(c + 1)) in states:
            out.append(f'"," ws {members[i][0]} {{after {i + 1} {clamp(c + 1)}}}')
        if i < n and not members[i][1] and ("skip", i + 1, c) in states:
            out.append(f"{{skip {i + 1} {c}}}")
        if i == n and c >= low:
            out.append('""')
        return out

    while dead := {st for st in states if not options(*st)}:  # states that cannot finish
        states -= dead
    names = {st: conv.reserve(pointer(path, f"{st[0]}{st[1]}" + (f"n{st[2]}" if top else "")))
             for st in sorted(states, key=lambda st: (-st[1], -st[2], st[0]))}
    for st, name in names.items():
        body = " | ".join(options(*st))
        conv.fill(name, re.sub(r"\{(after|skip) (\d+) (\d+)\}", lambda m: names[(m[1], int(m[2]), int(m[3]))], body))

    def state(i: int, c: int) -> str | None:
        return names.get(("after", i, clamp(c)))

    firsts = []
    if extra is not None and (high is None or high >= 1) and (nxt := state(0, 1)):
        firsts.append(f"{extra} {nxt}")
    for i, (rule, required) in enumerate(members):
        if (high is None or high >= 1) and (nxt := state(i + 1, 1)):
            firsts.append(f"{rule} {nxt}")
        if required:
            break
    else:
        if low == 0:
            firsts.append('""')
    if not firsts:
        raise Unsatisfiable
    return conv.add(path, f'"{{" ws ( {" | ".join(firsts)} ) "}}" ws')


def _any_order(conv: Converting, members: list[tuple[str, bool]], extra: str | None, low: int, high: int | None,
               path: str) -> str:
    """A few members in any order, each at most once, the required ones all present, extra keys
    anywhere, between `low` and `high` keys in all: a state is the set of members written so far
    and (when counted) how many keys; the count stops at `low` when there is no `high`."""
    n = len(members)
    required = frozenset(i for i, (_, r) in enumerate(members) if r)
    counted = bool(low) or high is not None
    names: dict[tuple[frozenset[int], int], str] = {}

    def clamp(c: int) -> int:
        return 0 if not counted else min(c, low) if high is None else c

    def live(done: frozenset[int], c: int) -> bool:  # the object can still be closed from here
        return high is None or c + len(required - done) <= high

    def room(c: int) -> bool:
        return high is None or c < high

    def state(done: frozenset[int], c: int) -> str:
        key = (done, clamp(c))
        if key not in names:
            names[key] = conv.reserve(pointer(path, "set" + "".join(str(i) for i in sorted(done))
                                               + (f"n{key[1]}" if counted else "")))
            options = [f'"," ws {members[i][0]} {state(done | {i}, c + 1)}' for i in range(n)
                       if i not in done and room(c) and live(done | {i}, c + 1)]
            if extra is not None and room(c) and live(done, c + 1):
                options.append(f'"," ws {extra} {state(done, c + 1)}')
            if required <= done and c >= low:
                options.append('""')
            conv.fill(names[key], " | ".join(options))
        return names[key]

    firsts = [f"{members[i][0]} {state(frozenset({i}), 1)}" for i in range(n) if room(0) and live(frozenset({i}), 1)]
    if extra is not None and room(0) and live(frozenset(), 1):
        firsts.append(f"{extra} {state(frozenset(), 1)}")
    if not required and low == 0:
        firsts.append('""')
    if not firsts:
        raise Unsatisfiable
    return conv.add(path, f'"{{" ws ( {" | ".join(firsts)} ) "}}" ws')


def _extra(conv: Converting, shape: ObjectShape, taken: set[str], path: str, loose: Loose) -> str | None:
    """One key-value pair of a key the object does not list, or None if there can be none."""
    pairs = []
    patterns = list(shape.patterns.items())
    if patterns and (len({_dump(s) for _, s in patterns}) > 1 or shape.additional is not False
                     or any(_matches(p, k) for p, _ in patterns for k in taken)):
        loose("patternProperties")  # a key two of them match, or one the object lists, is held by either
    for pattern, value in patterns:
        where = pointer(path, "patternProperties", pattern)
        try:
            key = f'"\\"" {search_pattern(pattern, conv.rules_at(where))} "\\""'
        except Unsupported:
            loose("patternProperties")
            key = f'"\\"" {conv.add(pointer(where, "key"), "char*")} "\\""'
        except PatternError as exc:
            raise conv.invalid_pattern(where, exc) from None
        try:
            pairs.append(conv.add(pointer(where, "kv"), f'{key} ws ":" ws {conv.child(value, where)}'))
        except Unsatisfiable:
            continue
    if shape.additional is not False:
        where = pointer(path, "additionalProperties")
        try:
            value = conv.child(shape.additional, where)
            listed = _names_listed(shape.names)
            if listed is not None:  # propertyNames an enum: those of its names not taken
                names = [n for n in listed if n not in taken]
                if not names:
                    raise Unsatisfiable
                key = "( " + " | ".join(literal(_dump(n)) for n in names) + " ) ws"
            elif shape.names is not True:
                if taken:
                    loose("propertyNames")  # the key's own rule: it may spell a listed key too
                key = conv.child(merge({"type": "string"}, shape.names), pointer(path, "propertyNames"))
            else:
                key = string_not_in(taken, lambda body: conv.add(pointer(path, "key"), body)) + " ws"
            pairs.append(conv.add(pointer(where, "kv"), f'{key} ":" ws {value}'))
        except Unsatisfiable:
            pass
    return conv.add(pointer(path, "extra"), " | ".join(pairs)) if pairs else None


def _names_listed(names: Schema) -> list[str] | None:
    """The names a propertyNames schema that only lists them allows (None: it does more)."""
    if not isinstance(names, dict) or set(names) - {"enum", "const", "type", "description", "title"}:
        return None
    values = [names["const"]] if "const" in names else names.get("enum")
    if not isinstance(values, list) or names.get("type", "string") != "string":
        return None
    return list(dict.fromkeys(v for v in values if isinstance(v, str)))


def _name_allowed(conv: Converting, key: str, names: Schema) -> bool:
    if names is True or names == {}:
        return True
    return conv.valid(key, names)


def _matches(pattern: str, key: str) -> bool:
    try:
        return re.search(pattern, key) is not None
    except (re.error, RecursionError, OverflowError):
        return False


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
