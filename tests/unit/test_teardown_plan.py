"""`plan` over hand-built snapshots: one test per reason and per protection."""

from __future__ import annotations

from dataclasses import replace

from daemon.host.gpu import GpuInfo, GpuProcess
from daemon.host.procs import ProcInfo
from daemon.host.shm import ShmEntry
from daemon.teardown.plan import NVML_READER, Snapshot, TeardownPolicy, plan

POLICY = TeardownPolicy(
    device_glob="/dev/nvidia*",
    engine_titles=("VLLM::*", "sglang::*"),
    shm_patterns=("psm_*", "nccl-*", "sem.mp-*"),
    protected_names=("nvidia-persistenced", "nv-hostengine", "dcgm-exporter", "nvidia-smi"),
)
SELF = 500
UNIT = "vllm-kimi-k25-int4.service"
UNIT_CG = f"/system.slice/{UNIT}"


def proc(pid: int, title: str, *, ppid: int = 1, cgroup: str = "/user.slice", name: str = "python3",
         mapped: tuple[str, ...] = (), opened: tuple[str, ...] = ()) -> ProcInfo:  # fmt: skip
    return ProcInfo(
        pid, ppid, 0, name, title, tuple(title.split()), "S", "", cgroup, opened, mapped, 1000.0 + pid
    )


def gpu(index: int, *pids: int) -> GpuInfo:
    return GpuInfo(
        index,
        "H200",
        f"GPU-{index}",
        143771,
        600 + 70000 * len(pids),
        tuple(GpuProcess(p, 70000) for p in pids),
    )


def shm(name: str, *users: int, regular: bool = True, symlink: bool = False) -> ShmEntry:
    return ShmEntry(name, f"/dev/shm/{name}", 1 << 20, 0, regular and not symlink, symlink, users)


BASE = [
    proc(1, "/sbin/init", ppid=0, cgroup="/init.scope"),
    proc(100, "sshd: root", name="sshd"),
    proc(SELF - 1, "/usr/bin/python3 -m pytest"),
    proc(
        SELF,
        "k25-ctl serve",
        ppid=SELF - 1,
        cgroup="/system.slice/k25-ctl.service",
        opened=("/dev/nvidiactl", "/dev/nvidia0"),
    ),
]


def snap(*procs: ProcInfo, gpus: list[GpuInfo] | None = None, shm_entries: list[ShmEntry] | None = None,
         unit_pids: dict[str, list[int]] | None = None) -> Snapshot:  # fmt: skip
    return Snapshot([*BASE, *procs], gpus or [], shm_entries or [], SELF, unit_pids or {}, (UNIT,))


def victims(s: Snapshot, policy: TeardownPolicy = POLICY) -> dict[int, tuple[str, ...]]:
    return {v.pid: v.reasons for v in plan(s, policy).victims}


def test_unit_cgroup_members_are_victims() -> None:
    s = snap(proc(200, "vllm serve /m", cgroup=UNIT_CG), unit_pids={"vllm-kimi-k25-int4.service": [200]})
    assert victims(s)[200] == ("in the stopped unit's cgroup (vllm-kimi-k25-int4.service)",)
    assert plan(s, POLICY).victims[0].foreign is False


def test_nvml_compute_process_is_a_victim_with_its_memory() -> None:
    s = snap(proc(300, "python train.py"), gpus=[gpu(0, 300), gpu(1, 300)])
    p = plan(s, POLICY)
    assert p.victims[0].reasons == ("GPU context on GPU 0,1 (NVML)",)
    assert p.victims[0].gpu_mib == 140000
    assert p.victims[0].foreign is True


def test_device_mapping_is_a_victim() -> None:
    s = snap(proc(301, "python x.py", mapped=("/dev/nvidia3", "/dev/nvidiactl")))
    assert victims(s)[301] == ("maps /dev/nvidia3, /dev/nvidiactl",)


def test_orphan_engine_worker_reparented_to_pid1_is_a_victim() -> None:
    s = snap(proc(302, "VLLM::Worker_TP3", ppid=1, cgroup="/"))
    p = plan(s, POLICY)
    assert p.victims[0].pid == 302
    assert p.victims[0].reasons == ("engine process title 'VLLM::Worker_TP3'",)
    assert p.victims[0].foreign is True


def test_children_of_victims_go_too() -> None:
    s = snap(
        proc(303, "sglang::scheduler_TP0"),
        proc(304, "python -c helper", ppid=303),
        proc(305, "sleep 9", ppid=304),
    )
    v = victims(s)
    assert v[304] == ("child of victim 303",)
    assert v[305] == ("child of victim 304",)


