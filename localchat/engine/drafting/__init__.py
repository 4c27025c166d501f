"""Drafts verified in the same batch: from text already read and written (drafts.py), from a draft
model (draft_model.py), and how long a draft pays for what a step costs here (draft_cost.py)."""
