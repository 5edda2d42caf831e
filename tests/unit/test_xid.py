"""The driver's Xid lines and NVIDIA's catalog (daemon/health/), on lines as the kernel log prints them."""

from __future__ import annotations

import pytest

from daemon.health import kernel_log, xid

LINES = {
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.": (
        "00000000:3b:00.0", 79, 1234, "python3", "GPU has fallen off the bus"),
    "kernel: NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to "
    "activate.": ("00000000:10:1c.0", 63, 1896, None,
                  "Row Remapper: New row marked for remapping, reset gpu to activate"),
    "NVRM: Xid (PCI:0000:C1:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception: ESR 0x405840": (
        "00000000:c1:00.0", 13, None, "<unknown>", "Graphics Exception: ESR 0x405840"),
    "NVRM: Xid (PCI:00000000:18:00.0): 48, An uncorrectable double bit error (DBE) has been detected": (
        "00000000:18:00.0", 48, None, None, "An uncorrectable double bit error (DBE) has been detected"),
}  # fmt: skip


@pytest.mark.parametrize("line", sorted(LINES))
def test_a_kernel_log_xid_line_names_its_gpu_code_and_process(line: str) -> None:
    found = kernel_log.parse(line)
    assert found is not None
    assert (found.bus_id, found.code, found.pid, found.process, found.message) == LINES[line]


def test_other_kernel_lines_are_not_xids() -> None:
    assert kernel_log.parse("NVRM: GPU at PCI:0000:3b:00: GPU-5f1c... has fallen off the bus.") is None
    assert kernel_log.parse("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal") is None


def test_the_catalog_says_what_needs_a_reset_and_what_follows_an_application() -> None:
    assert xid.lookup(79).action is xid.Action.RESTART_BM
    assert xid.lookup(79).needs_reset()
    assert xid.lookup(95).needs_reset()
    assert xid.lookup(48).needs_reset()  # its workflow: the row is remapped at the next reset
    assert not xid.lookup(94).needs_reset()  # contained: restart the application
    for code in (13, 31, 43, 45):
        assert xid.lookup(code).application
        assert not xid.lookup(code).needs_reset()
    assert (
        xid.lookup(79).describe() == "Xid 79, GPU has fallen off the bus; NVIDIA's action: reboot the machine"
    )
    assert xid.lookup(999).action is xid.Action.CONTACT_SUPPORT
