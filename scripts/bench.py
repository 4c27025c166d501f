"""localchat benchmark: HTTP streaming against direct llama.cpp decoding, measured side by side.

    scripts/bench [--tokens N] [--rounds R] [--model NAME] [--config PATH]
    scripts/bench --json-schema [--rounds R]
    scripts/bench --concurrency [--tokens N] [--rounds R]
    scripts/bench --worker [--tokens N] [--rounds R]
    scripts/bench --tools [--rounds R]
    scripts/bench --lora [--tokens N] [--rounds R] [--model NAME]
    scripts/bench --vision [--rounds R] [--model NAME]
    scripts/bench --edit [--model NAME] [--tokens N]  (default: qwen2.5-coder-1.5b, 1200 tokens)
    scripts/bench --agent [--model NAME]            (LLAMA_SERVER=path/to/llama-server: side by side)
    scripts/bench --rpc [--model NAME] [--tokens N] [--rounds R]   (root; builds an RPC llama-cpp-python once)
    scripts/bench --upstream [--model NAME] [--tokens N] [--rounds R]
    scripts/bench --decode [--model NAME] [--tokens N] [--rounds R]  (LLAMA_SERVER: side by side)
    scripts/bench --long [--model NAME] [--tokens N]  (default: the default model, 128 tokens)
    scripts/bench --fim [--model NAME]              (default: qwen2.5-coder-1.5b and -0.5b)
    scripts/bench --kv [--model NAME] [--tokens N]  (default: qwen2.5-coder-0.5b, 64 tokens)

Prints decode tokens/s through the server (SSE, official-client framing) and through
llama-cpp-python directly (no HTTP, same prompt tokens, same greedy sampling), their ratio,
time to first token, and a multi-turn chat's second-turn time to first token with prefix reuse
against a cold start. With --json-schema: tokens/s of output constrained by a small JSON object
schema against free output, same prompt, same length, greedy and sampled. With --concurrency:
the aggregate decode tokens/s of 1, 2 and 4 streams at once (and each against 1 stream), a short
request's time to first token alone and during a long stream, the single-stream HTTP/direct
ratio, and whether each meets its goal. With --lora: two random LoRA adapters made for the model,
two streams at once with one adapter against two streams with different adapters (and none).
With --vision: what an image costs, in prompt tokens and time to first token (the tiny test
projector, or the model's own `mmproj`), cold and read again from the prompt cache.
With --edit: a 121-line file returned with a variable renamed throughout, greedy: decode tok/s without drafts
(ngram_draft 0) and with them (the default), the text asserted identical; the module case again with
the file as the prediction (OpenAI's Predicted Outputs: goals >= 2x without drafts, >= drafts from
the prompt, identical, and the prediction's accepted/rejected tokens from usage); llama-server's
tok/s with --spec-type ngram-mod when LLAMA_SERVER names its binary (goals: >= 2x without
drafts, >= llama-server's), and what drafts could give at best here: a step of k tokens' cost
against one token's (a compute-bound CPU pays nearly k times for k).
With --agent: an agent-like prompt of 10k+ tokens (long instructions, 24 tools, an environment
block), time to first token cold, then the next turn, a new session, a new session after a
restart, after an unload, and a new session whose environment block moved (written after the
user's prompt inside its text), and the same on /v1/messages as Claude Code 2.1.3xx sends it (the
block a system message after the user's): each against cold (goal <= 5%), and llama-server's
figures for the same requests when LLAMA_SERVER names its binary (--cache-reuse 256, --cache-ram).
With --rpc: the model with all its layers on a `localchat rpc-worker` in a network namespace joined by
a veth pair (localchat/devtools/rpclink.py) against the same model loaded directly: decode tok/s and time to first
token, rounds interleaved. Both run on this machine's CPU, so this is the link's cost, not a GPU's gain.
With --decode: a chat answer's decode tok/s (the default model, 256 tokens greedy), with drafts and
without, and llama-server's on the same GGUF when LLAMA_SERVER names its binary, one after another
in each round (goal: localchat with drafts >= llama-server).
With --long: decode tok/s after a prompt of ~2k and ~8k tokens (read first, then the decode
measured), greedy past any end of turn, no drafts, against llama-server's (goal: >= it).
With --fim: llama.vscode's /infill requests (16 chunks of other files, the lines around the
cursor, the typed part of the line; n_predict 128, t_max_predict_ms 500, n_indent): one cold,
then one a keystroke; time to the answer, p50 against llama-server's as llama.vscode's README
starts it (goal: p50 <= llama-server's).
With --upstream: a localchat (serve --peer) and a second one serving its model through an
`upstream =` entry (token mode), the same request to each in turn: tok/s and ttft (goal: >= 0.95
of direct tok/s).
With --kv: f16, q8_0 and q4_0 K/V cache cells (serve -ctk/-ctv): the context that fits the memory
32k tokens of f16 cells need, decode tok/s after an ~8k-token prompt, and the mean absolute
difference of the top-token log-probabilities from f16's over a ~2k-token text (goal: q8_0 fits
>= 1.8x the context with decode within 10%).
A benchmark, not a test: figures vary with the machine's load.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/: the benchmarks package beside this file

from benchmarks.cli import main  # noqa: E402  (one module a benchmark: scripts/benchmarks/)

if __name__ == "__main__":
    main(__doc__)
