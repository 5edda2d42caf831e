"""Teardown of the GPUs between engines: the plan (a pure function over a snapshot), its execution and
verification, and the policy built from settings."""
