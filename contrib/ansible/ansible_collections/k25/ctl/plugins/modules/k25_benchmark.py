#!/usr/bin/python
# Copyright: (c) 2026, k25-ctl developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: k25_benchmark
short_description: Benchmark the serving profile of a k25-ctl host against the host's own normal
description:
  - Runs a benchmark of the active profile (C(POST /benchmarks)), waits for it, and returns its figures
    and its throughput relative to the median of the host's last 5 benchmarks of the same profile and
    spec (C(relative)). Comparing a host with itself cancels what differs between hosts.
  - With I(min_relative) it is a gate, as a rollout uses it; the task fails when the host measures
    slower than that fraction of its own normal. The daemon records the gate with the benchmark (its
    spec's C(gate)) and gives the verdict (C(GET /benchmarks/ID)'s C(gate)), so a later play can ask
    whether a host's activation was gated (C(k25.ctl.k25_profile)'s C(gate)).
  - The host's normal is per profile, benchmark spec and whether other clients were served while it ran
    (C(other_traffic)). A first benchmark of its kind has nothing to compare with and passes, saying so,
    unless I(require_normal).
  - Never C(changed), since a measurement changes nothing an operator manages (it is recorded as a run
    all the same); in check mode nothing runs.
version_added: 1.0.0
author:
  - k25-ctl developers (@k25-ctl)
extends_documentation_fragment:
  - k25.ctl.k25
  - ansible.builtin.url
options:
  benchmark:
    description:
      - The benchmark's spec as C(POST /benchmarks) takes it (concurrency, num_prompts, max_tokens,
        warmups, dataset, ...); the daemon's defaults where left out.
    type: dict
    default: {}
  isolate:
    description: Take the host out of the balancer's rotation while it measures (C(/ready) 503).
    type: bool
    default: false
  min_relative:
    description: Fail when the throughput is below this fraction of the host's own normal (0.9 allows 10%).
    type: float
  require_normal:
    description:
      - With I(min_relative), fail when the host has no normal to compare with (no earlier benchmark of
        this profile and spec, with or without other traffic as this one), rather than pass.
    type: bool
    default: false
  wait_timeout:
    description: Seconds to wait for the benchmark.
    type: int
    default: 3600
"""

EXAMPLES = r"""
- name: A short benchmark, within 10% of this host's normal
  k25.ctl.k25_benchmark:
    benchmark: {concurrency: [4], num_prompts: 32, max_tokens: 128}
    min_relative: 0.9
"""

RETURN = r"""
run_id:
  description: The benchmark's run (C(k25-ctl bench show ID)).
  returned: unless in check mode
  type: int
profile:
  description: The profile measured.
  returned: unless in check mode
  type: str
output_throughput:
  description: Output tokens per second at the first concurrency level.
  returned: unless in check mode
  type: float
relative:
  description:
    - This throughput over the host's own normal (C(ratio)), the median it is held to (C(baseline)) and how
      many runs that median has (C(baseline_runs)); null for the first benchmark of its kind.
  returned: unless in check mode
  type: dict
passed:
  description:
    - The gate's answer (true without I(min_relative); without a baseline, true unless I(require_normal)).
  returned: unless in check mode
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.k25.ctl.plugins.module_utils.k25_api import K25Api, K25Error, k25_argument_spec


def main():
    spec = k25_argument_spec()
    spec.update(
        benchmark=dict(type="dict", default={}),
        isolate=dict(type="bool", default=False),
        min_relative=dict(type="float"),
        require_normal=dict(type="bool", default=False),
        wait_timeout=dict(type="int", default=3600),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    api = K25Api(module)
    p = module.params
    if module.check_mode:
        module.exit_json(changed=False, msg="a benchmark would run")
    result = dict(changed=False)
    body = dict(p["benchmark"])
    if p["min_relative"] is not None:
        body["gate"] = dict(min_relative=p["min_relative"], require_normal=p["require_normal"])
    try:
        answer = api.post("/benchmarks", body, params=dict(isolate=p["isolate"]))[1]
        result["run_id"] = run_id = answer["run_id"]
        run = api.wait_run(run_id, p["wait_timeout"])
        if run["outcome"] != "ok":
            module.fail_json(msg=f"benchmark run {run_id} ended {run['outcome']}: {run['error']}", **result)
        bench = api.get(f"/benchmarks/{run_id}")
    except K25Error as e:
        api.fail(e, **result)
    relative, gate = bench.get("relative"), bench.get("gate")
    result.update(profile=bench["profile"], output_throughput=bench["output_throughput"], relative=relative)
    result["passed"] = gate is None or gate["passed"]
    if gate is not None:
        result["msg"] = f"{bench['profile']}: {gate['text']}"
    if not result["passed"]:
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
