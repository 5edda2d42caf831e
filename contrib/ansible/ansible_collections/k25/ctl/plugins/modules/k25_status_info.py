#!/usr/bin/python
# Copyright: (c) 2026, k25-ctl developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: k25_status_info
short_description: Read a k25-ctl host's state
description:
  - Reads the host's k25-ctl daemon (C(GET /status), C(/profiles), C(/benchmarks)) and returns its state,
    the active profile, the parked engines, whether the GPUs are clean, each profile's known answer and
    its newest benchmark.
  - Reads only (the API's reads need no token on loopback); register the result to use it. Before 1.1.0 it
    was C(k25.ctl.k25_status) and set the fact C(k25_ctl); that name still works, deprecated, and an
    C(_info) module returns data rather than facts (Ansible's module guidelines).
version_added: 1.0.0
author:
  - k25-ctl developers (@k25-ctl)
extends_documentation_fragment:
  - k25.ctl.k25
  - ansible.builtin.url
options: {}
"""

EXAMPLES = r"""
- name: Read the host
  k25.ctl.k25_status_info:
  register: k25_ctl

- name: Every host serves the baseline
  ansible.builtin.assert:
    that: k25_ctl.active_profile == 'baseline'
"""

RETURN = r"""
state:
  description: idle, switching, active, unhealthy, failed, degraded or needs_reset.
  returned: always
  type: str
active_profile:
  description: The profile that serves (null when none does).
  returned: always
  type: str
reason:
  description: Why the host is in its state, when k25-ctl says.
  returned: always
  type: str
parked:
  description: Profiles whose engines sleep for a fast switch back.
  returned: always
  type: list
  elements: str
gpus_clean:
  description: No GPU process is left that no serving or parked engine explains (no strays), and the GPUs
    could be read.
  returned: always
  type: bool
strays:
  description: GPU processes k25-ctl would tear down (pid and title).
  returned: always
  type: list
  elements: dict
profiles:
  description: Per valid profile, its known answer (recording run, agreement with the default) and newest
    benchmark (run_id, output tok/s, when).
  returned: always
  type: dict
ansible_facts:
  description: C(k25_ctl), the same data.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.k25.ctl.plugins.module_utils.k25_api import K25Api, K25Error, k25_argument_spec


def main():
    module = AnsibleModule(argument_spec=k25_argument_spec(), supports_check_mode=True)
    api = K25Api(module)
    try:
        status = api.get("/status")
        profiles = api.get("/profiles")
        benchmarks = api.get("/benchmarks", params=dict(limit=200))
    except K25Error as e:
        api.fail(e)
    facts = summary(status, profiles, benchmarks)
    module.exit_json(changed=False, **facts)


def summary(status, profiles, benchmarks):
    newest = {}
    for b in benchmarks:  # newest first
        if b["profile"] not in newest and b["outcome"] == "ok":
            newest[b["profile"]] = dict(
                run_id=b["run_id"], output_throughput=b["output_throughput"], started_at=b["started_at"]
            )
    per_profile = {}
    for p in profiles:
        if not p["valid"]:
            continue
        answer = p.get("known_answer")
        agreement = (answer or {}).get("agreement")
        per_profile[p["name"]] = dict(
            default=p.get("default", False),
            parked=p.get("parked", False),
            known_answer=None
            if answer is None
            else dict(
                run_id=answer["run_id"],
                equal_to_default=None if agreement is None else agreement["equal"],
                differs_from_first_token=None if agreement is None else agreement["from_first_token"],
            ),
            benchmark=newest.get(p["name"]),
        )
    strays = [dict(pid=s["pid"], title=s["title"]) for s in status.get("strays", [])]
    return dict(
        state=status["state"],
        active_profile=status["active_profile"],
        reason=status.get("reason"),
        parked=[x["profile"] for x in status.get("parked", [])],
        gpus_clean=not strays and not status.get("gpu_error"),
        strays=strays,
        profiles=per_profile,
    )


if __name__ == "__main__":
    main()
