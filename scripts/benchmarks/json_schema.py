"""--json-schema: tokens/s of output constrained by a small JSON object schema against free output,
same prompt, same length, greedy and sampled (their ratio; no goal)."""

from __future__ import annotations

import statistics
from pathlib import Path

from localchat.serve_process import Server

from .common import flush, http_stream


PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "city": {"type": "string", "maxLength": 40}, "email": {"type": "string", "format": "email"}},
    "required": ["name", "age", "city", "email"]}


def json_schema_bench(config: Path, model: str, rounds: int) -> None:
    ask = [{"role": "user", "content": "Describe a person as a JSON object with name, age, city and email."}]
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    server = Server(config, "--model", model)
    try:
        print(f"model {model}: a small JSON object schema (4 properties), {rounds} rounds (median)")
        for label, sampling in (("greedy", {"temperature": 0}), ("sampled", {"temperature": 1.0, "seed": 7})):
            body = {"model": model, "messages": ask, **sampling}
            http_stream(server.url, {**body, "response_format": fmt, "max_tokens": 64})  # warm-up
            constrained, free = [], []
            for _ in range(rounds):
                flush(server.url, model)
                c = http_stream(server.url, {**body, "response_format": fmt, "max_tokens": 256})
                flush(server.url, model)
                n = c["usage"]["completion_tokens"]
                f = http_stream(server.url, {**body, "max_tokens": n, "ignore_eos": True})
                constrained.append(c["tps"])
                free.append(f["tps"])
            c_tps, f_tps = statistics.median(constrained), statistics.median(free)
            print(f"{label:8}: constrained {c_tps:5.1f} tok/s   free {f_tps:5.1f} tok/s   "
                  f"ratio {c_tps / f_tps:.3f}   ({n} tokens)")
    finally:
        server.stop()