def test_nvml_only_monitor_is_spared() -> None:
    s = snap(
        proc(400, "python gpu_exporter.py", opened=("/dev/nvidiactl", "/dev/nvidia0")),
        # NVML readers map the control device too (seen on an H200): still no GPU context.
        proc(401, "dcgm-like-exporter", opened=("/dev/nvidiactl",), mapped=("/dev/nvidiactl",)),
    )
    p = plan(s, POLICY)
    assert {400, 401}.isdisjoint({v.pid for v in p.victims})
    assert {sp.pid for sp in p.spared if sp.reason == NVML_READER} == {400, 401}


def test_bystander_without_gpu_is_spared() -> None:
    s = snap(proc(402, "python3 -m http.server"))
    assert 402 not in victims(s)


def test_protected_processes_are_never_victims() -> None:
    s = snap(
        proc(402, "/usr/bin/nvidia-persistenced", name="nvidia-persistenced", mapped=("/dev/nvidia0",)),
        proc(403, "nv-hostengine -n", name="nv-hostengine", mapped=("/dev/nvidiactl",)),
        gpus=[gpu(0, 1, SELF, SELF - 1)],  # even with a GPU context, as NVML says
    )
    p = plan(s, POLICY)
    assert p.victims == []
    reasons = {sp.pid: sp.reason for sp in p.spared}
    assert reasons[1].startswith("PID 1")
    assert reasons[SELF].startswith("k25-ctl itself")
    assert reasons[SELF - 1].startswith("an ancestor of k25-ctl")
    assert reasons[402].startswith("protected name 'nvidia-persistenced'")
    assert reasons[403].startswith("protected name 'nv-hostengine'")


def test_only_the_profile_gpus_count() -> None:
    s = snap(proc(500 + 10, "python other.py", mapped=("/dev/nvidia5",)), gpus=[gpu(5, 510)])
    assert victims(s, replace(POLICY, gpus=(0, 1))) == {}
    assert 510 in victims(s, replace(POLICY, gpus=(4, 5)))


def test_a_managed_unit_process_is_not_foreign_even_after_its_unit_stopped() -> None:
    s = snap(
        proc(602, "VLLM::Worker_TP0", cgroup=UNIT_CG), proc(603, "VLLM::Worker_TP1", cgroup="/user.slice/x")
    )
    foreign = {v.pid: v.foreign for v in plan(s, POLICY).victims}
    assert foreign == {602: False, 603: True}


def test_refuse_policy_lists_foreign_gpu_processes() -> None:
    s = snap(
        proc(600, "python notebook.py"),
        proc(601, "vllm serve /m", cgroup=UNIT_CG),
        gpus=[gpu(0, 600, 601)],
        unit_pids={"vllm-kimi-k25-int4.service": [601]},
    )
    p = plan(s, replace(POLICY, foreign="refuse"))
    assert p.is_refused
    assert [v.pid for v in p.refused] == [600]
    assert not plan(s, POLICY).is_refused


def test_shm_decisions() -> None:
    entries = [
        shm("PostgreSQL.1234", 700),
        shm("psm_ab12"),
        shm("psm_held", 701),
        shm("psm_victim", 302),
        shm("psm_link", symlink=True),
        shm("nccl-dir", regular=False),
        shm("chromium.1"),
    ]
    s = snap(
        proc(302, "VLLM::Worker_TP3"),
        proc(700, "postgres"),
        proc(701, "python other.py"),
        shm_entries=entries,
    )
    p = plan(s, POLICY)
    remove = {d.entry.name for d in p.shm_remove}
    keep = {d.entry.name: d.reason for d in p.shm_keep}
    assert remove == {"psm_ab12", "psm_victim"}  # stale, or held only by a victim
    assert keep["PostgreSQL.1234"] == "not an engine file"
    assert keep["psm_held"] == "in use by live process 701"
    assert keep["psm_link"] == "not a regular file (never followed)"
    assert keep["nccl-dir"] == "not a regular file (never followed)"
    assert keep["chromium.1"] == "not an engine file"


def test_engine_title_on_another_gpu_is_spared_with_that_reason() -> None:
    # Seen on an H200: a VLLM::Worker holding GPU 1 was killed by a teardown of GPU 0 (title alone).
    s = snap(
        proc(800, "VLLM::Worker_TP0", mapped=("/dev/nvidia1", "/dev/nvidiactl")),
        proc(801, "VLLM::Worker_TP1", mapped=("/dev/nvidia0", "/dev/nvidiactl")),
        gpus=[gpu(0, 801), gpu(1, 800)],
    )
    p = plan(s, replace(POLICY, gpus=(0,)))
    assert {v.pid for v in p.victims} == {801}
    spared = {sp.pid: sp.reason for sp in p.spared}
    assert spared[800] == "holds GPU 1 only, outside this teardown's GPUs (0)"
    # Over both GPUs it is a victim again, and over all GPUs.
    assert 800 in victims(s, replace(POLICY, gpus=(0, 1)))
    assert 800 in victims(s)


