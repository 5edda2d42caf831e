"""Clearing the GPUs for the next engine: stop every managed engine unit that runs (a parked one is spared),
then the teardown, which goes on only when the GPUs are proven clean."""

from __future__ import annotations

from daemon.core.run_types import Phase
from daemon.runs.recorder import RunRecorder
from daemon.switching.contracts import SwitchFailed, SwitchHost
from daemon.teardown.plan import Parked


async def stop_and_teardown(
    run_id: int,
    *,
    host: SwitchHost,
    recorder: RunRecorder,
    units: tuple[str, ...],
    spared: tuple[Parked, ...],
    spared_units: frozenset[str],
    gpus: tuple[int, ...] | None,
    tcp_ports: tuple[int, ...],
    stop_timeout_s: float,
) -> None:
    """`units`: every managed engine unit; `spared_units` (parked engines) are neither stopped nor, through
    `spared`, signalled by the teardown, and their residual is allowed. Raises SwitchFailed."""
    cgroups: dict[str, str] = {}
    for unit in units:
        if unit in spared_units:
            continue
        st = await host.systemd.state(unit)
        if not st.is_down:
            cgroups[unit] = st.control_group
            await recorder.event(run_id, Phase.STOP, f"stopping {unit} ({st.active_state})")
            out = await host.systemd.stop(unit, within_s=stop_timeout_s)
            how = " (SIGKILL after TimeoutStopSec)" if out.stop_escalated else ""
            await recorder.event(
                run_id, Phase.STOP, f"stopped {unit}: job {out.job_result}{how} in {out.seconds:.1f}s"
            )
    if not cgroups:
        await recorder.event(run_id, Phase.STOP, "no engine unit was running")
    kept = "".join(f"; sparing {pk.reason}" for pk in spared)
    await recorder.event(
        run_id, Phase.TEARDOWN, f"planning (GPUs {list(gpus or [])}, ports {list(tcp_ports)}){kept}"
    )
    report = await host.teardown.run(
        gpus, unit_cgroups=cgroups, managed_units=units, ports=tcp_ports, parked=spared
    )
    await recorder.teardown(run_id, report)
    if report.needs_reset:
        await host.gpus.stuck(run_id, report.needs_reset)
        raise SwitchFailed(report.error or "needs_reset", needs_reset=True)
    if not report.ok:
        raise SwitchFailed(f"teardown did not leave the GPUs clean: {report.error}")
