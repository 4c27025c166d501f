"""What a request asks of the output's shape, turned into a checked grammar for the engine:
raw GBNF, a JSON object, a JSON schema, or tool calls in the family's syntax."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ..engine import Constraint
from ..engine.sampling.checking import fail_points
from ..engine.params import Check
from ..errors import InvalidRequest
from ..families import Family
from ..errors import GrammarError
from ..grammars import validate
from ..neutral import OutputRules, ToolSpec  # noqa: F401 - re-exported (the tests build tool specs from here)
from ..grammars.schema import assemble, convert
from ..grammars.tools import after_reasoning, arguments_schema
from ..families.codecs.base import GrammarOptions
from ..models import Settings


def check(rules: OutputRules) -> None:
    """Everything about the output's shape that can be refused before any work, whatever the
    protocol: names and choices (the server's limits on tools and schemas: limits.py)."""
    names = [t.name for t in rules.tools]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise InvalidRequest(f"the name {dup!r} is used twice; tool names must be unique", field="tools")
    if rules.tool_choice not in ("auto", "none", "required") and rules.tool_choice not in names:
        raise InvalidRequest(f"it names {rules.tool_choice!r}, which is not among the tools"
                             + (f" ({', '.join(names)})" if names else ""), field="tool_choice")
    if rules.tool_choice == "required" and not rules.tools:
        raise InvalidRequest("a tool call is required but the request has no tools", field="tool_choice")
    if rules.grammar is not None and (rules.json_schema is not None or rules.json_object or rules.calls_tools):
        raise InvalidRequest("a grammar cannot be combined with a JSON output format or with tools", field="grammar")


def build(rules: OutputRules, tools: list[ToolSpec], family: Family, thinking: bool, max_bytes: int) -> Constraint | None:
    """The engine constraint for these rules (`tools`: codec_tools(rules), made once per request);
    every grammar is validated here, within the server's `max_bytes` (max_grammar_bytes). While
    the model is still thinking, the grammar waits for the end of its reasoning."""
    after_think = (family.reasoning[1],) if thinking and family.reasoning else ()
    if rules.grammar is not None:
        check_grammar(rules.grammar, max_bytes)
        return Constraint(rules.grammar)
    answer = {"type": "object"} if rules.json_object else rules.json_schema  # the final answer's JSON, if any
    if answer is not None and not rules.calls_tools:
        def make_json() -> tuple[str, tuple[Check, ...]]:
            grammar, loosened = (assemble("object", {}), ()) if rules.json_object else _schema(rules, max_bytes)
            grammar = after_reasoning(grammar) if after_think else grammar
            _validate_made(grammar, max_bytes, "json_schema" if rules.json_schema is not None else "json_object")
            return grammar, (value_check("", answer, loosened),) if loosened else ()

        key = ("json", rules.json_schema, rules.json_object, rules.strict, bool(after_think), max_bytes)
        grammar, checks = made_once(key, make_json)
        return Constraint(grammar, after_think, checks=checks)
    if not rules.calls_tools:
        return None
    chosen = _chosen(rules)
    auto, codec = rules.tool_choice == "auto", family.codec
    answer = answer if auto else None  # calls, or else the final answer in JSON: no free text, no trigger
    lazy = auto and answer is None
    if lazy and not codec.trigger:
        return None  # no text that starts a call: free output, read leniently

    def make_tools() -> tuple[str, tuple[str, ...], list[tuple[str, str]], tuple[Check, ...]]:
        loosened: list[str] = []
        options = GrammarOptions(parallel=rules.parallel_tool_calls, lazy=lazy, lead=bool(after_think) and not lazy,
                                 answer=answer, closed=rules.strict, loosened=loosened, max_bytes=max_bytes)
        try:
            grammar = codec.grammar(tools, options)
            loose = codec.loose_triggers(tools, options) if lazy else []
        except GrammarError as exc:  # the converter names the schema's field: tools.K.parameters or json_schema
            field = re.sub(r"^tools\.(\d+)", lambda m: f"tools.{chosen[int(m[1])]}", exc.param or "tools")
            raise neutral(exc, field) from None
        for made in (grammar, *dict.fromkeys(g for _, g in loose)):
            _validate_made(made, max_bytes, "tools")
        checks, unchecked = [], list(loosened)
        for tool in tools:  # a tool's arguments are checked where the syntax writes them as one JSON value
            entries = [e for e in loosened if e.partition("#")[0] == tool.name]
            anchor = codec.arguments_anchor(tool, tools) if entries else None
            if anchor is not None:
                checks.append(value_check(anchor, arguments_schema(tool.parameters), entries))
                unchecked = [e for e in unchecked if e not in entries]
        return grammar, tuple(unchecked), loose, tuple(checks)

    key = ("tools", [(t.name, t.parameters) for t in tools], codec.name, lazy, answer, rules.strict,
           rules.parallel_tool_calls, bool(after_think), max_bytes)
    grammar, loosened, loose, checks = made_once(key, make_tools)
    if lazy:  # free text, then the calls once a trigger is written (the syntax's own, or a call begun otherwise)
        return Constraint(grammar, (codec.trigger,), tuple(loose), after=after_think[0] if after_think else "",
                          loosened=loosened, checks=checks)
    return Constraint(grammar, after_think, loosened=loosened, checks=checks)


def value_check(anchor: str, schema: Any, entries: list[str] | tuple[str, ...]) -> Check:
    """What the grammar of `schema` holds only in part (`entries`), checked as the value after
    `anchor` is written (engine/sampling/checking.py)."""
    return Check(anchor, json.dumps(schema), fail_points(list(entries)), tuple(entries))


def codec_tools(rules: OutputRules) -> list[ToolSpec]:
    """The tools the model may call now (tool_choice naming one: only that one)."""
    return [rules.tools[i] for i in _chosen(rules)]


def _chosen(rules: OutputRules) -> list[int]:
    """The indexes in `rules.tools` of the tools codec_tools gives (a grammar error names a tool
    by its place among them: mapped back to the request's)."""
    return [i for i, t in enumerate(rules.tools) if rules.tool_choice in ("auto", "required", "none", t.name)]


def refuse_loosened(rules: OutputRules, loosened: tuple[str, ...], refuse_all: bool) -> None:
    """A 400 for the first keyword not enforced in a schema marked `strict` (or in any schema,
    with models.toml's `schema_loosened = "refuse"`)."""
    for entry in loosened:
        name, _, rest = entry.partition("#")
        where, _, keyword = rest.rpartition(":")
        if name:  # a tool's
            i = next(i for i, t in enumerate(rules.tools) if t.name == name)
            strict, field, why = rules.tools[i].strict, f"tools.{i}.parameters", "the tool's strict"
        else:
            strict, field, why = rules.strict, "json_schema", "strict"
        if strict or refuse_all:
            raise InvalidRequest(f"`{keyword}` at '#{where}' cannot be enforced by this server's grammar, and "
                                 f"{why if strict else 'the server setting schema_loosened'} asks for every keyword "
                                 "to be enforced (without that, the request is answered and the header "
                                 "x-localchat-loosened lists it)", field=field)


_GRAMMARS: OrderedDict[str, Any] = OrderedDict()  # a hash of what a grammar was made from → the checked grammar
_GRAMMARS_KEPT = 128
_lock = threading.Lock()


def made_once(key: Any, make: Callable[[], Any]) -> Any:
    """A checked grammar made once per schema set: agents send the same 100 tools every turn, and
    turning them into a grammar costs far more than hashing them. Failures are not kept."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    with _lock:
        if digest in _GRAMMARS:
            _GRAMMARS.move_to_end(digest)
            return _GRAMMARS[digest]
    grammar = make()
    with _lock:
        _GRAMMARS[digest] = grammar
        while len(_GRAMMARS) > _GRAMMARS_KEPT:
            _GRAMMARS.popitem(last=False)
    return grammar


def check_grammar(grammar: str, max_bytes: int) -> None:
    """A grammar as given (the request's raw `grammar`, a peer's): one llama.cpp accepts, within
    max_grammar_bytes, or a GrammarError; each checked once (kept, as the made ones are)."""
    made_once(("gbnf", grammar, max_bytes), lambda: validate(grammar, max_bytes=max_bytes) or True)


def check_given(constraint: Constraint, settings: Settings) -> None:
    """A constraint built elsewhere (a peer's request: peer.py), checked as this server's own are
    made: every grammar as check_grammar checks one, every lazy trigger a regular expression."""
    for grammar in (constraint.grammar, *(g for _, g in constraint.loose)):
        check_grammar(grammar, settings.max_grammar_bytes)
    for pattern, _ in constraint.loose:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise InvalidRequest(f"constraint: {exc}", param="grammar") from None


def _validate_made(grammar: str, max_bytes: int, field: str) -> None:
    """Check a grammar made from the request's schemas; an error names the field it came from."""
    try:
        validate(grammar, max_bytes=max_bytes)
    except GrammarError as exc:
        raise neutral(exc, field, "the grammar made from it is not usable: ") from None


def neutral(exc: GrammarError, field: str, lead: str = "") -> GrammarError:
    """A grammar error about a field of the neutral request (the converter names none)."""
    exc.message = lead + exc.message
    exc.args, exc.field, exc.param = (exc.message,), field, None
    return exc


def _schema(rules: OutputRules, max_bytes: int) -> tuple[str, tuple[str, ...]]:
    """The grammar for response_format's schema, and what it does not enforce."""
    assert rules.json_schema is not None
    try:
        converter = convert(rules.json_schema, max_bytes=max_bytes, closed=rules.strict)
        return converter.grammar(converter.root_rule), tuple(converter.loosened)
    except GrammarError as exc:
        raise neutral(exc, "json_schema") from None
