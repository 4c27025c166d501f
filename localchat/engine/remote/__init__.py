"""Engines elsewhere: another server as an upstream (upstream.py, upstream_chat.py for chat-mode
ones) and llama.cpp's RPC workers (rpc.py)."""
