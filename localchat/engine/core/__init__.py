"""The step: the scheduler (scheduler.py) admits, plans and applies; the executor (executor.py) and
the decoder (decoder.py) run a plan on llama.cpp; media chunks (media_feed.py) and slot
save/restore actions (slot_actions.py)."""
