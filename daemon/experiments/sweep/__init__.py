"""Sweeps: an experiment over variants of one profile. variants (derived from the axes), service (held as
profiles while the sweep runs, planned, promoted), ranking (the variants ranked by the verdict rules)."""
