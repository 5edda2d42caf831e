"""The k25-ctl command: local commands (serve, launch, check-profiles, db, sandbox) and remote ones over
the daemon's REST API."""
