"""NVIDIA's Xid catalog for Ampere and newer GPUs (H100, H200), the rows k25-ctl acts on: each code's
mnemonic, its meaning and NVIDIA's immediate action (docs.nvidia.com/deploy/xid-errors/
analyzing-xid-catalog.html, its "Resolution Bucket (Immediate Action)" column). Application Xids follow
a process's own fault and say nothing about the GPU."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Action(enum.StrEnum):
    """NVIDIA's immediate actions, and the workflows the catalog names instead of one."""

    IGNORE = "IGNORE"
    RESTART_APP = "RESTART_APP"
    RESET_GPU = "RESET_GPU"
    RESTART_BM = "RESTART_BM"  # reboot the machine
    CONTACT_SUPPORT = "CONTACT_SUPPORT"
    WORKFLOW = "WORKFLOW"  # the catalog points at a decision flow (48: ECC, 74: NVLink, 45: follow others)


@dataclass(frozen=True)
class Xid:
    code: int
    mnemonic: str
    meaning: str
    action: Action
    application: bool = False  # follows a buggy process: recorded, changes nothing
    resets: bool = False  # its workflow ends in a GPU reset (48: the row is remapped at the next reset)

    def needs_reset(self) -> bool:
        return self.resets or self.action in (Action.RESET_GPU, Action.RESTART_BM)

    def describe(self) -> str:
        return f"Xid {self.code}, {self.meaning}; NVIDIA's action: {ACTION_WORDS[self.action]}"


ACTION_WORDS = {
    Action.IGNORE: "none",
    Action.RESTART_APP: "restart the application",
    Action.RESET_GPU: "reset the GPU",
    Action.RESTART_BM: "reboot the machine",
    Action.CONTACT_SUPPORT: "contact support",
    Action.WORKFLOW: "follow NVIDIA's workflow for it",
}

_ROWS = (
    Xid(8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", Action.RESTART_APP),
    Xid(13, "ROBUST_CHANNEL_GR_EXCEPTION", "graphics engine exception", Action.RESTART_APP, application=True),
    Xid(31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", Action.RESTART_APP, True),
    Xid(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", Action.IGNORE, True),
    Xid(
        45,
        "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
        "preemptive cleanup after earlier errors",
        Action.WORKFLOW,
        True,
    ),
    Xid(46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", Action.RESET_GPU),
    Xid(48, "ROBUST_CHANNEL_GPU_ECC_DBE", "double-bit ECC error", Action.WORKFLOW, resets=True),
    Xid(62, "PMU_HALT_ERROR", "internal micro-controller halt", Action.RESET_GPU),
    Xid(63, "INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", Action.IGNORE),
    Xid(64, "INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure", Action.RESET_GPU),
    Xid(74, "NVLINK_ERROR", "NVLink error", Action.WORKFLOW),
    Xid(79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", Action.RESTART_BM),
    Xid(92, "EXCESSIVE_SBE_INTERRUPTS", "high single-bit ECC error rate", Action.IGNORE),
    Xid(94, "ROBUST_CHANNEL_CONTAINED_ERROR", "contained memory error", Action.RESTART_APP),
    Xid(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "uncontained memory error", Action.RESET_GPU),
    Xid(109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "context switch timeout", Action.RESET_GPU),
    Xid(119, "GSP_RPC_TIMEOUT", "GSP RPC timeout", Action.RESET_GPU),
    Xid(120, "GSP_ERROR", "GSP error", Action.RESET_GPU),
    Xid(136, "ALI_TRAINING_FAIL", "link training failed", Action.RESET_GPU),
    Xid(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC unrecovered error", Action.RESET_GPU),
    Xid(143, "GPU_INIT_ERROR", "GPU initialization error", Action.RESET_GPU),
    Xid(154, "GPU_RECOVERY_ACTION_CHANGED", "GPU recovery action changed", Action.WORKFLOW),
)
CATALOG = {x.code: x for x in _ROWS}


def lookup(code: int) -> Xid:
    """The catalog's row, or one that says the code is not among those k25-ctl knows (contact support,
    as the catalog says of its unused codes)."""
    return CATALOG.get(code) or Xid(
        code, "UNKNOWN", f"Xid {code} (not in k25-ctl's table)", Action.CONTACT_SUPPORT
    )
