"""A model in a process of its own: the parent's WorkerEngine (worker.py) and the child's loop
(worker_child.py)."""
