"""`python -m daemon.cli`: the k25-ctl command (its exit status is the command's)."""

import sys

from daemon.cli.entry import main

sys.exit(main())
