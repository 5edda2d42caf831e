"""The driver's Xid lines in the kernel log (pure): `NVRM: Xid (PCI:0000:3b:00): 79, pid=1234,
name=python3, GPU has fallen off the bus.` The PCI address names the GPU (NVML's bus id), the pid the
process the driver blamed ("'<unknown>'" where none)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from daemon.host.gpu_health import bus_id

_LINE = re.compile(
    r"NVRM: Xid \(PCI:(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)\): (?P<code>\d+),"
    r"(?: pid=(?P<pid>\d+|'<unknown>'),)?(?: name=(?P<name>[^,]*),)?\s*(?P<message>.*)$"
)


@dataclass(frozen=True)
class XidLine:
    bus_id: str  # normalized: 8-digit domain, lower case, function .0 (NVML's form)
    code: int
    pid: int | None
    process: str | None
    message: str


def parse(line: str) -> XidLine | None:
    m = _LINE.search(line)
    if m is None:
        return None
    pid = m["pid"]
    return XidLine(
        bus_id(m["bus"]),
        int(m["code"]),
        int(pid) if pid and pid.isdigit() else None,
        m["name"] or None,
        m["message"].strip().rstrip("."),
    )
