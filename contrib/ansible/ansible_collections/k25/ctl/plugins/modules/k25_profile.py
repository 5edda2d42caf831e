#!/usr/bin/python
# Copyright: (c) 2026, k25-ctl developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: k25_profile
short_description: Switch a k25-ctl host to a serving profile
description:
  - Activates a serving profile on the host's k25-ctl daemon (C(POST /profiles/NAME/activate)); the daemon
    drains the serving engine, stops or parks it, tears the GPUs down, starts or wakes the new engine and
    proves it serves, or rolls back to the last known-good profile by itself.
  - Idempotent; a profile that is already active and healthy is C(changed=false).
  - Check mode asks the daemon what the switch would do (C(POST /plans)) and touches nothing.
  - Diff mode shows the active profile before and after.
  - Runs on the managed host itself; the API listens on loopback and the token is read from I(token_file).
version_added: 1.0.0
author:
  - k25-ctl developers (@k25-ctl)
extends_documentation_fragment:
  - k25.ctl.k25
  - ansible.builtin.url
options:
  name:
    description: The profile, as C(k25-ctl profiles) lists it.
    type: str
    required: true
  state:
    description: C(active) is the only state; C(k25.ctl.k25_profile) never deactivates.
    type: str
    default: active
    choices: [active]
  wait:
    description: Wait until the switch (and a rollback) has ended, and fail unless the profile is active.
    type: bool
    default: true
  wait_timeout:
    description: Seconds to wait for the switch; loading a 1T-parameter model can take 25 minutes.
    type: int
    default: 3600
  drain:
    description:
      - Take the host out of the balancer's rotation (C(/ready) 503) and let the serving engine finish its
        requests before it stops. C(false) cuts what it runs.
    type: bool
    default: true
  force:
    description: Switch even when the profile is already active (a restart of its engine; never drains).
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Serve with vLLM and EAGLE-3
  k25.ctl.k25_profile:
    name: vllm-eagle3

- name: What would a switch do (nothing changes)
  k25.ctl.k25_profile:
    name: sglang-eagle3
  check_mode: true
  register: plan
"""

RETURN = r"""
profile:
  description: The profile asked for.
  returned: always
  type: str
from_profile:
  description: The profile that served before (null when nothing did).
  returned: always
  type: str
run_id:
  description: The switch's run (C(k25-ctl run ID)); null when nothing was switched.
  returned: always
  type: int
outcome:
  description: The run's outcome (C(active) when it serves), or C(unchanged), or C(planned) in check mode.
  returned: always
  type: str
downtime_s:
  description: Seconds the host was out of the balancer's rotation, as a balancer saw it.
  returned: when a switch ran
  type: float
rollback:
  description: The rollback the daemon ran after a failed switch (its run_id, profile and outcome).
  returned: when the switch failed
  type: dict
known_answer:
  description: The profile's known answer (run_id that recorded it, and its agreement with the default).
  returned: when the profile is active
  type: dict
plan:
  description: What the daemon said the switch would do (C(POST /plans)).
  returned: in check mode
  type: dict
gate:
  description:
    - The newest gate benchmark (C(k25.ctl.k25_benchmark) with I(min_relative)) of the profile's current
      activation (its serving run) and its verdict (C(run_id), C(passed), C(text)); null when none was run,
      as for a host that reached the profile without a gate (a switch finished after a daemon restart).
      A rollout gates every host whose C(gate.passed) is not true.
  returned: when the profile was already active
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.k25.ctl.plugins.module_utils.k25_api import (
    K25Api,
    K25Error,
    k25_argument_spec,
    profile_path,
)


