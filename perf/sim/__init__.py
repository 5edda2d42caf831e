"""The seeded simulation of a host's operation (issue 70): perf/simulate.py runs it long, tests/system runs a
CI-sized part. world (the sandbox), steps (what is done), invariants (what must hold), walk, shrink."""
