"""Builds the GPU health API's services: the reset and acknowledgement, and the doctor."""

from __future__ import annotations

import os

from daemon.api.controllers.gpus import GpusController
from daemon.core.hoststate import StateHub
from daemon.core.settings import Settings
from daemon.health.doctor_run import Doctor, DoctorLimits
from daemon.health.reset import GpuService, ResetCommand
from daemon.health.watch import HealthWatch
from daemon.parking.service import Parking
from daemon.serving.units import UnitFollower
from daemon.startup.basics import Basics
from daemon.startup.machine import HostPorts
from daemon.store.gpu_health import GpuHealthStore
from daemon.store.queries import Store


def build_health_watch(s: Settings, host: HostPorts, store: Store, hub: StateHub) -> HealthWatch:
    return HealthWatch(
        port=host.gpu_health,
        kernel=host.kernel_log,
        store=GpuHealthStore(store),
        hub=hub,
        every_s=s.gpu_health_every_s,
        attribution_s=s.xid_attribution_s,
    )


def build_gpus_controller(
    b: Basics, health: HealthWatch, units: UnitFollower, parking: Parking
) -> GpusController:
    s = b.s
    service = GpuService(
        health=health,
        teardown=b.host.teardown,
        systemd=b.host.systemd,
        recorder=b.recorder,
        jobs=b.jobs,
        managed_units=b.inventory.units,
        unit_states=lambda: units.unit_states,
        cli=b.host.engine_cli,
        env=os.environ,
        command=ResetCommand(tuple(s.gpu_reset_command), s.gpu_reset_scope, s.gpu_reset_timeout_s),
        stop_timeout_s=s.stop_timeout_s,
        automatic=s.gpu_reset_automatic,
    )
    doctor = Doctor(
        facts=b.host.facts,
        health=health,
        systemd=b.host.systemd,
        teardown=b.host.teardown,
        profiles=b.inventory.current,
        managed_units=b.inventory.units,
        engine_version=b.inventory.engine_version,
        weight_bytes=parking.budget.weight_bytes,
        available=b.host.available,
        limits=DoctorLimits(s.expected_gpus, s.shm_dir, s.shm_min_bytes, parking.budget.budget_bytes),
    )
    return GpusController(health=health, service=service, doctor=doctor)
