"""What the teardown routes call: the plan (what a teardown would kill and delete) and a maintenance
teardown, admitted as a job of its own (switching/maintenance.py)."""

from __future__ import annotations

from daemon.api.teardown_schemas import TeardownPlanOut, TeardownReportOut, TeardownRunOut
from daemon.switching.maintenance import MaintenanceTeardown


class TeardownController:
    def __init__(self, maintenance: MaintenanceTeardown) -> None:
        self.maintenance = maintenance

    async def teardown_plan(self) -> TeardownPlanOut:
        return TeardownPlanOut.model_validate(await self.maintenance.plan())

    async def run_teardown(self) -> TeardownRunOut:
        """Maintenance teardown: only when no engine should run (the host is idle, failed or degraded)."""
        run_id, report = await self.maintenance.run()
        return TeardownRunOut(run_id=run_id, report=TeardownReportOut.model_validate(report.to_dict()))
