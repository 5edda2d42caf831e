"""Switching the host between profiles: the transaction (stop, teardown, start, probe, rollback), the
bring-up of an engine, what engine units exec (launch), and reconciling with systemd after a daemon
restart."""
