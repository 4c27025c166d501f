"""The server's limits on a request (Settings, top-level keys of models.toml), each decided once,
here, on the neutral request, whatever the protocol it came in. A refusal is an InvalidRequest
naming a `field` of the neutral request (`stop`, `tools`, `tools.2.parameters`, `json_schema`,
`n`); each protocol's table (api/<protocol>'s ERRORS) says it in its own words (`stop_sequences`,
`options.stop`, `tools.2.function.parameters`). The edges parse and map; they check no limit."""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..errors import InvalidRequest
from ..grammars.metaschema import schema_problem
from ..models import Settings
from .constraints import OutputRules
from ..neutral import GenerationRequest


def check(request: GenerationRequest, settings: Settings) -> None:
    """Every limit that can be decided before a model is leased: stop strings, then the tools'
    count and size (before any schema is checked: that costs), then each schema's depth and
    validity against its draft's metaschema."""
    check_stops(request.sampling.stop or (), settings)
    check_tools(request.output, settings)
    check_schemas(request.output, settings)


def check_stops(stops: Sequence[str], settings: Settings) -> None:
    if len(stops) > settings.max_stop_strings:
        raise InvalidRequest(f"at most {settings.max_stop_strings} stop strings (max_stop_strings)", field="stop")
    if any(len(s) > settings.max_stop_chars for s in stops):
        raise InvalidRequest(f"a stop string may be at most {settings.max_stop_chars} characters (max_stop_chars)",
                             field="stop")


def check_tools(rules: OutputRules, settings: Settings) -> None:
    """The tools' count, and their schemas' size together as compact JSON in UTF-8 bytes."""
    if len(rules.tools) > settings.max_tools:
        raise InvalidRequest(f"{len(rules.tools)} tools; at most {settings.max_tools} per request (max_tools)",
                             field="tools")
    size = 0
    for tool in rules.tools:
        if tool.parameters is None:
            continue
        try:
            size += len(json.dumps(tool.parameters, separators=(",", ":"), ensure_ascii=False)
                        .encode("utf-8", "surrogatepass"))
        except (RecursionError, ValueError):
            continue  # too deep to measure (or NaN): check_schemas names it
        if size > settings.max_tool_schema_bytes:
            raise InvalidRequest(f"the tools' parameters schemas are more than {settings.max_tool_schema_bytes} "
                                 "bytes of JSON together (max_tool_schema_bytes)", field="tools")


def check_schemas(rules: OutputRules, settings: Settings) -> None:
    """Each schema against its draft's metaschema, nested at most max_schema_depth deep."""
    for i, tool in enumerate(rules.tools):
        if tool.parameters is not None and (problem := schema_problem(tool.parameters, settings.max_schema_depth)):
            raise InvalidRequest(problem, field=f"tools.{i}.parameters")
    if rules.json_schema is not None and (problem := schema_problem(rules.json_schema, settings.max_schema_depth)):
        raise InvalidRequest(problem, field="json_schema")


def check_n(n: int, parallel: int) -> None:
    """n choices decode together, one slot each: at most the model's `parallel`."""
    if n > parallel:
        raise InvalidRequest(f"at most {parallel} completions per request for this model (its `parallel` setting)",
                             field="n")


def max_tokens(asked: int | None, settings: Settings) -> int:
    """Tokens one choice may generate: what the request (or the model's default) asks, lowered to
    max_tokens_cap; none asked: the cap. A ceiling, in every protocol (Claude Code asks for 32000):
    an answer cut there ends as `length`, never a 400."""
    return settings.max_tokens_cap if asked is None else min(asked, settings.max_tokens_cap)
