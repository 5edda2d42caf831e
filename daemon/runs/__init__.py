"""Runs as they happen: the recorder (the one writer of a run's rows and events) and the job registry (one
job at a time: switch, warm, benchmark, experiment)."""
