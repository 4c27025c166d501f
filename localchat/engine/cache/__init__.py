"""What a new prompt can be served from: the token matcher (matching.py), the slots' cached
prefixes and their moved cells (prefix_cache.py), the prompt store on disk (prompt_store.py) and
llama.cpp's per-sequence state bytes (kv_state.py)."""
