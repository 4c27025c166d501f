"""What the scheduler keeps per request and per slot: a Job (job.py) and a Slot with its sequences
(slot.py). Below the cache and the core, which both read and write them."""
