"""The daemon process: checks before it serves (preflight), its services built once (services, machine),
the lifespan that starts and stops them (app), and the one uvicorn process (serve)."""
