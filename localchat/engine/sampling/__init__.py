"""What a sequence writes next and when it stops: the sampler and its grammar (sampling.py), checks
a grammar holds only in part (checking.py), loops (repetition.py), and stop strings and the
editor's line limits (text.py)."""
