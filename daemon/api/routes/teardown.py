"""Maintenance teardown: the dry-run plan, and a teardown when no engine should run."""

from __future__ import annotations

from daemon.api.routes.common import TeardownCtl, reads, writes
from daemon.api.teardown_schemas import TeardownPlanOut, TeardownRunOut

read = reads("teardown", "/teardown")
write = writes("teardown", "/teardown")


@read.get("/plan")
async def teardown_plan(c: TeardownCtl) -> TeardownPlanOut:
    return await c.teardown_plan()


@write.post("")
async def teardown(c: TeardownCtl) -> TeardownRunOut:
    return await c.run_teardown()
