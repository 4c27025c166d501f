"""A pattern as a deterministic automaton, written as GBNF rules (one per state).

llama.cpp's grammar engine follows every way a grammar can read the text so far: a pattern such
as `^(/)?([^/]+(/)?)+$` reads a run of n characters in 2^n ways, and judging a vocabulary there
takes minutes. The same pattern as a DFA reads each character one way. The tree from
regex_parse.py becomes a Thompson automaton, then a DFA by the subset construction over
character ranges; small enough (DFA_STATES), it is written out, else None (the caller writes the
tree as it is)."""

from __future__ import annotations

from collections.abc import Callable

from . import charsets as cs
from .regex_parse import Node

NFA_STATES = 4000
DFA_STATES = 160
ANY_CHAR: cs.Ranges = cs.complement(())


class _TooBig(Exception):
    pass


class _Nfa:
    def __init__(self) -> None:
        self.edges: list[list[tuple[cs.Ranges | None, int]]] = []  # None: an empty move

    def state(self) -> int:
        if len(self.edges) >= NFA_STATES:
            raise _TooBig
        self.edges.append([])
        return len(self.edges) - 1

    def build(self, node: Node, start: int) -> int:
        """Add `node` from `start`; the state it ends in."""
        kind = node[0]
        if kind == "lit":
            at = start
            for ch in node[1]:
                nxt = self.state()
                self.edges[at].append((((ord(ch), ord(ch)),), nxt))
                at = nxt
            return at
        if kind == "set":
            end = self.state()
            self.edges[start].append((node[1], end))
            return end
        if kind == "seq":
            at = start
            for item in node[1]:
                at = self.build(item, at)
            return at
        if kind == "alt":
            end = self.state()
            for option in node[1]:
                self.edges[self.build(option, start)].append((None, end))
            return end
        if kind == "rep":
            inner, lo, hi = node[1], node[2], node[3]
            at = start
            for _ in range(lo):
                at = self.build(inner, at)
            if hi is None:
                loop = self.state()
                self.edges[at].append((None, loop))
                self.edges[self.build(inner, loop)].append((None, loop))
                return loop
            end = self.state()
            self.edges[at].append((None, end))
            for _ in range(hi - lo):
                at = self.build(inner, at)
                self.edges[at].append((None, end))
            return end
        raise _TooBig  # an anchor inside: the caller keeps the tree


def _closure(nfa: _Nfa, states: frozenset[int]) -> frozenset[int]:
    todo, seen = list(states), set(states)
    while todo:
        for label, target in nfa.edges[todo.pop()]:
            if label is None and target not in seen:
                seen.add(target)
                todo.append(target)
    return frozenset(seen)


def _moves(nfa: _Nfa, states: frozenset[int]) -> list[tuple[cs.Ranges, frozenset[int]]]:
    """The DFA's moves from a set of NFA states: disjoint character ranges, each to its target set."""
    labelled = [(label, target) for s in states for label, target in nfa.edges[s] if label is not None]
    cuts = sorted({lo for label, _ in labelled for lo, _ in label} | {hi + 1 for label, _ in labelled for _, hi in label})
    out: dict[frozenset[int], list[tuple[int, int]]] = {}
    for a, b in zip(cuts, cuts[1:]):
        targets = frozenset(t for label, t in labelled if any(lo <= a and b - 1 <= hi for lo, hi in label))
        if targets:
            out.setdefault(targets, []).append((a, b - 1))
    return [(cs.normalize(ranges), targets) for targets, ranges in out.items()]


def dfa_rules(pieces: list[Node], add: Callable[[str], str], reserve: Callable[[], str],
              fill: Callable[[str, str], None]) -> str | None:
    """GBNF for the text matched by `pieces` one after another (a `("set", ANY_CHAR)` loop for an
    unanchored end, say), as DFA states; the body of the start state, or None if the automaton
    would be too big or a class holds no character a JSON string can."""
    nfa = _Nfa()
    try:
        start = nfa.state()
        end = nfa.build(("seq", tuple(pieces)), start)
    except _TooBig:
        return None
    first = _closure(nfa, frozenset({start}))
    names: dict[frozenset[int], str] = {}
    todo = [first]
    bodies: dict[frozenset[int], list[tuple[cs.Ranges, frozenset[int]]]] = {}
    while todo:
        states = todo.pop()
        if states in bodies:
            continue
        if len(bodies) >= DFA_STATES:
            return None
        moves = [(ranges, _closure(nfa, targets)) for ranges, targets in _moves(nfa, states)]
        bodies[states] = moves
        todo += [t for _, t in moves if t not in bodies]
    block = _minimal(bodies, end)
    for states in bodies:
        if block[states] not in names:
            names[block[states]] = reserve()
    done: set[int] = set()
    for states, moves in bodies.items():
        if block[states] in done:
            continue
        done.add(block[states])
        options = []
        for ranges, target in moves:
            char = cs.to_gbnf(ranges)
            if char is not None:
                options.append(f"{add(char) if ' ' in char else char} {names[block[target]]}")
        if end in states:
            options.append('""')
        if not options:
            return None  # (a state with no way on: the tree's own writing instead)
        fill(names[block[states]], " | ".join(options))
    return names[block[first]]


def _minimal(bodies: dict[frozenset[int], list[tuple[cs.Ranges, frozenset[int]]]], end: int) -> dict:
    """Each DFA state's block of equivalent states (Moore's refinement: same ending, same moves)."""
    block = {s: int(end in s) for s in bodies}
    while True:
        signature = {s: (block[s], tuple(sorted((r, block[t]) for r, t in moves))) for s, moves in bodies.items()}
        numbered: dict = {}
        new = {s: numbered.setdefault(sig, len(numbered)) for s, sig in signature.items()}
        if len(numbered) == len(set(block.values())):
            return new
        block = new
