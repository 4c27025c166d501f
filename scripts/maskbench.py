"""MaskBench: does the grammar made from a schema accept every valid instance and reject every
invalid one?

    scripts/maskbench DATA [--sample N] [--seed S] [--split NAME] [--each] [--timeout SEC]
                           [--matchers localchat,llguidance] [--any-order] [--jobs J] [--model NAME]
                           [--strict] [--generate N [--max-tokens M] [--gen-seconds S]] [--calls N] [--order-cost]

DATA is MaskBench's data (guidance-ai/jsonschemabench, folder maskbench): a folder holding
`data.tar.gz` or `data/*.json`, one schema per file with valid and invalid instances.

Each instance is written as compact JSON, tokenized with the model's vocabulary (--model: the
default model) and fed token by token to a matcher: accepted when every token is allowed and
then the end of generation is. The matchers:

- `localchat`: what the server runs: the schema checked against its metaschema, converted to
  GBNF, llama.cpp's grammar sampler, and the checker of completed values (grammars/check.py)
  wherever the converter says the grammar holds a keyword only in part.
- `localchat-llg`: the same grammar read by llguidance instead of llama.cpp (its GBNF reader),
  with the same checker: the matcher measured on its own.
- `llguidance`: llguidance's own JSON-schema compiler and matcher (the anchor).

A schema passes when it is not refused, every valid instance is accepted and every invalid one
rejected. Invalid instances accepted are split into *declared* (the converter said which
keywords its grammar holds only in part) and *undeclared* (a converter bug). Mask time is the
time to judge the whole vocabulary at one point of an instance (every --mask-every'th token).
Each object of an instance has its keys in the order its schema lists them, then the keys it
does not list. With --any-order each valid instance is also fed with the keys of its small
objects (those that list at most ANY_ORDER_MAX keys, objects.py) reversed (localchat only), and
counted apart. With --strict the script exits 1 when a valid instance is rejected or an invalid
one accepted without a declared keyword (localchat), as the tests run it.

With --calls N, N of the selected schemas become the tools of one request (tool_choice
required, the generic `{"tool_calls": [...]}` syntax, what the server builds) and a call of each, with a valid
instance as its arguments, is fed to llama.cpp's grammar sampler and to llguidance (reading the
same GBNF): the time to judge the whole vocabulary at every token, p50 / p99, beside each other.

With --order-cost: what taking an object's keys in any order costs against the schema's order,
for objects of 2 to 8 listed keys (half of them required): grammar bytes, and the time to judge
the whole vocabulary after the first key (llama.cpp), per bound (objects.ANY_ORDER_MAX).

With --generate N, N of the selected schemas are filled in by the model (greedy) under what
the server uses for a strict json_schema answer (the grammar, its objects closed to the keys they
list, and the checking of written values), and each answer is sorted: valid, NOT valid, cut by
--max-tokens, slow (stopped after --gen-seconds), refused. (The instances are judged against the
grammar of a json_schema answer that is not strict: JSON Schema's own meaning, other keys allowed.)
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import multiprocessing as mp
import random
import re
import sys
import tarfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

MATCHERS = ("localchat", "llguidance")
MASKS = 32  # whole-vocabulary masks timed per schema at most (a long instance would take minutes)


# -- the data ------------------------------------------------------------------------------------

def load(data: Path) -> dict[str, dict]:
    """name → {"schema", "tests"} for every schema with tests."""
    out: dict[str, dict] = {}
    archive = data / "data.tar.gz" if data.is_dir() else data
    if archive.is_file():
        with tarfile.open(archive) as tar:
            for member in tar:
                if member.isfile() and member.name.endswith(".json"):
                    f = tar.extractfile(member)
                    if f is not None:
                        _keep(out, Path(member.name).name, f.read())
    else:
        for path in sorted((data / "data").glob("*.json") if (data / "data").is_dir() else data.glob("*.json")):
            _keep(out, path.name, path.read_bytes())
    if not out:
        sys.exit(f"maskbench: no MaskBench schemas with tests in {data}")
    return out


def _keep(out: dict[str, dict], name: str, raw: bytes) -> None:
    try:
        doc = json.loads(raw)
    except ValueError:
        return
    if isinstance(doc, dict) and doc.get("tests"):
        out[name] = {"schema": doc["schema"], "tests": doc["tests"]}


def split_of(name: str) -> str:
    return name.split("---")[0] if "---" in name else name.rsplit("_", 1)[0]


def _props(schema: dict) -> list[str]:
    props = schema.get("properties")
    return list(props) if isinstance(props, dict) else []


def _matches(pattern: str, key: str) -> bool:
    """Whether a patternProperties pattern matches a key (a pattern Python cannot read: yes)."""
    try:
        return re.search(pattern, key) is not None
    except re.error:
        return True


def _typed(schemas: list[dict], value: Any) -> bool:
    """Whether every `type` among the schemas takes the value."""
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object",
             type(None): "null"}
    name = names.get(type(value))
    for s in schemas:
        kinds = s.get("type")
        kinds = [kinds] if isinstance(kinds, str) else kinds if isinstance(kinds, list) else None
        if kinds is not None and name not in kinds and not (name == "integer" and "number" in kinds):
            return False
    return True


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class Order:
    """Instances with each object's keys in the order its schema lists them (the keys the
    schema does not list after those, as they were): the order the grammar holds beyond
    ANY_ORDER_MAX listed keys. `reverse` reverses the keys of the objects within it instead."""

    def __init__(self, schema: Any) -> None:
        from localchat.grammars.objects import ANY_ORDER_MAX
        from localchat.grammars.refs import Document

        self.doc, self.small = Document(schema), ANY_ORDER_MAX
        self.root = schema

    def write(self, value: Any, reverse: bool = False) -> Any:
        return self._walk(value, [self.root], reverse)

    def _walk(self, value: Any, schemas: list, reverse: bool) -> Any:
        found = self._expand(schemas)
        if isinstance(value, dict):
            listed, found = self._key_order(found, value)
            keys = [k for k in listed if k in value] + [k for k in value if k not in listed]
            if reverse and len(listed) <= self.small:
                keys.reverse()
            return {k: self._walk(value[k], self._children(found, k), reverse) for k in keys}
        if isinstance(value, list):
            arrays = [c for c in self._branches(found) if any("items" in s or "prefixItems" in s for s in c)]
            if arrays:  # the branch whose items' types hold for most of the value's items
                found = max(arrays, key=lambda c: sum(_typed(self._expand(self._children(c, i)), v)
                                                      for i, v in enumerate(value)))
            return [self._walk(v, self._children(found, i), reverse) for i, v in enumerate(value)]
        return value

    def _branches(self, found: list[dict]) -> list[list[dict]]:
        """The schemas that hold for a value, once for each way through its anyOf / oneOf branches
        (nested too; at most 128)."""
        candidates = [found]
        for _ in range(4):
            grown = []
            for schemas in candidates:
                split = next(((i, s[k]) for i, s in enumerate(schemas) for k in ("oneOf", "anyOf")
                              if isinstance(s.get(k), list) and not s.get("_seen_" + k)), None)
                if split is None:
                    grown.append(schemas)
                    continue
                i, branches = split
                marked = dict(schemas[i])
                marked["_seen_anyOf"] = marked["_seen_oneOf"] = True
                rest = schemas[:i] + [marked] + schemas[i + 1:]
                grown += [rest + self._expand([b]) for b in branches if isinstance(b, dict)][:64]
            candidates = grown[:128]
        return candidates

    def _key_order(self, found: list[dict], value: dict) -> tuple[list[str], list[dict]]:
        """The keys as the converter lists them: the schema's own (with what `$ref` and `allOf`
        bring, in order), then those of the anyOf / oneOf branches (nested too) that list most
        of the value's keys, then those of its dependent schemas, then required keys no schema
        lists; and the schemas that hold for the value."""
        candidates = self._branches(found)

        def listed_by(schemas: list[dict]) -> list[str]:
            keys: list[str] = []
            for s in schemas:
                keys += [k for k in _props(s) if k not in keys]
            for s in schemas:
                for key in ("dependentSchemas", "dependencies"):
                    for name, dep in (s[key].items() if isinstance(s.get(key), dict) else ()):
                        if isinstance(dep, dict) and name in value:
                            keys += [k for k in _props(dep) if k not in keys]
            for s in schemas:
                keys += [k for k in s.get("required") or [] if isinstance(k, str) and k not in keys]
            return keys

        def fits(schemas: list[dict]) -> bool:
            """No key of the value breaks a `const` or `enum` a schema gives it (a request's `method`)."""
            for s in schemas:
                for key, sub in (s["properties"].items() if isinstance(s.get("properties"), dict) else ()):
                    if key not in value:
                        continue
                    for part in self._expand([sub]):
                        if "const" in part and part["const"] != value[key] or \
                                isinstance(part.get("enum"), list) and value[key] not in part["enum"]:
                            return False
            return True

        best = max(candidates, key=lambda c: (fits(c), sum(k in value for k in listed_by(c))))
        return listed_by(best), best

    def _expand(self, schemas: list, depth: int = 0) -> list[dict]:
        """The schemas, with what `$ref` and `allOf` bring, in the order the converter merges them
        (a `$ref`'s target before the keywords beside it, unless `properties` comes first)."""
        out: list[dict] = []
        for s in schemas:
            if not isinstance(s, dict) or depth > 30:
                continue
            target: list[dict] = []
            if isinstance(s.get("$ref"), str):
                try:
                    target = self._expand([self.doc.resolve(s["$ref"])[0]], depth + 1)
                except Exception:  # noqa: BLE001 - the converter refuses such schemas anyway
                    pass
            keys = list(s)
            own_first = "properties" in s and "$ref" in s and keys.index("properties") < keys.index("$ref")
            parts = self._expand([b for b in s.get("allOf") or [] if isinstance(b, dict)], depth + 1)
            for item in ([s] + target if own_first else target + [s]) + parts:
                if not any(item is o for o in out):
                    out.append(item)
        return out

    def _children(self, found: list[dict], step: str | int) -> list:
        out = []
        for s in found:
            if isinstance(step, str):
                props = s.get("properties")
                listed = isinstance(props, dict) and step in props
                if listed:
                    out.append(props[step])
                for pattern, sub in (s.get("patternProperties") or {}).items():
                    if _matches(pattern, step):
                        listed = True
                        out.append(sub)
                for key in ("additionalProperties", "unevaluatedProperties"):
                    if isinstance(s.get(key), dict) and not listed:
                        out.append(s[key])
            else:
                items, prefix = s.get("items"), s.get("prefixItems")
                if isinstance(items, list):
                    prefix, items = items, s.get("additionalItems")
                if isinstance(prefix, list) and step < len(prefix):
                    out.append(prefix[step])
                elif isinstance(items, dict):
                    out.append(items)
        return out


# -- a worker (one process; llama.cpp's grammar code can crash or hang on its own) ----------------

class Worker:
    def __init__(self, model_path: str, mask_every: int) -> None:
        import llama_cpp as C

        from localchat.engine.llama.model import Model

        self.C = C
        self.model = Model(Path(model_path), vocab_only=True)
        self.vocab, self.n_vocab = self.model.vocab, self.model.n_vocab
        self.eos = C.llama_vocab_eos(self.vocab)
        self.mask_every = mask_every
        self.max_masks = MASKS
        self._llg_tokenizer = None
        import numpy as np

        self.np = np
        self.dtype = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
        self.full = np.zeros(self.n_vocab, dtype=self.dtype)
        self.one = np.zeros(1, dtype=self.dtype)

    def tokens(self, text: str) -> list[int]:
        return self.model.tokenize_bytes(text.encode("utf-8", "replace"), parse_special=False)

    def llg_tokenizer(self):
        if self._llg_tokenizer is None:
            from llguidance.llamacpp import lltokenizer_from_vocab

            self._llg_tokenizer = lltokenizer_from_vocab(self.vocab)
        return self._llg_tokenizer

    # -- the task ------------------------------------------------------------------------------

    def run(self, task: dict) -> dict:
        matcher = task["matcher"]
        started = time.perf_counter()
        out: dict[str, Any] = {"refused": None, "declared": [], "valid": [], "invalid": [], "orders": [],
                               "mask_ms": [], "bytes": 0}
        try:
            judge = self._localchat(task, out) if matcher.startswith("localchat") else self._llguidance(task, out)
        except _Refused as exc:
            out["refused"] = str(exc)[:300]
            out["compile_ms"] = 1000 * (time.perf_counter() - started)
            return out
        out["compile_ms"] = 1000 * (time.perf_counter() - started)
        order = Order(task["schema"])
        for i, test in enumerate(task["tests"]):
            text = compact(order.write(test["data"]))
            verdict = judge(text, i == 0)
            (out["valid"] if test["valid"] else out["invalid"]).append(verdict)
            if test["valid"] and task.get("any_order") and matcher.startswith("localchat"):
                other = compact(order.write(test["data"], reverse=True))
                if other != text:
                    out["orders"].append(judge(other, False))
        return out

    def _localchat(self, task: dict, out: dict):
        from localchat.errors import GrammarError
        from localchat.grammars import validate
        from localchat.grammars.check import ValueChecker
        from localchat.grammars.metaschema import schema_problem
        from localchat.grammars.schema import convert

        schema = task["schema"]
        problem = schema_problem(schema)
        if problem is not None:
            raise _Refused(f"metaschema: {problem}")
        try:
            converter = convert(schema)
            grammar = converter.grammar(converter.root_rule)
            validate(grammar)
        except GrammarError as exc:
            raise _Refused(str(exc)) from None
        out["declared"] = list(converter.loosened)
        out["bytes"] = len(grammar)
        checked = bool(converter.loosened)
        if task["matcher"] == "localchat-llg":
            feed = self._llg_gbnf(grammar)
        else:
            feed = self._llama(grammar)

        def judge(text: str, measure: bool) -> list:
            where = feed(text, measure, out["mask_ms"])
            if where is not None:
                return [False, where]
            if checked:
                checker = ValueChecker(schema)
                bad = checker.feed(text) or checker.finish()
                if bad is not None:
                    return [False, f"checker at {bad.start}: {bad.message[:120]}"]
            return [True, ""]

        return judge

    def _llama(self, grammar: str):
        C, np = self.C, self.np
        sampler = C.llama_sampler_init_grammar(self.vocab, grammar.encode(), b"root")
        if not sampler:
            raise _Refused("llama.cpp rejected the grammar")
        self._keep = sampler
        one = self.one
        cur1 = C.llama_token_data_array(one.ctypes.data_as(C.llama_token_data_p), 1, -1, False)

        def allowed(judge, token: int) -> bool:
            one[0] = (token, 0.0, 0.0)
            cur1.size, cur1.selected = 1, -1
            C.llama_sampler_apply(judge, ctypes.byref(cur1))
            return bool(np.isfinite(one[0]["logit"]))

        def mask(judge) -> float:
            self.full["id"] = np.arange(self.n_vocab, dtype=np.int32)
            self.full["logit"] = 0.0
            cur = C.llama_token_data_array(self.full.ctypes.data_as(C.llama_token_data_p), self.n_vocab, -1, False)
            t = time.perf_counter()
            C.llama_sampler_apply(judge, ctypes.byref(cur))
            return 1000 * (time.perf_counter() - t)

        def feed(text: str, measure: bool, masks: list) -> str | None:
            judge = C.llama_sampler_clone(sampler)
            try:
                tokens = self.tokens(text)
                done = ""
                for n, token in enumerate(tokens):
                    if measure and self.mask_every and n % self.mask_every == 0 and len(masks) < self.max_masks:
                        masks.append(mask(judge))
                    if not allowed(judge, token):
                        return f"grammar at {len(done)}: {done[-40:]!r} ⟶ {self.model.piece(token).decode(errors='replace')!r}"
                    C.llama_sampler_accept(judge, token)
                    done += self.model.piece(token).decode(errors="replace")
                if not allowed(judge, self.eos):
                    return "grammar: not complete at the end"
                return None
            finally:
                C.llama_sampler_free(judge)

        return feed

    def _llg_gbnf(self, grammar: str):
        import llguidance

        try:
            text = llguidance.grammar_from("gbnf", grammar)
        except ValueError as exc:
            raise _Refused(f"llguidance could not read the grammar: {exc}") from None
        return self._llg_feed(text)

    def _llguidance(self, task: dict, out: dict):
        import llguidance

        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(task["schema"],
                                                                   defaults={"whitespace_flexible": False})
        except (ValueError, TypeError) as exc:
            raise _Refused(str(exc)) from None
        feed = self._llg_feed(grammar)

        def judge(text: str, measure: bool) -> list:
            where = feed(text, measure, out["mask_ms"])
            return [False, where] if where is not None else [True, ""]

        return judge

    def _llg_feed(self, grammar: str):
        import llguidance

        tokenizer = self.llg_tokenizer()
        matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise _Refused(matcher.get_error()[:300])

        def feed(text: str, measure: bool, masks: list) -> str | None:
            m = matcher.deep_copy()  # a matcher that refused a token stays in its error state
            tokens = self.tokens(text)
            for n, token in enumerate(tokens):
                if measure and self.mask_every and n % self.mask_every == 0 and len(masks) < self.max_masks:
                    t = time.perf_counter()
                    m.compute_bitmask()
                    masks.append(1000 * (time.perf_counter() - t))
                if not m.consume_token(token):
                    return f"llguidance at token {n}: {m.get_error()[:120]}"
            if not m.is_accepting():
                return "llguidance: not complete at the end"
            return None

        return feed


class _Refused(Exception):
    pass


def _serve(conn, model_path: str, mask_every: int) -> None:
    import logging

    logging.disable(logging.CRITICAL)
    worker = Worker(model_path, mask_every)
    conn.send("ready")
    while True:
        task = conn.recv()
        if task is None:
            return
        try:
            conn.send(worker.run(task))
        except Exception as exc:  # noqa: BLE001 - the script's own failure, reported per schema
            conn.send({"error": f"{type(exc).__name__}: {exc}"[:300]})


class Pool:
    """Processes that each judge one (schema, matcher) at a time, killed past `timeout`."""

    def __init__(self, jobs: int, model_path: str, mask_every: int, timeout: float) -> None:
        self.args, self.timeout = (model_path, mask_every), timeout
        self.ctx = mp.get_context("spawn")
        self.procs: list[Any] = [self._start() for _ in range(jobs)]

    def _start(self):
        mine, theirs = self.ctx.Pipe()
        proc = self.ctx.Process(target=_serve, args=(theirs, *self.args), daemon=True)
        proc.start()
        if not mine.poll(120) or mine.recv() != "ready":
            sys.exit("maskbench: a worker did not start")
        return proc, mine

    def run(self, tasks: list[dict], done) -> None:
        todo = list(enumerate(tasks))
        busy: dict[int, tuple[int, float]] = {}
        while todo or busy:
            for w, (proc, conn) in enumerate(self.procs):
                if w not in busy and todo:
                    i, task = todo.pop(0)
                    conn.send(task)
                    busy[w] = (i, time.monotonic())
            ready = mp.connection.wait([self.procs[w][1] for w in busy] + [self.procs[w][0].sentinel for w in busy],
                                       timeout=0.5)
            for w in list(busy):
                proc, conn = self.procs[w]
                i, since = busy[w]
                result = None
                if conn in ready or proc.sentinel in ready:
                    try:
                        result = conn.recv()
                    except (EOFError, OSError):
                        result = {"error": f"the worker died (exit {proc.exitcode}): llama.cpp crashed"}
                        self._replace(w)
                elif time.monotonic() - since > self.timeout:
                    result = {"timeout": True}
                    self._replace(w)
                if result is not None:
                    del busy[w]
                    done(i, result)

    def _replace(self, w: int) -> None:
        proc, conn = self.procs[w]
        proc.kill()
        proc.join()
        self.procs[w] = self._start()

    def close(self) -> None:
        for proc, conn in self.procs:
            try:
                conn.send(None)
            except OSError:
                pass
            proc.join(5)
            if proc.is_alive():
                proc.kill()


# -- the table -----------------------------------------------------------------------------------

def verdict(result: dict) -> str:
    if result.get("timeout"):
        return "timeout"
    if result.get("error"):
        return "error"
    if result["refused"] is not None:
        return "refused"
    if not all(ok for ok, _ in result["valid"]):
        return "valid rejected"
    if any(ok for ok, _ in result["invalid"]):
        return "invalid accepted"
    return "pass"


def summary(name: str, results: dict[str, dict]) -> list[str]:
    n = len(results)
    count = Counter(verdict(r) for r in results.values())
    valid = sum(len(r.get("valid", [])) for r in results.values())
    valid_bad = sum(sum(1 for ok, _ in r.get("valid", []) if not ok) for r in results.values())
    inv_declared = sum(sum(1 for ok, _ in r.get("invalid", []) if ok) for r in results.values() if r.get("declared"))
    inv_undeclared = sum(sum(1 for ok, _ in r.get("invalid", []) if ok) for r in results.values()
                         if not r.get("declared"))
    masks = sorted(m for r in results.values() for m in r.get("mask_ms", []))
    p = (lambda q: masks[min(len(masks) - 1, int(q * len(masks)))]) if masks else (lambda q: float("nan"))
    orders = [ok for r in results.values() for ok, _ in r.get("orders", [])]
    row = (f"| {name} | {count['pass']} ({100 * count['pass'] / max(n, 1):.1f}%) | {count['valid rejected']} | "
           f"{valid_bad} of {valid} | {inv_declared} / {inv_undeclared} | {count['refused']} | "
           f"{count['timeout']} | {count['error']} | {p(0.5):.2f} / {p(0.99):.2f} |")
    lines = [row]
    if orders:
        lines.append(f"  (keys in reverse order: {sum(1 for ok in orders if not ok)} of {len(orders)} rejected)")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path, help="MaskBench's data: a folder with data.tar.gz or data/*.json")
    ap.add_argument("--sample", type=int, default=0, metavar="N", help="N schemas, shuffled with --seed (0: all)")
    ap.add_argument("--seed", type=int, default=439)
    ap.add_argument("--split", action="append", default=[], metavar="NAME",
                    help="only this split (Github_hard, Glaiveai2K, ...; repeatable)")
    ap.add_argument("--only", action="append", default=[], metavar="FILE", help="only this schema file (repeatable)")
    ap.add_argument("--matchers", default=",".join(MATCHERS),
                    help="comma-separated: localchat, localchat-llg, llguidance (default: %(default)s)")
    ap.add_argument("--each", action="store_true", help="a line per schema that does not pass")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per schema and matcher")
    ap.add_argument("--mask-every", type=int, default=8, metavar="K", help="time a whole-vocabulary mask every K tokens (0: none)")
    ap.add_argument("--any-order", action="store_true", help="also feed each valid instance with its keys reversed")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--model", help="whose vocabulary tokenizes (default: the registry's default model)")
    ap.add_argument("--config", type=Path, help="a models.toml to use instead of the shipped one")
    ap.add_argument("--json", type=Path, metavar="FILE", help="write every result here")
    ap.add_argument("--strict", action="store_true", help="exit 1 on a valid instance rejected or an undeclared "
                                                         "invalid one accepted (localchat)")
    ap.add_argument("--generate", type=int, default=0, metavar="N", help="fill in N schemas with the model")
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--gen-seconds", type=float, default=600.0,
                    help="with --generate: stop an answer after this many seconds and count it slow")
    ap.add_argument("--calls", type=int, default=0, metavar="N", help="time masks for a call of N tools")
    ap.add_argument("--order-cost", action="store_true", help="what any-order objects cost, 2 to 8 keys")
    args = ap.parse_args()

    from localchat.models import Registry

    spec = Registry.load(args.config).resolve(args.model)
    if args.order_cost:
        return order_cost(spec)
    data = load(args.data)
    names = sorted(data)
    if args.split:
        names = [n for n in names if split_of(n) in args.split]
    if args.only:
        names = [n for n in names if n in args.only or n.removesuffix(".json") in args.only]
    random.Random(args.seed).shuffle(names)
    if args.sample:
        names = names[:args.sample]
    if args.generate:
        return generate(spec, [(n, data[n]["schema"]) for n in names[:args.generate]], args.max_tokens,
                        args.gen_seconds)
    if args.calls:
        return calls(spec, [(n, data[n]) for n in names[:args.calls]])
    matchers = [m.strip() for m in args.matchers.split(",") if m.strip()]
    tasks = [{"name": n, "matcher": m, "schema": data[n]["schema"], "tests": data[n]["tests"],
              "any_order": args.any_order} for n in names for m in matchers]
    results: dict[str, dict[str, dict]] = defaultdict(dict)
    started = time.monotonic()
    progress = {"n": 0}

    def done(i: int, result: dict) -> None:
        task = tasks[i]
        results[task["matcher"]][task["name"]] = result
        progress["n"] += 1
        if progress["n"] % 200 == 0:
            print(f"  … {progress['n']} of {len(tasks)} ({time.monotonic() - started:.0f} s)", file=sys.stderr)

    pool = Pool(args.jobs, str(spec.file()), args.mask_every, args.timeout)
    try:
        pool.run(tasks, done)
    finally:
        pool.close()
    elapsed = time.monotonic() - started

    if args.each:
        for matcher in matchers:
            for name in names:
                r = results[matcher].get(name, {"error": "no result"})
                v = verdict(r)
                for ok, why in r.get("orders", []):
                    if not ok:
                        print(f"{matcher}\t{name}\tkeys reversed, rejected\t{why}")
                if v == "pass":
                    continue
                why = r.get("refused") or r.get("error") or ""
                if v == "valid rejected":
                    why = next(w for ok, w in r["valid"] if not ok)
                elif v == "invalid accepted":
                    why = "declared: " + ", ".join(r["declared"][:4]) if r["declared"] else "undeclared"
                print(f"{matcher}\t{name}\t{v}\t{why}")
    total_valid = sum(1 for n in names for t in data[n]["tests"] if t["valid"])
    total_invalid = sum(1 for n in names for t in data[n]["tests"] if not t["valid"])
    print(f"\n{len(names)} schemas with tests from {args.data} ({total_valid} valid, {total_invalid} invalid instances), "
          f"{spec.name}'s vocabulary, {elapsed:.0f} s" + (f", sample of {args.sample} (seed {args.seed})"
                                                        if args.sample else ""))
    print("\n| converter → matcher | passing | schemas with a valid instance rejected | valid instances rejected "
          "| invalid accepted (declared / undeclared) | refused | timeouts | errors | mask ms p50 / p99 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    labels = {"localchat": "localchat → llama.cpp (+ checker)", "localchat-llg": "localchat → llguidance (+ checker)",
              "llguidance": "llguidance → llguidance"}
    for matcher in matchers:
        for line in summary(labels.get(matcher, matcher), results[matcher]):
            print(line)
    if args.json:
        args.json.write_text(json.dumps(results))
    if args.strict and "localchat" in results:
        mine = results["localchat"].values()
        bad = sum(1 for r in mine for ok, _ in r.get("valid", []) if not ok) + \
            sum(1 for r in mine if not r.get("declared") for ok, _ in r.get("invalid", []) if ok)
        if bad:
            sys.exit(f"maskbench: {bad} valid instances rejected or invalid ones accepted undeclared")


