"""The last pass over a generated grammar's rules: no left recursion, no duplicates; `assemble`
puts the whole grammar together.

- A rule whose body is only other rules (`a ::= b | c`: an anyOf, a `$ref`) can reach itself
  without writing a character (`node ::= ref-node | leaf` where `ref-node ::= node`). That is
  left recursion, which llama.cpp refuses. Such a cycle adds nothing to what its rules match,
  so every rule of it becomes the choice of what the cycle leads to outside itself.
- A rule that is another rule's name (`a ::= b`) is replaced by that name everywhere.
- Rules with the same body are one rule (repeated until nothing changes)."""

from __future__ import annotations

import re

from ..errors import GrammarError
from . import library

_NAME = re.compile(r"[a-zA-Z0-9-]+")
_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|[a-zA-Z0-9-]+|[^"\[a-zA-Z0-9-]+')


def _choices(body: str) -> list[str] | None:
    """The rule names of a body that is only a choice of rules, else None."""
    names = [p.strip() for p in body.split("|")]
    return names if all(_NAME.fullmatch(n) for n in names) else None


def compact(root: str, rules: dict[str, str]) -> tuple[str, dict[str, str]]:
    rules = dict(rules)
    _break_choice_cycles(rules)
    while True:
        alias = {n: b.strip() for n, b in rules.items() if _NAME.fullmatch(b.strip())}
        seen: dict[str, str] = {}
        for name, body in rules.items():
            if name not in alias:
                if body in seen:
                    alias[name] = seen[body]
                else:
                    seen[body] = name
        if not alias:
            return root, rules
        final = {n: _follow(n, alias) for n in alias}
        rules = {n: _rename(b, final) for n, b in rules.items() if n not in final}
        root = _rename(root, final)


def _follow(name: str, alias: dict[str, str]) -> str:
    seen = set()
    while name in alias:
        if name in seen:  # cycles of plain names were broken before
            raise GrammarError("the schema refers to itself without any value in between", param="schema")
        seen.add(name)
        name = alias[name]
    return name


def _rename(body: str, names: dict[str, str]) -> str:
    if not any(n in body for n in names):
        return body
    return "".join(names.get(t, t) if _NAME.fullmatch(t) else t for t in _TOKEN.findall(body))


def _break_choice_cycles(rules: dict[str, str]) -> None:
    """Every strongly connected group of choice rules that reach each other becomes one choice
    of the alternatives that leave the group (Tarjan's algorithm, without recursion)."""
    graph = {n: c for n, b in rules.items() if (c := _choices(b)) is not None}
    for group in _cycles(graph):
        members = set(group)
        outside = list(dict.fromkeys(c for n in group for c in graph[n] if c not in members))
        if not outside:
            raise GrammarError("the schema refers to itself without any value in between (a $ref or anyOf loop)",
                               param="schema")
        for n in group:
            rules[n] = " | ".join(outside)


def _cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on, stack, out = set(), [], []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            node, edges = work[-1]
            nxt = next((e for e in edges if e in graph), None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(graph[nxt])))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1 or node in graph[node]:
                    out.append(group)
    return out


def reachable(root_body: str, rules: dict[str, str]) -> dict[str, str]:
    """The rules `root_body` reaches (a state no path leads to is dropped)."""
    seen: set[str] = set()
    todo = [root_body]
    while todo:
        for name in library.references(todo.pop()):
            if name in rules and name not in seen:
                seen.add(name)
                todo.append(rules[name])
    return {n: b for n, b in rules.items() if n in seen}


def assemble(root_body: str, rules: dict[str, str]) -> str:
    """A whole grammar: `root`, the generated rules it reaches, and the library rules they use."""
    root_body, rules = compact(root_body, rules)
    rules = reachable(root_body, rules)
    lines = [f"root ::= {root_body}"] + [f"{n} ::= {b}" for n, b in rules.items()]
    needed = set().union(*(library.references(b) for b in [root_body, *rules.values()]))
    lines += [f"{n} ::= {b}" for n, b in library.closure(needed).items()]
    return "\n".join(lines) + "\n"
