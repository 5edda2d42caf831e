"""A against B: experiments in interleaved rounds, sweeps, the comparison, and the one judge with its one
Verdict; scheduled experiments as transient systemd timers (timers.py)."""
