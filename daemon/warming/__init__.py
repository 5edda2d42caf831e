"""Weight files in the page cache: residency scans and warms (the warmer) and warms as runs (the service)."""
