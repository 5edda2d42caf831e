"""A fleet of sandboxed hosts for the tests that drive it through the k25.ctl collection (contrib/ansible):
each host its own sandbox (systemd, k25-ctl, fake engines on the host's service port), the manual's
inventory with each daemon as a host's loopback API, the collection's playbooks run from the artifact
`ansible-galaxy` built and installed, and the edits that plant faults in one host's profiles."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from k25_sandbox import sandbox as sbx
from k25_sandbox.ports import free_port
from tests.playbooks import Played, installed
from tests.playbooks import play as playbook
from tests.sandboxing import Api

SPEC = {"concurrency": [2], "num_prompts": 6, "max_tokens": 48, "warmups": 0}
GATE = json.dumps({"k25_gate_benchmark": SPEC})  # the rollout's gate: a short benchmark


@dataclass
class Member:
    name: str
    info: sbx.SandboxInfo
    service_port: int

    @functools.cached_property
    def api(self) -> Api:
        return Api(self.info)

    @property
    def profiles_d(self) -> Path:
        return Path(self.info.config).parent / "profiles.d"

    def runs(self) -> list[Any]:
        runs: list[Any] = self.api.client.get("/runs", params={"limit": 500}).json()
        return runs

    def serving(self) -> tuple[str, str | None]:
        st = self.api.status()
        return st["state"], st["active_profile"]

    def last_run(self) -> int:
        return max(int(r["id"]) for r in self.runs())

    def switches(self, since: int) -> list[Any]:
        """Switches and rollbacks after run `since`, oldest first."""
        found = (r for r in self.runs() if r["id"] > since and r["kind"] in ("switch", "rollback"))
        return sorted(found, key=lambda r: r["id"])

    def edit_argv(self, profile: str, change: Callable[[list[str]], list[str]]) -> str:
        """The profile's fake engine runs with `change(argv)` from now on; returns the file as it was."""
        path = self.profiles_d / f"{profile}.toml"
        before = path.read_text()
        head, _, command = before.partition("command = ")
        argv = change(json.loads(command.splitlines()[0]))
        rest = "\n".join(command.splitlines()[1:])
        path.write_text(f"{head}command = {json.dumps(argv)}\n{rest}\n")
        self.reload()
        return before

    def restore_profile(self, profile: str, text: str) -> None:
        (self.profiles_d / f"{profile}.toml").write_text(text)
        self.reload()

    def reload(self) -> None:
        assert self.api.client.post("/profiles/reload").status_code == 200


def with_option(name: str, value: str) -> Callable[[list[str]], list[str]]:
    """An argv edit: the fake engine's option `name` set to `value`."""

    def change(argv: list[str]) -> list[str]:
        argv = list(argv)
        argv[argv.index(name) + 1] = value
        return argv

    return change


def rate_of(m: Member, profile: str) -> float:
    """The output tok/s the profile's fake engine runs at on this host."""
    path = m.profiles_d / f"{profile}.toml"
    argv = json.loads(path.read_text().partition("command = ")[2].splitlines()[0])
    return float(argv[argv.index("--rate") + 1])


def booted(count: int) -> Iterator[list[Member]]:
    """`count` hosts booted at once, each serving baseline; a drain's grace (2 s) outlasts HAProxy's two
    failed checks (1 s)."""
    members: list[Member] = []

    def boot(i: int) -> None:  # each waits on its own systemd
        service = free_port()
        settings = {"service_port": str(service), "drain_grace_s": "2", "drain_poll_s": "0.1"}
        member = Member(f"h{i}", sbx.up(load_seconds=1.0, settings=settings), service)
        members.append(member)
        assert member.api.activate("baseline")["outcome"] == "active"

    try:
        with ThreadPoolExecutor(count) as pool:
            list(pool.map(boot, range(1, count + 1)))
        members.sort(key=lambda m: m.name)
        yield members
    finally:
        for m in members:
            sbx.down(m.info)


def host_line(m: Member) -> str:
    """The host's line of the inventory: modules on the controller (local connection), its daemon's API."""
    return (
        f"{m.name} ansible_connection=local ansible_python_interpreter={sys.executable} "
        f"k25_url={m.info.url} k25_token_file={m.info.token_file}"
    )


def inventory(folder: Path, lines: list[str]) -> Path:
    """The manual's inventory (docs/fleet.md) of `lines` in group k25, with the collection built and
    installed beside it (the plays run it as a user gets it)."""
    path = folder / "hosts.ini"
    path.write_text("\n".join(["[k25]", *lines]) + "\n")
    if not (folder / "collections").exists():
        installed(folder)
    return path


def play(inventory: Path, name: str, *args: str) -> Played:
    """The collection's playbook, from the artifact built and installed next to the inventory."""
    return playbook(
        inventory,
        f"k25.ctl.{name}",
        *args,
        home=inventory.parent,
        collections=inventory.parent / "collections",
    )
