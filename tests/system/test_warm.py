"""Page-cache warming in the sandbox, on real files: a warm run (progress, residency read back), and a
switch to a `warm = "on-switch"` profile whose engine (a lazy mmap loader) then finds its weights resident."""

from __future__ import annotations

import re
from pathlib import Path

from daemon.host.pagecache import evict, resident_bytes
from k25_sandbox.sandbox import SandboxInfo
from tests.sandboxing import Api, inside
from tests.waiting import eventually_sync


def _weights(api: Api) -> list[Path]:
    folder = Path(api.client.get("/profiles/warmable").json()["model"])
    return sorted(folder.glob("*.safetensors"))


def _cold(files: list[Path]) -> None:
    """The test's own files, dropped from the page cache. POSIX_FADV_DONTNEED is advice: the kernel skips a
    page it cannot drop just then (locked for I/O, referenced; CI saw 5 pages of 64 MiB stay), so it is
    given again until none is left."""

    def cold() -> bool:
        for f in files:
            evict(f)
        return sum(resident_bytes(f).resident for f in files) == 0

    eventually_sync(cold, what="the weights dropped from the page cache", within_s=30, every_s=0.1)


def test_a_warm_run_reads_the_weights_into_the_page_cache(api: Api) -> None:
    files = _weights(api)
    _cold(files)
    r = api.client.post("/profiles/warmable/warm")
    assert r.status_code == 202, r.text
    run = api.wait_run(r.json()["run_id"])
    assert (run["kind"], run["profile"], run["outcome"]) == ("warm", "warmable", "ok"), run
    # The warm's own figure (below: residency 0% -> 100%) is taken as it ends; read back here, a busy
    # machine's kernel may already have reclaimed a few pages (seen in CI: not all of them resident).
    resident = sum(resident_bytes(f).resident for f in files) / sum(f.stat().st_size for f in files)
    assert resident >= 0.99, resident
    progress = [e for e in run["events"] if e["phase"] == "warming" and "MiB" in e["detail"]]
    assert progress
    assert progress[-1]["detail"].startswith("64/64 MiB")
    final = run["events"][-1]["detail"]
    assert "read 64 MiB" in final, final
    assert "residency 0% -> 100%" in final, final
    profile = api.client.get("/profiles/warmable").json()
    assert profile["warm"] == "on-switch"
    assert profile["residency"]["files"] == len(files) + 1  # the shards and config.json
    assert api.client.post("/profiles/nope/warm").status_code == 404


def test_an_on_switch_warm_lets_the_engine_read_from_the_cache(api: Api, sandbox: SandboxInfo) -> None:
    api.activate("baseline")
    files = _weights(api)
    _cold(files)
    run = api.activate("warmable")
    assert run["outcome"] == "active", run["error"]
    phases = [(e["phase"], e["detail"]) for e in run["events"]]
    warm_done = next(
        i for i, (ph, d) in enumerate(phases) if ph == "loading" and d.startswith("load stage warm")
    )
    start = next(i for i, (ph, _) in enumerate(phases) if ph == "start")
    assert warm_done < start, phases  # the engine started once its weights were in
    assert any(ph == "warming" and "residency 0% -> 100%" in d for ph, d in phases), phases
    assert set(run["load_stages"]) >= {"warm", "model_load"}
    assert [b["stage"] for b in run["load_breakdown"]][:2] == ["warm", "weights"]
    # The engine itself (mincore on its shards as it starts) found them all resident.
    inside(sandbox, "journalctl", "--sync")
    journal = inside(sandbox, "journalctl", "--no-pager", "-o", "cat", "-t", "k25-engine-warmable").stdout
    assert journal.strip().splitlines()
    # All of it, but for the few pages the kernel may take back in between on a busy machine (seen: 99.9%);
    # a start without the warm finds about 0% (the files were evicted above).
    found = re.search(r"weights resident at start: ([\d.]+)% of 64 MiB", journal)
    assert found is not None, journal
    assert float(found.group(1)) >= 99.0, journal
    api.activate("baseline")


def test_cli_warm_and_profiles(api: Api, sandbox: SandboxInfo) -> None:
    from tests.system.test_api_cli import _cli

    _cold(_weights(api))
    out = _cli(sandbox, "warm", "warmable", "--wait")
    assert out.returncode == 0, out.stderr
    assert "warming [" in out.stdout
    assert out.stdout.strip().splitlines()[-1].endswith(": ok")
    listing = _cli(sandbox, "profiles").stdout
    line = next(x for x in listing.splitlines() if x.startswith("warmable "))
    assert "100.0% of 0.1 GiB cached (warm on-switch)" in line, line
