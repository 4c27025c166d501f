"""--vision: what an image costs, in prompt tokens and time to first token (the tiny test projector,
or the model's own `mmproj`), cold and read again from the prompt cache (no goal)."""

from __future__ import annotations

import io
import statistics
import tempfile
from pathlib import Path

from localchat.models import ModelSpec
from localchat.serve_process import Server

from .common import http_stream, wait_idle


def vision_bench(config: Path, spec: ModelSpec, rounds: int) -> None:
    """Time to first token of a short question alone, with a new 640×480 image, and with the
    same image again (read from the slot's prompt cache)."""
    import numpy as np
    from PIL import Image

    if spec.mmproj is None:  # the tiny model and projector the tests use
        from localchat.families import FAMILIES
        from localchat.devtools.tinymodels import write_tiny_mmproj, write_tiny_model

        folder = Path(tempfile.mkdtemp(prefix="localchat-bench-vision-"))
        model = write_tiny_model(folder / "tiny-vision.gguf", FAMILIES["gemma"], n_ctx=2048,
                                 extra=("<start_of_image>", "<end_of_image>"))
        mmproj = write_tiny_mmproj(folder / "tiny-vision-mmproj.gguf")
        config = folder / "models.toml"
        config.write_text(f'[models.tiny-vision]\npath = "{model}"\nmmproj = "{mmproj}"\ncontext_length = 2048\n')
        name = "tiny-vision"
    else:
        name = spec.name

    def image(seed: int) -> str:
        pixels = np.random.default_rng(seed).integers(0, 256, (480, 640, 3), dtype=np.uint8)
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, "JPEG", quality=90)
        return "data:image/jpeg;base64," + __import__("base64").b64encode(out.getvalue()).decode()

    def body(k: int, url: str | None) -> dict:
        parts = [{"type": "text", "text": f"{k}. What is in this picture?"}]
        parts += [{"type": "image_url", "image_url": {"url": url}}] if url else []
        return {"model": name, "messages": [{"role": "user", "content": parts}], "max_tokens": 4,
                "temperature": 0, "ignore_eos": True}

    server = Server(config, "--model", name)
    try:
        http_stream(server.url, body(-1, image(1000)))  # warm-up
        runs: dict[str, list[dict]] = {"text only": [], "a new image": [], "the same image again": []}
        for r in range(rounds):
            url = image(r)
            for label, b in (("text only", body(2 * r, None)), ("a new image", body(2 * r + 1, url)),
                             ("the same image again", body(2 * r + 1, url))):
                wait_idle(server.url, name)
                runs[label].append(http_stream(server.url, b))
        print(f"model {name}: a 640×480 JPEG in a short question, {rounds} rounds (median)")
        for label, rs in runs.items():
            u = rs[-1]["usage"]
            print(f"  {label:22}: ttft {statistics.median(x['ttft'] for x in rs) * 1000:7.1f} ms   prompt "
                  f"{u['prompt_tokens']} tokens, {u['prompt_tokens_details']['cached_tokens']} cached")
        extra = runs["a new image"][-1]["usage"]["prompt_tokens"] - runs["text only"][-1]["usage"]["prompt_tokens"]
        print(f"an image costs {extra} prompt tokens (its own and the model's markers around it)")
    finally:
        server.stop()