# -- what any-order objects cost ---------------------------------------------------------------------

def order_cost(spec) -> None:
    from localchat.grammars import objects
    from localchat.grammars.schema import convert

    worker = Worker(str(spec.file()), 1)
    print(f"{spec.name}'s vocabulary; an object of n string keys, the first n // 2 required; the mask after its "
          "first key (median of 5)")
    print("| keys | schema order: bytes | mask ms | any order: bytes | mask ms |")
    print("| --- | --- | --- | --- | --- |")
    for n in range(2, 9):
        schema = {"type": "object", "properties": {f"key{i}": {"type": "string"} for i in range(n)},
                  "required": [f"key{i}" for i in range(n // 2)], "additionalProperties": False}
        row = [str(n)]
        for bound in (0, n):
            objects.ANY_ORDER_MAX = bound
            converter = convert(schema)
            grammar = converter.grammar(converter.root_rule)
            feed = worker._llama(grammar)
            times: list[float] = []
            for _ in range(5):
                masks: list[float] = []
                worker.mask_every, worker.max_masks = 1, 1 << 30
                feed('{"key0":"a"', True, masks)
                times.append(masks[-1])
            row += [f"{len(grammar):,}", f"{sorted(times)[2]:.2f}"]
        print("| " + " | ".join(row) + " |")


# -- a call of many tools: each matcher's mask time --------------------------------------------------

def calls(spec, chosen: list[tuple[str, dict]]) -> None:
    import numpy as np

    from localchat.families import FAMILIES
    from localchat.generation.constraints import build, codec_tools
    from localchat.neutral import OutputRules, ToolSpec

    tools, texts = [], []
    for i, (name, doc) in enumerate(chosen):
        schema = doc["schema"]
        if not isinstance(schema, dict) or schema.get("type", "object") != "object":
            continue
        valid = next((t["data"] for t in doc["tests"] if t["valid"] and isinstance(t["data"], dict)), None)
        if valid is None:
            continue
        tools.append(ToolSpec(f"tool_{i}", name, schema))
        texts.append(f'{{"tool_calls": [{{"name": "tool_{i}", "arguments": {compact(Order(schema).write(valid))}}}]}}')
    rules = OutputRules(tools=tuple(tools), tool_choice="required", parallel_tool_calls=False)
    constraint = build(rules, codec_tools(rules), FAMILIES["phi3"], False, 1 << 22)  # (plain JSON: no special token)
    worker = Worker(str(spec.file()), 1)
    worker.max_masks = 1 << 30  # every token
    print(f"{len(tools)} tools ({sum(len(json.dumps(t.parameters)) for t in tools) / 1000:.0f} KB of schemas), "
          f"a grammar of {len(constraint.grammar) / 1000:.0f} KB, {spec.name}'s vocabulary ({worker.n_vocab} tokens)")
    for label, make in (("llama.cpp", worker._llama), ("llguidance (GBNF)", worker._llg_gbnf)):
        started = time.perf_counter()
        feed = make(constraint.grammar)
        built = time.perf_counter() - started
        masks: list[float] = []
        verdicts = [feed(text, True, masks) for text in texts]
        rejected = sum(1 for v in verdicts if v is not None)
        if rejected:
            print(f"    ({label} refused: {next(v for v in verdicts if v is not None)[:200]})")
        masks.sort()
        p = lambda q: masks[min(len(masks) - 1, int(q * len(masks)))]  # noqa: E731
        print(f"  {label:18s}: mask p50 {p(0.5):7.2f} ms, p99 {p(0.99):7.2f} ms over {len(masks)} tokens "
              f"(mean {float(np.mean(masks)):.2f}); grammar made in {1000 * built:.0f} ms; calls refused: {rejected}")


# -- generation ------------------------------------------------------------------------------------

def generate(spec, schemas: list[tuple[str, Any]], max_tokens: int, seconds: float) -> None:
    """Each schema filled in by the model, greedy, as the server answers a strict json_schema:
    objects closed to the keys they list (objects.closed)."""
    import asyncio

    import jsonschema

    from localchat.engine import Constraint, Done, Generate, Text
    from localchat.engine.params import knob_params
    from localchat.errors import GrammarError
    from localchat.families import render_prompt
    from localchat.generation.constraints import value_check
    from localchat.grammars import validate
    from localchat.grammars.check import ValueChecker
    from localchat.grammars.metaschema import schema_problem
    from localchat.grammars.schema import convert
    from localchat.models import Settings
    from localchat.models.host import load_model

    loaded = load_model(spec, settings=Settings(worker=False))
    counts: Counter = Counter()
    started = time.monotonic()
    resampled = 0
    for name, schema in schemas:
        problem = schema_problem(schema)
        try:
            if problem is not None:
                raise GrammarError(problem)
            converter = convert(schema, closed=True)
            grammar = converter.grammar(converter.root_rule)
            validate(grammar)
        except GrammarError as exc:
            counts["refused"] += 1
            print(f"  {name}: refused: {exc}")
            continue
        checks = (value_check("", schema, converter.loosened),) if converter.loosened else ()
        messages = [{"role": "user", "content": "Reply with one JSON value that follows this JSON schema:\n"
                                                + json.dumps(schema)}]
        prompt = render_prompt(loaded.template, messages, bos_token=loaded.bos_token, eos_token=loaded.eos_token)
        tokens = loaded.engine.tokenizer.tokenize(prompt.segments)
        params, speed = knob_params({**loaded.spec.sampling.model_dump(), "max_tokens": max_tokens, "temperature": 0})

        async def run() -> tuple[str, Done | None]:
            text, done = "", None
            request = Generate(tokens, params, loaded.stop_ids, Constraint(grammar, checks=checks), speed=speed)
            try:
                async with asyncio.timeout(seconds), contextlib.aclosing(loaded.engine.generate(request)) as events:
                    async for event in events:  # (too slow: cancelled as a client hanging up is)
                        if isinstance(event, Text):
                            text += event.text
                        elif isinstance(event, Done):
                            done = event
            except TimeoutError:
                pass
            return text, done

        try:
            text, done = asyncio.run(run())
        except Exception as exc:  # noqa: BLE001 - reported per schema
            counts["error"] += 1
            print(f"  {name}: error: {exc}")
            continue
        resampled += done.resampled if done else 0
        if done is None:
            counts["slow"] += 1
            print(f"  {name}: slow: stopped after {seconds:.0f} s ({len(text)} characters written)")
            continue
        if done.finish_reason == "length":
            counts["cut"] += 1
            verdict = "cut"
        else:
            try:
                checker = ValueChecker(schema)
                bad = checker.feed(text) or checker.finish()
                value = json.loads(text)
                if bad is None:
                    cls = jsonschema.validators.validator_for(schema)
                    cls(schema, format_checker=cls.FORMAT_CHECKER).validate(value)
                counts["valid" if bad is None else "invalid"] += 1
                verdict = "valid" if bad is None else f"NOT valid: {bad.message[:100]}"
            except (ValueError, jsonschema.ValidationError) as exc:
                counts["invalid"] += 1
                verdict = f"NOT valid: {str(exc).splitlines()[0][:100]}"
        print(f"  {name}: {verdict} ({done.completion_tokens if done else 0} tokens, "
              f"{done.resampled if done else 0} written again)")
    n = len(schemas)
    print(f"\n{n} schemas filled in by {spec.name}, greedy, max_tokens {max_tokens} ({time.monotonic() - started:.0f} s)")
    for key in ("valid", "invalid", "cut", "slow", "refused", "error"):
        print(f"  {key:8s}: {counts[key]}")
    print(f"  tokens written again (a value broke the schema): {resampled}")


if __name__ == "__main__":
    main()
