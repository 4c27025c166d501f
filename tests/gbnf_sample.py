"""Random sentences of a GBNF grammar, for testing parsers on what a grammar lets a model write.

A small reader of the GBNF that localchat makes (literals, character classes, rule references,
groups, * + ? {m,n}); sampling prefers short expansions once a sentence grows long, so it ends."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

# Characters tried for a negated class: the ones parsers trip on come first.
PALETTE = list('<>/\\"\n {}[]:,=|') + list("aZ09_-.é中😀\t")


@dataclass
class Item:
    kind: str  # lit | cls | ref | group
    value: object
    low: int = 1
    high: int = 1  # -1: unbounded


class Grammar:
    def __init__(self, src: str) -> None:
        self.rules: dict[str, list[list[Item]]] = {}
        for line in src.splitlines():
            if "::=" in line and not line.lstrip().startswith("#"):
                name, _, body = line.partition("::=")
                self.rules[name.strip()] = self._alternatives(body.strip(), 0)[0]
        self.cost = self._costs()

    # -- reading -------------------------------------------------------------------------------

    def _alternatives(self, s: str, pos: int) -> tuple[list[list[Item]], int]:
        alts, seq = [], []
        while pos < len(s):
            c = s[pos]
            if c.isspace():
                pos += 1
            elif c == "|":
                alts.append(seq)
                seq, pos = [], pos + 1
            elif c == ")":
                break
            elif c == "(":
                inner, pos = self._alternatives(s, pos + 1)
                seq.append(Item("group", inner))
                pos += 1
            elif c == '"':
                text, pos = self._literal(s, pos + 1)
                seq.append(Item("lit", text))
            elif c == "[":
                cls, pos = self._class(s, pos + 1)
                seq.append(Item("cls", cls))
            elif c in "*+?":
                seq[-1].low, seq[-1].high = {"*": (0, -1), "+": (1, -1), "?": (0, 1)}[c]
                pos += 1
            elif c == "{":
                m = re.compile(r"\{\s*(\d+)\s*(,\s*(\d*)\s*)?\}").match(s, pos)
                assert m, s[pos:pos + 20]
                low = int(m.group(1))
                high = low if m.group(2) is None else (int(m.group(3)) if m.group(3) else -1)
                seq[-1].low, seq[-1].high = low, high
                pos = m.end()
            else:
                m = re.compile(r"[a-zA-Z0-9-]+").match(s, pos)
                assert m, s[pos:pos + 20]
                seq.append(Item("ref", m.group()))
                pos = m.end()
        alts.append(seq)
        return alts, pos

    @staticmethod
    def _char(s: str, pos: int) -> tuple[str, int]:
        if s[pos] != "\\":
            return s[pos], pos + 1
        e = s[pos + 1]
        if e in "xuU":
            n = {"x": 2, "u": 4, "U": 8}[e]
            return chr(int(s[pos + 2:pos + 2 + n], 16)), pos + 2 + n
        return {"n": "\n", "r": "\r", "t": "\t"}.get(e, e), pos + 2

    def _literal(self, s: str, pos: int) -> tuple[str, int]:
        out = []
        while s[pos] != '"':
            c, pos = self._char(s, pos)
            out.append(c)
        return "".join(out), pos + 1

    def _class(self, s: str, pos: int) -> tuple[tuple[bool, list[tuple[str, str]]], int]:
        negated = s[pos] == "^"
        pos += negated
        ranges = []
        while s[pos] != "]":
            a, pos = self._char(s, pos)
            b = a
            if s[pos] == "-" and s[pos + 1] != "]":
                b, pos = self._char(s, pos + 1)
            ranges.append((a, b))
        return (negated, ranges), pos + 1

    # -- sampling ------------------------------------------------------------------------------

    def _costs(self) -> dict[str, float]:
        """The length of each rule's shortest sentence (a fixpoint)."""
        cost = {name: float("inf") for name in self.rules}
        for _ in range(len(self.rules) + 2):
            for name, alts in self.rules.items():
                cost[name] = min(self._seq_cost(seq, cost) for seq in alts)
        return cost

    def _seq_cost(self, seq: list[Item], cost: dict[str, float]) -> float:
        total = 0.0
        for item in seq:
            if item.kind == "lit":
                one = len(item.value)  # type: ignore[arg-type]
            elif item.kind == "cls":
                one = 1
            elif item.kind == "ref":
                one = cost[item.value]  # type: ignore[index]
            else:
                one = min(self._seq_cost(s, cost) for s in item.value)  # type: ignore[union-attr]
            if item.low:  # (an optional part costs nothing, however long: inf * 0 would be nan)
                total += one * item.low
        return total

    def sample(self, rng: random.Random, budget: int = 300, start: str = "root") -> str:
        out: list[str] = []
        self._rule(start, rng, out, budget)
        return "".join(out)

    def _rule(self, name: str, rng: random.Random, out: list[str], budget: int) -> None:
        self._alts(self.rules[name], rng, out, budget)

    def _alts(self, alts: list[list[Item]], rng: random.Random, out: list[str], budget: int) -> None:
        if sum(map(len, out)) > budget:
            seq = min(alts, key=lambda s: self._seq_cost(s, self.cost))
        else:
            seq = rng.choice(alts)
        for item in seq:
            high = item.high if item.high >= 0 else item.low + 4
            n = item.low if sum(map(len, out)) > budget else rng.randint(item.low, max(item.low, high))
            for _ in range(n):
                self._item(item, rng, out, budget)

    def _item(self, item: Item, rng: random.Random, out: list[str], budget: int) -> None:
        if item.kind == "lit":
            out.append(item.value)  # type: ignore[arg-type]
        elif item.kind == "cls":
            negated, ranges = item.value  # type: ignore[misc]
            inside = lambda c: any(a <= c <= b for a, b in ranges)  # noqa: E731
            if negated:
                choices = [c for c in PALETTE if not inside(c)]
                out.append(rng.choice(choices[:6] + choices))
            else:
                a, b = rng.choice(ranges)
                out.append(chr(rng.randint(ord(a), ord(b))))
        elif item.kind == "ref":
            self._rule(item.value, rng, out, budget)  # type: ignore[arg-type]
        else:
            self._alts(item.value, rng, out, budget)  # type: ignore[arg-type]
