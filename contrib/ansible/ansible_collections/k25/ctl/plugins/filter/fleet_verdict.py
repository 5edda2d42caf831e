# Copyright: (c) 2026, k25-ctl developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet's verdict from each host's own A/B (k25.ctl.k25_experiment on every host): hardware differs
between hosts, so hosts are never compared with each other; each host judged its profiles against its own
baseline, and the fleet's verdict is what those within-host verdicts agree on. Where the hosts give their
intervals, they are pooled into one fleet interval (a random-effects mean of the log ratios, DerSimonian
and Laird 1986: the hosts may truly differ), and a host whose ratio lies outside where the others predict a
host's would fall is named as an outlier (its studentized deleted residual, Viechtbauer and Cheung 2010:
its own uncertainty, the others' pooled mean's, and the spread between the others, which a host's one
benchmark does not see: a stall that moved one healthy host's ratio must not make a third host look odd)."""

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
  - With each host's 99% interval of the ratio (C(interval)), the fleet's ratio and interval pooled from
    them (C(fleet_ratio), C(fleet_interval)), and the hosts that disagree with the others beyond their own
    uncertainty, the others' and the spread between the others (C(outliers)). With three hosts, a host is
    named only where the other two agree with each other better than with it.
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
    speedup_min, speedup_max, fleet_ratio, fleet_interval, outliers, verdict, text).
  type: dict
"""

FASTER = "faster"
SLOWER = "slower"


def fleet_verdict(by_host):
    if not isinstance(by_host, dict):
        raise AnsibleFilterError("fleet_verdict takes a dict of host name to k25_experiment result")
    per_profile, logs = {}, {}
    for host, result in sorted(by_host.items()):
        rows = (result or {}).get("results") or []
        for row in rows[1:]:  # the first profile is each host's baseline
            per_profile.setdefault(row["profile"], []).append((host, row.get("verdict"), row.get("speedup")))
            found = _log_interval(row)
            if found is not None:
                logs.setdefault(row["profile"], {})[host] = found
    out = {name: _judge(found) for name, found in per_profile.items()}
    for name, verdict in out.items():
        verdict.update(_pooled(logs.get(name, {})))
        if verdict["outliers"]:
            verdict["text"] += "; " + ", ".join(
                f"{o['host']} disagrees ({o['ratio']:.2f}x against {o['others']:.2f}x)"
                for o in verdict["outliers"]
            )
        if verdict["fleet_interval"] is not None:
            low, high = verdict["fleet_interval"]
            verdict["text"] += f"; fleet {verdict['fleet_ratio']:.2f}x [{low:.2f}, {high:.2f}]"
    return out


Z99 = 2.5758  # the daemon's verdict intervals are 99%


def _log_interval(row):
    """(log ratio, its standard error) from the host's 99% interval; None without one."""
    band = row.get("interval")
    if not band or len(band) != 2 or not all(isinstance(x, (int, float)) and x > 0 for x in band):
        return None
    low, high = math.log(band[0]), math.log(band[1])
    return (low + high) / 2, max((high - low) / (2 * Z99), 1e-9)


def _random_effects(found):
    """DerSimonian-Laird: the pooled log ratio, its standard error and the between-host variance (tau²)
    over (log ratio, se) pairs."""
    logs = [x for x, se in found]
    ses = [se for x, se in found]
    w = [1 / se**2 for se in ses]
    fixed = sum(wi * x for wi, x in zip(w, logs, strict=True)) / sum(w)
    q = sum(wi * (x - fixed) ** 2 for wi, x in zip(w, logs, strict=True))
    c = sum(w) - sum(wi**2 for wi in w) / sum(w)
    tau2 = max(0.0, (q - (len(found) - 1)) / c) if c > 0 else 0.0
    w_star = [1 / (se**2 + tau2) for se in ses]
    mean = sum(wi * x for wi, x in zip(w_star, logs, strict=True)) / sum(w_star)
    return mean, math.sqrt(1 / sum(w_star)), tau2


def _pooled(by_host):
    """The fleet's ratio and 99% interval from the hosts' own, and each host that disagrees with the pool
    of the others: |difference| > 2.576 x the standard deviation of a host's ratio as the others predict
    it (the host's own se², the others' pooled mean's se² and the others' between-host variance)."""
    if not by_host:
        return dict(fleet_ratio=None, fleet_interval=None, outliers=[])
    mean, se, _tau2 = _random_effects(list(by_host.values()))
    outliers = []
    if len(by_host) >= 3:
        for host, (x, se_h) in sorted(by_host.items()):
            others = [v for h, v in by_host.items() if h != host]
            m_o, se_o, tau2_o = _random_effects(others)
            if abs(x - m_o) > Z99 * math.sqrt(se_h**2 + se_o**2 + tau2_o):
                outliers.append(dict(host=host, ratio=math.exp(x), others=math.exp(m_o)))
    return dict(
        fleet_ratio=math.exp(mean),
        fleet_interval=[math.exp(mean - Z99 * se), math.exp(mean + Z99 * se)],
        outliers=outliers,
    )


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
