# Copyright: (c) 2026, k25-ctl developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options every k25.ctl module takes (module_utils/k25_api.py's argument spec)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  url:
    description:
      - The k25-ctl daemon's API. The module runs on the managed host, where the daemon listens on loopback.
    type: str
    default: http://127.0.0.1:8025
  token_file:
    description:
      - The file on the managed host that holds the daemon's write token (mode 0600, root's).
    type: path
    default: /etc/k25-ctl/token
  token:
    description: The write token itself, instead of I(token_file).
    type: str
  timeout:
    description: Seconds to wait for one answer of the API (a switch or benchmark waits longer, on its run).
    type: int
    default: 30
  validate_certs:
    description: Verify the daemon's TLS certificate where I(url) is https.
    type: bool
    default: true
  ca_path:
    description: A CA certificate bundle to verify the daemon's TLS certificate with (I(url) https).
    type: path
  reconnect_timeout:
    description:
      - While waiting on a run, seconds to keep asking a daemon that stopped answering (killed, restarted
        by systemd) before the task fails. Once it is back, the task says what became of the run.
    type: int
    default: 120
notes:
  - Set these for every k25.ctl module at once with C(module_defaults) and the action group
    C(group/k25.ctl.k25).
  - The modules also take Ansible's URL options (C(ansible.builtin.url)'s documentation fragment), which
    the request goes through (fetch_url) as it does for Ansible's own modules.
"""
