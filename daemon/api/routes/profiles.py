"""Profiles and switching between them: list, reload, activate, warm, unpark, restore."""

from __future__ import annotations

from fastapi import Response

from daemon.api.host_schemas import HostOut
from daemon.api.routes.common import ProfilesCtl, Responses, accepted, located, reads, writes
from daemon.api.schemas import AcceptedOut, ProfileOut, ReloadOut, RunOut

read = reads("profiles", "/profiles")
write = writes("profiles", "/profiles")
restoring = writes("profiles")
host_read = reads("host")
SWITCH: Responses = {
    200: {"model": AcceptedOut | RunOut, "description": "already active (no run), or the ended run (wait)"},
    202: {"model": AcceptedOut, "description": "the switch started: its run id, and Location: /runs/N"},
}


@host_read.get("/host")
async def host(c: ProfilesCtl) -> HostOut:
    """The host's park rates (`k25-ctl host calibrate`; the documented defaults where it never ran) and the
    predicted park and wake seconds and host RAM of each way each parking profile can park."""
    return c.host()


@read.get("")
async def profiles(c: ProfilesCtl) -> list[ProfileOut]:
    return await c.profiles()


@read.get("/{name}")
async def profile(name: str, c: ProfilesCtl) -> ProfileOut:
    return await c.profile(name)


@write.post("/reload")
async def reload(c: ProfilesCtl) -> ReloadOut:
    return await c.reload()


@write.post("/{name}/activate", status_code=202, responses=SWITCH)
async def activate(
    name: str, c: ProfilesCtl, response: Response, force: bool = False, wait: bool = False, drain: bool = True
) -> AcceptedOut | RunOut:
    """`drain=false` (or `force`) stops the serving engine at once, cutting what it runs."""
    return accepted(await c.activate(name, force=force, wait=wait, drain=drain), response)


@write.post("/{name}/warm", status_code=202)
async def warm(name: str, c: ProfilesCtl, response: Response) -> AcceptedOut:
    """Read its weight files into the page cache: a run of kind `warm`, its events carry MiB and %."""
    return located(await c.warm(name), response, "/runs")


@write.post("/{name}/unpark")
async def unpark(name: str, c: ProfilesCtl) -> RunOut:
    """Stop a parked engine (its host RAM and GPU residual freed): the ended run of kind `unpark`."""
    return await c.unpark(name)


@restoring.post("/restore", status_code=202, responses=SWITCH)
async def restore(
    c: ProfilesCtl, response: Response, wait: bool = False, drain: bool = True
) -> AcceptedOut | RunOut:
    return accepted(await c.restore(wait=wait, drain=drain), response)
