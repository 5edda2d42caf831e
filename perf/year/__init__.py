"""A year of a busy host's history (issue 70): written through the store layer (writer), then read through
the daemon (perf/history.py)."""
