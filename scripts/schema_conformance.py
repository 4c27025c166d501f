"""The converter's verdict on every *.json schema in a folder, as the server reaches it:

    scripts/schema-conformance DIR [--each] [--sample N] [--seed S]
                                   [--max-grammar-bytes B] [--max-schema-depth D]

- enforced: the grammar holds every keyword;
- loosened: it holds all but the listed keywords (what the x-localchat-loosened header says);
- refused: the request would be a 400, for the reason given (not JSON, not a valid schema,
  deeper than max_schema_depth, a broken regex, nothing satisfies it, a grammar over
  max_grammar_bytes).
With --each, one line per schema (verdict, grammar bytes, keywords or reason); then totals:
the verdicts, the loosened keywords by how many schemas have them, the refusals grouped by
reason, and the largest grammars."""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from localchat.errors import GrammarError
from localchat.grammars import validate
from localchat.grammars.gbnf import MAX_BYTES
from localchat.grammars.metaschema import DEFAULT_MAX_DEPTH, schema_problem
from localchat.grammars.schema import convert


@dataclass
class Verdict:
    name: str
    kind: str  # enforced | loosened | refused
    grammar_bytes: int = 0
    keywords: list[str] = field(default_factory=list)  # loosened: "path:keyword"
    reason: str = ""  # refused


def judge(path: Path, max_bytes: int, max_depth: int) -> Verdict:
    try:
        schema = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        return Verdict(path.name, "refused", reason=f"not JSON: {exc}")
    problem = schema_problem(schema, max_depth)
    if problem:
        return Verdict(path.name, "refused", reason=problem)
    try:
        converter = convert(schema, max_bytes=max_bytes)
        grammar = converter.grammar(converter.root_rule)
        validate(grammar, max_bytes=max_bytes)
    except GrammarError as exc:
        return Verdict(path.name, "refused", reason=exc.message)
    size = len(grammar.encode())
    if converter.loosened:
        return Verdict(path.name, "loosened", size, list(converter.loosened))
    return Verdict(path.name, "enforced", size)


def reason_kind(reason: str) -> str:
    """A refusal's reason without the parts that name one schema (paths, numbers, quoted text)."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "…", reason)
    return text.split(":")[0] if text.startswith("not a valid JSON Schema") else text[:110]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path)
    ap.add_argument("--each", action="store_true", help="a line per schema")
    ap.add_argument("--sample", type=int, help="only N schemas (seeded sample)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-grammar-bytes", type=int, default=MAX_BYTES)
    ap.add_argument("--max-schema-depth", type=int, default=DEFAULT_MAX_DEPTH)
    args = ap.parse_args()
    files = sorted(args.folder.glob("*.json"))
    if not files:
        sys.exit(f"no *.json files in {args.folder}")
    if args.sample and args.sample < len(files):
        files = sorted(random.Random(args.seed).sample(files, args.sample))
    started, verdicts = time.monotonic(), []
    for path in files:
        v = judge(path, args.max_grammar_bytes, args.max_schema_depth)
        verdicts.append(v)
        if args.each:
            detail = ", ".join(v.keywords) if v.kind == "loosened" else v.reason
            print(f"{v.name}\t{v.kind}\t{v.grammar_bytes}\t{detail}", flush=True)
    report(verdicts, time.monotonic() - started)


def report(verdicts: list[Verdict], seconds: float) -> None:
    n = len(verdicts)
    kinds = Counter(v.kind for v in verdicts)
    print(f"{n} schemas in {seconds:.1f} s")
    for kind in ("enforced", "loosened", "refused"):
        print(f"  {kind:9s}: {kinds[kind]:5d} ({100 * kinds[kind] / n:.1f}%)")
    by_keyword = Counter(k for v in verdicts for k in {e.rsplit(":", 1)[1] for e in v.keywords})
    if by_keyword:
        print("loosened, by keyword (schemas):", ", ".join(f"{k} {c}" for k, c in by_keyword.most_common()))
    reasons = Counter(reason_kind(v.reason) for v in verdicts if v.kind == "refused")
    for reason, count in reasons.most_common():
        print(f"refused {count:4d} × {reason}")
    largest = sorted((v for v in verdicts if v.grammar_bytes), key=lambda v: -v.grammar_bytes)[:3]
    if largest:
        print("largest grammars:", ", ".join(f"{v.name} {v.grammar_bytes} bytes" for v in largest))


if __name__ == "__main__":
    main()
