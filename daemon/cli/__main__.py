"""`python -m daemon.cli`: the k25-ctl command."""

from daemon.cli.main import main

main()
