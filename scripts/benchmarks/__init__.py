"""scripts/bench's benchmarks, a module each; scripts/bench.py runs them (its docstring is the usage,
every flag and what each one measures), cli.py reads the flags and starts one.

    common       what several share: PROMPT, http_stream, slots/flush/wait_idle, direct_decode,
                 served_vs_direct, story, concurrent_streams, edit_file, long_body/long_run, LlamaServer
    served       (no flag) HTTP streaming against direct llama.cpp decoding, second-turn prefix reuse
    json_schema  --json-schema    decode tok/s constrained by a JSON schema against free
    concurrency  --concurrency    1, 2 and 4 streams at once; a short request's ttft during a long one
    worker       --worker         the worker process against llama.cpp inside the server
    tools        --tools          preparing an agent's 100-tool request
    lora         --lora           one LoRA adapter against two, two streams at once
    vision       --vision         what an image costs
    agent        --agent          an agent's 10k-token prompt, read once
    edit         --edit           a file returned with one rename: drafts from the text (--record: fixtures)
    long         --long           decode tok/s after a long prompt
    decode       --decode         a chat answer's decode tok/s beside llama-server's
    kv           --kv             quantized K/V cache cells
    fim          --fim            llama.vscode's /infill requests
    upstream     --upstream       a model served through another localchat
    rpc          --rpc            all layers on an rpc-worker across a veth pair
"""

from . import common  # noqa: F401  (first, whichever module is imported: isolate_home() before the rest)
