#!/usr/bin/python
# Copyright: (c) 2026, k25-ctl developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: k25_experiment
short_description: Run an A/B experiment on a k25-ctl host and return its verdicts
description:
  - Runs an experiment on the host (C(POST /experiments)); the daemon switches to each profile in turn,
    benchmarks it, judges each profile against the first one from the requests themselves, and restores
    the profile that served before. The host leaves the balancer's rotation while it runs.
  - Returns one verdict per profile (faster, slower, no difference detected, within noise) with its
    speed-up; the first profile is the baseline. Every comparison is within this one host.
  - Always C(changed) (the experiment is a recorded run, and it switches profiles); in check mode nothing
    runs.
version_added: 1.0.0
author:
  - k25-ctl developers (@k25-ctl)
extends_documentation_fragment:
  - k25.ctl.k25
  - ansible.builtin.url
options:
  profiles:
    description: The profiles, the baseline first.
    type: list
    elements: str
    required: true
  benchmark:
    description: The benchmark each profile gets, as C(POST /experiments) takes it.
    type: dict
    default: {}
  repeats:
    description: Benchmarks per profile.
    type: int
    default: 1
  rounds:
    description: Interleaved rounds (ABBA for two profiles), so that a drift of the host falls on each alike.
    type: int
    default: 1
  restore:
    description: Bring the previous (or default) profile back at the end.
    type: bool
    default: true
  wait_timeout:
    description: Seconds to wait for the experiment.
    type: int
    default: 7200
"""

EXAMPLES = r"""
- name: Is EAGLE-3 faster on this host?
  k25.ctl.k25_experiment:
    profiles: [baseline, vllm-eagle3]
    benchmark: {concurrency: [4], num_prompts: 64, max_tokens: 256}
    rounds: 2
  register: ab
"""

RETURN = r"""
run_id:
  description: The experiment's run (C(k25-ctl experiment show ID)).
  returned: unless in check mode
  type: int
outcome:
  description: The experiment's outcome (C(ok) when every profile was measured).
  returned: unless in check mode
  type: str
verdicts:
  description: The daemon's verdict lines, one per profile against the first ("vllm-eagle3 ... slower").
  returned: unless in check mode
  type: list
  elements: str
results:
  description:
    - Per profile (the baseline first), its verdict, speed-up, output throughput and the throughput ratio's
      99% interval on this host (C(interval), for the fleet's pooled verdict).
  returned: unless in check mode
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.k25.ctl.plugins.module_utils.k25_api import K25Api, K25Error, k25_argument_spec


def main():
    spec = k25_argument_spec()
    spec.update(
        profiles=dict(type="list", elements="str", required=True),
        benchmark=dict(type="dict", default={}),
        repeats=dict(type="int", default=1),
        rounds=dict(type="int", default=1),
        restore=dict(type="bool", default=True),
        wait_timeout=dict(type="int", default=7200),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    api = K25Api(module)
    p = module.params
    request = {k: p[k] for k in ("profiles", "benchmark", "repeats", "rounds", "restore")}
    result = dict(changed=True)
    try:
        if module.check_mode:
            known = {x["name"] for x in api.get("/profiles") if x["valid"]}
            missing = [n for n in p["profiles"] if n not in known]
            if missing:
                module.fail_json(msg=f"no valid profile {', '.join(missing)} on this host")
            module.exit_json(changed=True, msg="the experiment would run", request=request)
        result["run_id"] = run_id = api.post("/experiments", request)[1]["run_id"]
        run = api.wait_run(run_id, p["wait_timeout"])
        exp = api.get(f"/experiments/{run_id}")
    except K25Error as e:
        api.fail(e, **result)
    result.update(outcome=run["outcome"], verdicts=exp.get("verdicts", []), results=results(exp))
    if run["outcome"] != "ok":
        module.fail_json(msg=f"experiment run {run_id} ended {run['outcome']}: {run['error']}", **result)
    module.exit_json(**result)


def results(exp):
    rows = {r["profile"]: r for r in ((exp.get("comparison") or {}).get("rows") or [])}
    out = []
    for name in exp["request"]["profiles"]:
        row = rows.get(name, {})
        judged = (row.get("judged") or {}).get("throughput") or {}
        out.append(
            dict(
                profile=name,
                verdict=row.get("verdict"),
                verdict_text=row.get("verdict_text"),
                speedup=row.get("speedup"),
                output_throughput=row.get("output_throughput"),
                # the throughput ratio's 99% interval on this host (null: not judged from requests)
                interval=[judged["low"], judged["high"]] if "low" in judged else None,
            )
        )
    return out


if __name__ == "__main__":
    main()
