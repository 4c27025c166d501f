"""--lora: two random LoRA adapters made for the model (rank 8, on its attention weights), two streams
at once with one adapter against two streams with different adapters (and none): the aggregate
tok/s of each and the mixed / one-adapter ratio, the cost of a batch per adapter set (no goal)."""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from localchat.models import ModelSpec
from localchat.serve_process import Server

from .common import concurrent_streams, story, wait_idle


def lora_targets(path: Path) -> tuple[str, dict[str, tuple[int, int]]]:
    """The model's architecture and its attention weights' shapes (llama.cpp's order: n_in, n_out)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    arch = str(reader.fields["general.architecture"].contents())
    return arch, {t.name: (int(t.shape[0]), int(t.shape[1])) for t in reader.tensors
                  if t.name.endswith((".attn_q.weight", ".attn_v.weight"))}


def lora_bench(spec: ModelSpec, n: int, rounds: int) -> None:
    """Two streams at once: without adapters, both with one adapter, each with its own. llama.cpp
    applies adapters to the whole context, so two adapter sets decode in two batches a step."""
    from localchat.devtools.tinymodels import write_lora

    folder = Path(tempfile.mkdtemp(prefix="localchat-bench-lora-"))
    arch, targets = lora_targets(spec.file())
    loras = [write_lora(folder / f"lora-{k}.gguf", arch, targets, seed=k, rank=8, alpha=8.0, std=0.02)
             for k in (1, 2)]
    config = folder / "models.toml"
    config.write_text(f'[models.{spec.name}]\npath = "{spec.file()}"\n'
                      + (f"context_length = {spec.context_length}\n" if spec.context_length else "")
                      + "loras = [" + ", ".join(f'{{name = "{k}", path = "{p}", scale = 0}}'
                                                for k, p in zip(("one", "two"), loras)) + "]\n")
    cases = {"no adapter": (None, None), "one adapter, both": ("one", "one"), "two adapters": ("one", "two")}
    print(f"model {spec.name}: 2 streams at once, {n} tokens each, greedy, ignore_eos, rank-8 adapters on "
          f"{len(targets)} attention weights, {rounds} rounds (median)")
    server = Server(config, "--model", spec.name)
    try:
        url = server.url
        concurrent_streams(url, [{**story(spec.name, 8, f"warm-up {i}"), "lora": "one"} for i in range(2)])
        tps: dict[str, list[float]] = {k: [] for k in cases}
        for r in range(rounds):
            for label, choice in cases.items():
                wait_idle(url, spec.name)
                bodies = [{**story(spec.name, n, f"{label} {i}, round {r}"), "lora": [] if c is None else c}
                          for i, c in enumerate(choice)]
                tps[label].append(concurrent_streams(url, bodies)["tps"])
        agg = {k: statistics.median(v) for k, v in tps.items()}
        for label in cases:
            print(f"  {label:18}: {agg[label]:6.1f} tok/s aggregate   x{agg[label] / agg['no adapter']:5.2f} "
                  "the no-adapter aggregate")
        print(f"mixing two adapters / one adapter: {agg['two adapters'] / agg['one adapter, both']:.3f} "
              "(the cost of a batch per adapter set)")
    finally:
        server.stop()