def test_cuda_context_on_another_gpu_is_not_called_an_nvml_reader() -> None:
    s = snap(proc(810, "python train.py", opened=("/dev/nvidiactl", "/dev/nvidia1")), gpus=[gpu(1, 810)])
    p = plan(s, replace(POLICY, gpus=(0,)))
    assert p.victims == []
    assert {sp.pid: sp.reason for sp in p.spared}[810] == "holds GPU 1 only, outside this teardown's GPUs (0)"


def test_engine_title_in_the_stopped_unit_goes_whatever_gpu_it_holds() -> None:
    s = snap(
        proc(820, "VLLM::Worker_TP1", cgroup=UNIT_CG, mapped=("/dev/nvidia1",)),
        unit_pids={UNIT: [820]},
    )
    assert 820 in victims(s, replace(POLICY, gpus=(0,)))


def test_a_child_holding_only_other_gpus_is_not_taken_with_its_parent() -> None:
    s = snap(
        proc(830, "python launcher.py", mapped=("/dev/nvidia0",)),
        proc(831, "python helper.py", ppid=830),
        proc(832, "python other-gpu.py", ppid=830, mapped=("/dev/nvidia1",)),
    )
    v = victims(s, replace(POLICY, gpus=(0,)))
    assert set(v) == {830, 831}


def test_orphaned_engine_processes_are_marked() -> None:
    s = snap(
        proc(840, "VLLM::EngineCore", ppid=1),  # its API server is gone
        proc(841, "VLLM::Worker_TP0", ppid=9999),  # parent not in the snapshot
        proc(842, "vllm serve /m", mapped=("/dev/nvidia0",)),
        proc(843, "VLLM::EngineCore", ppid=842),
    )
    orphans = {v.pid: v.orphan for v in plan(s, POLICY).victims}
    assert orphans == {840: True, 841: True, 842: False, 843: False}


def _listening(port: int, *pids: int | None) -> dict[int, list[int | None]]:
    return {port: list(pids)}


def test_port_holder_that_is_an_engine_front_end_is_a_victim() -> None:
    s = snap(proc(850, "/usr/bin/python3 /usr/local/bin/vllm serve /m --port 8000"))
    s = replace(s, listeners=_listening(8000, 850))
    p = plan(s, replace(POLICY, front_end_titles=("*vllm serve *",)))
    assert dict((v.pid, v.reasons) for v in p.victims) == {
        850: ("listens on port 8000, which the next engine needs (an engine front end)",)
    }
    assert p.port_blocked == []


def test_port_holder_related_to_an_engine_victim_is_a_victim() -> None:
    s = snap(
        proc(860, "python my_api.py"),  # the API server of an orphaned engine child
        proc(861, "VLLM::EngineCore", ppid=860, mapped=("/dev/nvidia0",)),
    )
    s = replace(s, listeners=_listening(8000, 860))
    v = victims(s)
    assert "listens on port 8000, which the next engine needs (an engine front end)" in v[860]


def test_port_holder_that_is_not_an_engine_blocks_the_switch() -> None:
    s = snap(proc(870, "nginx: master process", name="nginx"))
    s = replace(s, listeners={8000: [870], 8001: [None]})
    p = plan(s, POLICY)
    assert p.victims == []
    assert [str(b) for b in p.port_blocked] == [
        "port 8000 is held by PID 870 (nginx: master process)",
        "port 8001 is held by a process k25-ctl cannot see",
    ]


def test_a_victim_that_holds_the_port_says_so() -> None:
    s = snap(proc(880, "vllm serve /m", cgroup=UNIT_CG), unit_pids={UNIT: [880]})
    s = replace(s, listeners=_listening(8000, 880))
    assert victims(s)[880][-1] == "listens on port 8000, which the next engine needs"


def test_gpu_error_is_carried_into_the_plan() -> None:
    s = replace(snap(proc(890, "VLLM::Worker_TP0")), gpu_error="NVML cannot be initialised: no driver")
    p = plan(s, POLICY)
    assert p.gpu_error == "NVML cannot be initialised: no driver"
    assert [v.pid for v in p.victims] == [890]  # titles and mappings still count
