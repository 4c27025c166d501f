"""--tools: preparing an agent's request, 100 tools and ~200 KB of schemas (checking every schema,
rendering the prompt, building the grammar, tokenizing), the first time and the next times, when the
compiled grammar and the tokens of the tool descriptions are reused (goals: <= 1000 ms the first
time, <= 50 ms the next)."""

from __future__ import annotations

import statistics
import time

from localchat.models import ModelSpec, Settings
from localchat.models.host import load_model


def tools_bench(spec: ModelSpec, rounds: int) -> None:
    """An agent's request: 100 tools, ~200 KB of schemas. Preparing it (checking every schema,
    rendering the prompt, building the grammar, tokenizing) the first time and the next times,
    when the compiled grammar and the tokens of the tool descriptions are reused."""
    from localchat.devtools.agent_tools import agent_tools, size

    from localchat.generation.constraints import OutputRules, ToolSpec
    from localchat.generation import ChatMessage, GenerationRequest
    from localchat.generation.prepare import prepare
    from localchat.grammars.metaschema import schema_problem

    tools = agent_tools()
    rules = OutputRules(tools=tuple(ToolSpec(t["function"]["name"], t["function"]["description"],
                                             t["function"]["parameters"]) for t in tools), tool_choice="auto")
    loaded = load_model(spec, settings=Settings(parallel=1, worker=False))
    messages = (ChatMessage.of("system", "You are a coding agent."), ChatMessage.of("user", "Fix the bug."))
    times = []
    for r in range(rounds + 1):
        start = time.perf_counter()
        assert all(schema_problem(t["function"]["parameters"]) is None for t in tools)
        prepared = prepare(GenerationRequest(messages=(*messages, ChatMessage.of("user", f"turn {r}")), output=rules),
                           loaded, None)
        times.append(time.perf_counter() - start)
    loaded.engine.close()
    print(f"model {spec.name}: {len(tools)} tools, {size(tools) / 1000:.0f} KB of schemas, "
          f"{len(prepared.generate.tokens)} prompt tokens")
    first, later = times[0] * 1000, statistics.median(times[1:]) * 1000
    print(f"prepared, first time : {first:7.1f} ms   (goal <= 1000 ms)  {'PASS' if first <= 1000 else 'MISS'}")
    print(f"prepared, next times : {later:7.1f} ms   (goal <= 50 ms)    {'PASS' if later <= 50 else 'MISS'}")
