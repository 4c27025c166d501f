"""How well JSON schemas become grammars, and whether constrained output validates.

    scripts/eval-schemas DIR [--generate N] [--max-tokens M] [--seed S] [--model NAME] [--config PATH]

1. Every *.json schema in DIR is converted to GBNF and checked by localchat's validator and
   by llama.cpp itself (in a child process, so a crash counts as a rejection, not a stop).
2. With --generate N, N schemas (seeded sample) are filled in under their grammar by the model
   (--model; default: the registry's default), and each output is sorted into: ended by itself
   and valid; ended by itself and NOT valid; cut by max_tokens. The first and the invalid ones
   are the engine's business.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jsonschema

from localchat.models.host import load_model
from localchat.engine import Constraint, Done, Generate, Text
from localchat.engine.params import knob_params
from localchat.errors import GrammarError
from localchat.families import render_prompt
from localchat.grammars import validate
from localchat.grammars.schema import convert
from localchat.models import Registry, Settings

CHILD = r"""
import sys, json
from pathlib import Path
import llama_cpp as C
from localchat.engine.llama.model import Model  # loads the vocabulary the engine's way, llama.cpp's log quiet
vocab = Model(Path(sys.argv[1]), vocab_only=True).vocab
for i, g in enumerate(json.load(open(sys.argv[2]))):
    if i < int(sys.argv[3]):
        continue
    s = C.llama_sampler_init_grammar(vocab, g.encode(), b"root")
    print(i, 1 if s else 0, flush=True)
    if s:
        C.llama_sampler_free(s)
"""


def llama_accepts(model: Path, grammars: list[str]) -> list[bool]:
    with tempfile.TemporaryDirectory(prefix="localchat-eval-") as tmp:
        path = Path(tmp) / "grammars.json"
        path.write_text(json.dumps(grammars))
        return _child_verdicts(model, path, len(grammars))


def _child_verdicts(model: Path, path: Path, count: int) -> list[bool]:
    verdict: dict[int, bool] = {}
    start = 0
    while start < count:
        proc = subprocess.run([sys.executable, "-c", CHILD, str(model), str(path), str(start)],
                              capture_output=True, text=True)
        for line in proc.stdout.split("\n"):
            if line.strip():
                i, ok = line.split()
                verdict[int(i)] = ok == "1"
        done = max(verdict, default=start - 1)
        if proc.returncode > 0:  # a Python error in the child, not llama.cpp failing on a grammar
            sys.exit(f"eval-schemas: the llama.cpp check could not run:\n{proc.stderr[-3000:]}")
        if proc.returncode < 0:  # killed by a signal: llama.cpp crashed on grammar done+1
            verdict[done + 1] = False
            done += 1
        start = done + 1
    return [verdict[i] for i in range(count)]


def convert_all(files: list[Path]) -> tuple[dict[Path, str], dict[Path, str], dict[Path, list[str]]]:
    grammars, failures, loosened = {}, {}, {}
    for f in files:
        try:
            c = convert(json.loads(f.read_text()))
            g = c.grammar(c.root_rule)
            validate(g)
            grammars[f] = g
            if c.loosened:
                loosened[f] = c.loosened
        except (GrammarError, ValueError) as exc:
            failures[f] = str(exc)
    return grammars, failures, loosened


async def generate(loaded, schema: dict, grammar: str, name: str, max_tokens: int, seed: int) -> tuple[str, str]:
    messages = [{"role": "user", "content": f"Call the function {name}. Reply with its arguments as one JSON "
                                            f"object that follows this JSON schema:\n{json.dumps(schema)}"}]
    prompt = render_prompt(loaded.template, messages, bos_token=loaded.bos_token, eos_token=loaded.eos_token)
    tokens = loaded.engine.tokenizer.tokenize(prompt.segments)
    params, speed = knob_params({**loaded.spec.sampling.model_dump(), "max_tokens": max_tokens, "seed": seed})
    text, finish = "", "stop"
    async for event in loaded.engine.generate(Generate(tokens, params, loaded.stop_ids, Constraint(grammar), speed=speed)):
        if isinstance(event, Text):
            text += event.text
        elif isinstance(event, Done):
            finish = event.finish_reason
    return text, finish


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path)
    ap.add_argument("--generate", type=int, default=0, metavar="N")
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", action="store_true", help="print each generated output")
    ap.add_argument("--model", help="the model whose vocabulary checks the grammars and which generates "
                                    "(default: the registry's default)")
    ap.add_argument("--config", type=Path, help="a models.toml to use instead of the shipped one")
    args = ap.parse_args()

    files = sorted(args.folder.glob("*.json"))
    if not files:
        sys.exit(f"eval-schemas: no *.json schema in {args.folder}")
    started = time.monotonic()
    grammars, failures, loosened = convert_all(files)
    spec = Registry.load(args.config).resolve(args.model)
    accepted = llama_accepts(spec.file(), list(grammars.values()))
    n = len(files)
    print(f"{n} schemas in {args.folder} ({time.monotonic() - started:.1f} s)")
    print(f"  converted and validated : {len(grammars):5d} ({100 * len(grammars) / n:.1f}%)")
    print(f"  accepted by llama.cpp   : {sum(accepted):5d} ({100 * sum(accepted) / n:.1f}%)")
    print(f"  rejected                : {n - sum(accepted):5d}")
    for f, why in list(failures.items())[:10]:
        print(f"    {f.name}: {why}")
    unsat = [f for f, notes in loosened.items() if any("no object satisfies" in n for n in notes)]
    print(f"  of the converted, {len(unsat)} have object combinators no JSON value satisfies "
          f"(enforced without them); {len(loosened) - len(unsat)} others were loosened")
    for f in unsat[:3]:
        print(f"    e.g. {f.name}: {loosened[f][0]}")

    if not args.generate:
        return
    loaded = load_model(spec, settings=Settings(worker=False))
    sample = random.Random(args.seed).sample(sorted(grammars), min(args.generate, len(grammars)))
    valid = invalid = cut = unsatisfiable = 0
    started = time.monotonic()
    for i, f in enumerate(sample):
        schema = json.loads(f.read_text())
        name = f.stem.rsplit("_", 1)[0]
        text, finish = asyncio.run(generate(loaded, schema, grammars[f], name, args.max_tokens, args.seed + i))
        if finish == "length":
            cut += 1
            verdict = "cut"
        else:
            try:
                checker = jsonschema.validators.validator_for(schema)
                checker(schema, format_checker=checker.FORMAT_CHECKER).validate(json.loads(text))
                valid += 1
                verdict = "valid"
            except (ValueError, jsonschema.ValidationError) as exc:
                if f in unsat:
                    unsatisfiable += 1
                    verdict = "unsatisfiable schema"
                else:
                    invalid += 1
                    verdict = f"INVALID: {str(exc).splitlines()[0]}"
        if args.show or verdict.startswith("INVALID"):
            print(f"  {f.name}: {verdict}\n    {text[:300]!r}")
    m = len(sample)
    print(f"generated {m} outputs with {spec.name}, max_tokens {args.max_tokens} "
          f"({time.monotonic() - started:.0f} s)")
    print(f"  ended by themselves, valid     : {valid:4d} ({100 * valid / m:.1f}%)")
    print(f"  ended by themselves, NOT valid : {invalid:4d}")
    print(f"  cut by max_tokens              : {cut:4d} ({100 * cut / m:.1f}%)")
    print(f"  schema satisfied by no value   : {unsatisfiable:4d}")


if __name__ == "__main__":
    main()