def main():
    spec = k25_argument_spec()
    spec.update(
        name=dict(type="str", required=True),
        state=dict(type="str", default="active", choices=["active"]),
        wait=dict(type="bool", default=True),
        wait_timeout=dict(type="int", default=3600),
        drain=dict(type="bool", default=True),
        force=dict(type="bool", default=False),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    api = K25Api(module)
    p = module.params
    name = p["name"]
    result = dict(changed=False, profile=name, from_profile=None, run_id=None)
    try:
        plan = api.post("/plans", {"activate": name, "drain": p["drain"], "force": p["force"]})[1]
        result["from_profile"] = plan["from_profile"]
        if plan["refused"]:
            module.fail_json(
                msg="k25-ctl would refuse the switch: {}".format(plan["refused"]), plan=plan, **result
            )
        result["changed"] = plan["switch"]
        if module._diff:
            result["diff"] = dict(
                before=f"profile: {plan['from_profile']}\n",
                after=f"profile: {name if plan['switch'] else plan['from_profile']}\n",
            )
        if module.check_mode or not plan["switch"]:
            result["outcome"] = "planned" if module.check_mode and plan["switch"] else "unchanged"
            result["plan"] = plan
            if not plan["switch"]:  # serving already: was this activation gated? (a rollout asks)
                result["gate"] = _gate(api, name)
                result["known_answer"] = _known_answer(api.get(profile_path(name)))
            module.exit_json(**result)
        switch(module, api, result)
    except K25Error as e:
        api.fail(e, **result)


def switch(module, api, result):
    p = module.params
    params = dict(drain=p["drain"], force=p["force"])
    _status, body = api.post(profile_path(p["name"]) + "/activate", params=params)
    if body.get("run_id") is None:  # it became active in between: nothing to do after all
        result.update(changed=False, outcome="unchanged")
        module.exit_json(**result)
    result["run_id"] = run_id = body["run_id"]
    if not p["wait"]:
        result["outcome"] = "running"
        module.exit_json(**result)
    run = api.wait_run(run_id, p["wait_timeout"])
    result["outcome"] = run["outcome"]
    result["downtime_s"] = (run.get("switch_cost") or {}).get("downtime_s")
    if run["outcome"] != "active":
        # What the daemon did after: a rollback, or (after a restart mid-start) a run that resumed it.
        after = api.get("/runs", params=dict(parent=run_id))
        back = next((r for r in after if r["kind"] in ("rollback", "switch")), None)
        if back is not None and back["outcome"] == "running":  # until it has ended
            back = api.wait_run(back["id"], p["wait_timeout"])
        if back is not None:
            result["rollback"] = dict(run_id=back["id"], profile=back["profile"], outcome=back["outcome"])
        module.fail_json(msg=_failed(api, p["name"], run, back), **result)
    result["known_answer"] = _known_answer(api.get(profile_path(p["name"])))
    module.exit_json(**result)


def _failed(api, name, run, after):
    """The failure in words: how the run ended and what the daemon did after it."""
    then = ""
    if after is not None:
        did = "rolled back to" if after["kind"] == "rollback" else "resumed the switch to"
        then = f"; {did} {after['profile']} (run {after['id']}): {after['outcome']}"
    if not api.lost:
        return f"the switch to {name} ended {run['outcome']}: {run.get('error') or ''}{then}"
    return (
        f"the daemon at {api.url} closed the connection during the switch to {name} (run {run['id']}) and "
        f"came back; run {run['id']}'s outcome: {run['outcome']}{then}. The host was not gated on {name}"
    )


def _gate(api, name):
    """The newest gate benchmark of the profile's current serving run, with the daemon's verdict."""
    serving = api.get("/status").get("serving_run_id")
    if serving is None:
        return None
    for b in api.get("/benchmarks", params=dict(profile=name, limit=20)):
        if b.get("serving_run_id") == serving and b["outcome"] == "ok" and (b.get("spec") or {}).get("gate"):
            verdict = api.get(f"/benchmarks/{b['run_id']}").get("gate") or {}
            return dict(run_id=b["run_id"], passed=bool(verdict.get("passed")), text=verdict.get("text"))
    return None


def _known_answer(profile):
    found = profile.get("known_answer")
    if not found:
        return None
    agreement = found.get("agreement")
    return dict(
        run_id=found["run_id"],
        recorded_at=found["recorded_at"],
        agreement=None
        if agreement is None
        else dict(
            other=agreement["other"],
            equal=agreement["equal"],
            from_first_token=agreement["from_first_token"],
            text=agreement["text"],
        ),
    )


if __name__ == "__main__":
    main()
