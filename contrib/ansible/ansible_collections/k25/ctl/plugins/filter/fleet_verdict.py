# Copyright: (c) 2026, k25-ctl developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet's verdict from each host's own A/B (k25.ctl.k25_experiment on every host): hardware differs
between hosts, so hosts are never compared with each other; each host judged its profiles against its own
baseline, and the fleet's verdict is what those within-host verdicts agree on."""

from __future__ import annotations

import math

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: fleet_verdict
short_description: One fleet verdict per profile from each host's own A/B verdicts
version_added: 1.0.0
author: k25-ctl developers (@k25-ctl)
description:
  - Takes each host's C(k25.ctl.k25_experiment) result (a dict of host name to result) and returns, per
    profile, how many hosts found it faster, slower or not different, the geometric mean and range of
    the per-host speed-ups, and one verdict.
  - The verdict is C(faster) (or C(slower)) when every host that reached a verdict says so, C(mixed) when
    hosts disagree (the hosts are named), and C(no difference detected) when none found one.
positional: _input
options:
  _input:
    description: Host name to that host's k25_experiment result.
    type: dict
    required: true
"""

EXAMPLES = r"""
fleet: >-
  {{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'ab')))
     | k25.ctl.fleet_verdict }}
"""

RETURN = r"""
_value:
  description: Profile name to its fleet verdict (hosts, faster, slower, no_difference, speedup_geomean,
    speedup_min, speedup_max, verdict, text).
  type: dict
"""

FASTER = "faster"
SLOWER = "slower"


def fleet_verdict(by_host):
    if not isinstance(by_host, dict):
        raise AnsibleFilterError("fleet_verdict takes a dict of host name to k25_experiment result")
    per_profile = {}
    for host, result in sorted(by_host.items()):
        rows = (result or {}).get("results") or []
        for row in rows[1:]:  # the first profile is each host's baseline
            per_profile.setdefault(row["profile"], []).append((host, row.get("verdict"), row.get("speedup")))
    return {name: _judge(found) for name, found in per_profile.items()}


def _judge(found):
    faster = [host for host, verdict, speedup in found if verdict == FASTER]
    slower = [host for host, verdict, speedup in found if verdict == SLOWER]
    other = [host for host, verdict, speedup in found if verdict not in (FASTER, SLOWER)]
    speedups = [
        speedup for host, verdict, speedup in found if isinstance(speedup, (int, float)) and speedup > 0
    ]
    geomean = math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else None
    if faster and slower:
        verdict = "mixed"
    elif faster or slower:
        verdict = FASTER if faster else SLOWER
    else:
        verdict = "no difference detected"
    if verdict == "mixed":
        text = f"mixed: faster on {', '.join(faster)}, slower on {', '.join(slower)}"
    else:
        text = f"{verdict} on {len(faster or slower or other)} of {len(found)} hosts"
    if geomean is not None:
        text += f" (speed-up {geomean:.2f}x, {min(speedups):.2f}-{max(speedups):.2f})"
    return dict(
        hosts=len(found),
        faster=faster,
        slower=slower,
        no_difference=other,
        speedup_geomean=geomean,
        speedup_min=min(speedups) if speedups else None,
        speedup_max=max(speedups) if speedups else None,
        verdict=verdict,
        text=text,
    )


class FilterModule:
    def filters(self):
        return {"fleet_verdict": fleet_verdict}
