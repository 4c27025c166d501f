"""scripts/bench's command line: its flags, and the benchmark each one starts (main). The usage and
what each benchmark measures is scripts/bench.py's docstring, which main prints for --help. Every
benchmark module is imported here, at the top: `scripts/bench --help` imports them all (a name gone
from localchat shows in tests/test_scripts.py, not the next time someone runs a benchmark)."""

from __future__ import annotations

import argparse
from pathlib import Path

from localchat.families import render_prompt
from localchat.models import Registry, Settings, shipped_config
from localchat.models.host import load_model

from .agent import agent_bench
from .common import PROMPT
from .concurrency import concurrency_bench
from .decode import decode_bench
from .edit import edit_bench, edit_record
from .fim import fim_bench
from .json_schema import json_schema_bench
from .kv import kv_bench
from .long import long_bench
from .lora import lora_bench
from .rpc import rpc_bench
from .served import served_bench
from .tools import tools_bench
from .upstream import upstream_bench
from .vision import vision_bench
from .worker import worker_bench


def main(description: str | None = None) -> None:
    """scripts/bench: `description` is the text --help prints after the usage (scripts/bench.py's docstring)."""
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", default=None)
    ap.add_argument("--config", type=Path, default=None)
    ap.add_argument("--json-schema", action="store_true", help="constrained against free decoding")
    ap.add_argument("--decode", action="store_true",
                    help="a chat answer's decode tok/s, drafts on and off, beside llama-server's (LLAMA_SERVER)")
    ap.add_argument("--concurrency", action="store_true",
                    help="1, 2 and 4 streams at once; a short request's ttft during a long stream")
    ap.add_argument("--tools", action="store_true", help="preparing an agent's 100-tool, 200 KB request")
    ap.add_argument("--lora", action="store_true", help="two streams with one LoRA adapter against two adapters")
    ap.add_argument("--vision", action="store_true", help="what an image costs: prompt tokens, time to first token")
    ap.add_argument("--edit", action="store_true",
                    help="a file returned with one rename: decode tok/s with and without drafts from the text")
    ap.add_argument("--draft-model", default=None, help="with --edit: also with this model drafting (same vocabulary)")
    ap.add_argument("--record", type=Path, default=None,
                    help="with --edit: only write the prompt's and the greedy answer's token ids of each case to this "
                         "file (tests/fixtures/drafts-*.json, which tests/test_draft_replay.py replays)")
    ap.add_argument("--agent", action="store_true",
                    help="an agent's 10k-token prompt: cold, next turn, new session, restart, unload, moved block")
    ap.add_argument("--upstream", action="store_true", help="tok/s and ttft through an upstream localchat against direct")
    ap.add_argument("--long", action="store_true", help="decode tok/s after 2k and 8k tokens of prompt")
    ap.add_argument("--kv", action="store_true", help="f16, q8_0 and q4_0 K/V cells: fitted context, decode tok/s "
                    "at 8k, log-probabilities against f16")
    ap.add_argument("--fim", action="store_true", help="llama.vscode's /infill requests while typing: p50 latency")
    ap.add_argument("--worker", action="store_true",
                    help="the worker process (the default) against llama.cpp inside the server (--in-process)")
    ap.add_argument("--rpc", action="store_true",
                    help="all layers on an rpc-worker across a veth pair against the model loaded directly")
    args = ap.parse_args()

    config = (args.config or shipped_config()).resolve()
    registry = Registry.load(config)
    spec = registry.resolve(args.model)
    if args.lora:
        return lora_bench(spec, args.tokens, args.rounds)
    if args.vision:
        return vision_bench(config, spec, args.rounds)
    if args.agent:
        return agent_bench(config, spec)
    if args.rpc:
        return rpc_bench(spec, args.tokens, args.rounds)
    if args.upstream:
        return upstream_bench(config, spec, args.tokens, args.rounds)
    if args.decode:
        return decode_bench(config, spec, args.tokens, args.rounds)
    if args.long:
        return long_bench(config, spec, args.tokens if args.tokens != 256 else 128)
    if args.kv:
        return kv_bench(config, registry.resolve(args.model or "qwen2.5-coder-0.5b"), args.tokens if args.tokens != 256 else 64)
    if args.fim:
        names = [args.model] if args.model else ["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"]
        return fim_bench(config, [registry.resolve(name) for name in names], 10)
    if args.edit:
        spec = registry.resolve(args.model or "qwen2.5-coder-1.5b")
        n = args.tokens if args.tokens != 256 else 1200
        if args.record:
            return edit_record(config, spec, n, args.record)
        return edit_bench(config, spec, n, args.draft_model)
    # only to render and tokenize the prompt exactly as the server does (one slot: a small context)
    loaded = load_model(spec, settings=Settings(parallel=1, worker=False))
    prompt = render_prompt(loaded.template, PROMPT, bos_token=loaded.bos_token, eos_token=loaded.eos_token)
    tokens = loaded.engine.tokenizer.tokenize(prompt.segments)
    n_ctx, threads = loaded.engine.n_ctx, spec.threads or __import__("os").cpu_count()
    loaded.engine.close()

    if args.json_schema:
        return json_schema_bench(config, spec.name, args.rounds)
    if args.concurrency:
        return concurrency_bench(config, spec, tokens, args.tokens, args.rounds, n_ctx, threads)
    if args.worker:
        return worker_bench(config, spec, args.tokens, args.rounds)
    if args.tools:
        return tools_bench(spec, args.rounds)
    return served_bench(config, spec, tokens, args.tokens, args.rounds, n_ctx, threads)
