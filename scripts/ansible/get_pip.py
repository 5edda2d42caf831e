"""A stand-in for get-pip.py, which ansible-test downloads from ci-files.testing.ansible.com to put pip into
each sanity test's new virtual environment; that host is out of reach here (the package index is not). The
interpreter's own ensurepip puts a pip in, which then installs what get-pip was asked for (pip==X and the
test's packages) with the machine's pip configuration (its index and certificates).
tests/unit/test_ansible_sanity.py copies it where ansible-test keeps that script's cache."""

import ensurepip
import os
import subprocess
import sys

ensurepip.bootstrap(upgrade=True)
# ensurepip leaves PIP_CONFIG_FILE=/dev/null in the environment: the configuration must apply again.
env = {k: v for k, v in os.environ.items() if k not in ("PIP_CONFIG_FILE", "ENSUREPIP_OPTIONS")}
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]  # get-pip's own options
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", "--quiet", *args], env=env))  # noqa: S603
