"""The engines as installed, asked once per version: which version each profile's engine is, the flags its
parser accepts, and each profile checked against them (the profile loader's extra check)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from daemon.core.profiles import Profile, ProfileSet
from daemon.engines import engine_for
from daemon.engines.as_installed import Installed
from daemon.engines.base import Engine
from daemon.engines.checks import ExtraCheck
from daemon.engines.flag_list import FlagList, flag_words, parse_help
from daemon.host.engine_cli import EngineCli
from daemon.installed.cache import InstalledCache
from daemon.installed.entry import Entry, find_entry

log = logging.getLogger("k25.installed")

# Run by the engine's own Python: the first of the given packages that is installed, from its metadata
# (the engine itself is never imported). The folder it lives in is what an upgrade rewrites.
VERSION_SCRIPT = """
import importlib.metadata as m, json, os, sys, sysconfig
found = {"name": None, "version": None, "site": sysconfig.get_paths()["purelib"]}
for name in sys.argv[1:]:
    try:
        d = m.distribution(name)
    except m.PackageNotFoundError:
        continue
    found = {"name": name, "version": d.version, "site": os.path.abspath(str(d.locate_file("")))}
    break
print(json.dumps(found))
"""
VERSION_TIMEOUT_S = 30.0
PREFETCH_THREADS = 4
NOT_ASKED = "it is asked in the background after the daemon's start"


@dataclass(frozen=True)
class ProfileEngine:
    """What a profile's check found: the engine as installed and what the operator should know."""

    installed: Installed
    warnings: tuple[str, ...] = ()


class InstalledEngines:
    """Asks each engine (through the host port) and keeps the answers; `check` is the loader's check."""

    def __init__(
        self, cli: EngineCli, cache: InstalledCache, base_env: Mapping[str, str], help_timeout_s: float
    ) -> None:
        self.cli = cli
        self.cache = cache
        self.base_env = dict(base_env)
        self.help_timeout_s = help_timeout_s
        self.asked = 0  # help runs (the expensive question), for the operator's log and the tests
        self._lock = threading.Lock()  # the count, and the lock of each question (asked from threads)
        self._asking: dict[str, threading.Lock] = {}  # one question at a time per engine version and entry
        self._seen: dict[str, ProfileEngine] = {}

    def seen(self, profile: str) -> ProfileEngine | None:
        """The last check's finding for a profile (None: not checked, or an engine k25-ctl does not know)."""
        return self._seen.get(profile)

    def pending(self) -> bool:
        """Whether a profile's engine was left to be asked (its last check read only the cache)."""
        return any(self._not_asked(name) for name in self._seen)

    def load(self, load: Callable[[ExtraCheck], ProfileSet], *, ask: bool = True) -> ProfileSet:
        """Profiles loaded (`load` with a check) against what the engines said already; where one was not
        asked yet and `ask`, every such engine is asked at once, then the profiles are loaded again (a
        switch, whose engines are known, loads once)."""
        found = load(self.check_cached)
        waiting = [lp.profile for lp in found.valid.values() if self._not_asked(lp.profile.name)]
        if not ask or not waiting:
            return found
        self.prefetch(waiting)
        return load(self.check)

    def _not_asked(self, profile: str) -> bool:
        seen = self._seen.get(profile)
        return seen is not None and seen.installed.why_not == NOT_ASKED

    def prefetch(self, profiles: Iterable[Profile]) -> None:
        """Ask each distinct engine entry among `profiles` at once, in threads: a first load after an
        upgrade waits for the slowest engine's help, not for their sum (vLLM's takes 10-40 s of CPU)."""
        distinct: dict[str, Profile] = {}
        for p in profiles:
            engine = engine_for(p)
            entry = find_entry(p, engine, self.cli, self.base_env) if engine.distributions else "custom"
            if not isinstance(entry, str):
                distinct.setdefault(json.dumps([*entry.argv, entry.env.get("PYTHONPATH", "")]), p)
        if len(distinct) > 1:
            with ThreadPoolExecutor(max_workers=min(PREFETCH_THREADS, len(distinct))) as pool:
                list(pool.map(self.identify, distinct.values()))

    def identify(self, profile: Profile, *, ask: bool = True) -> tuple[Installed, Entry | None]:
        """The profile's engine as installed; `ask=False`: its flags only if known already (a daemon's
        start reads the cache, and asks what is missing in the background)."""
        engine = engine_for(profile)
        entry = find_entry(profile, engine, self.cli, self.base_env)
        if isinstance(entry, str):
            return Installed(engine.name, engine.label, None, why_not=entry), None
        version = self._version(engine, entry)
        flags, why = self._flags(engine, entry, version, ask=ask)
        name, number = (version.get("name"), version.get("version")) if version else (None, None)
        return Installed(engine.name, engine.label, number, name, flags, why), entry

    def _version(self, engine: Engine, entry: Entry) -> dict[str, Any] | None:
        if entry.interpreter is None:
            return None
        key = json.dumps([*entry.interpreter, entry.env.get("PYTHONPATH", "")])
        known = self.cache.versions.get(key)
        mtime = self.cli.mtime(entry.interpreter[0])
        if known and known.get("mtime") == mtime and self.cli.mtime(known["site"]) == known.get("site_mtime"):
            return known if known.get("version") else None  # not installed there: asked again on a change
        argv = [*entry.interpreter, "-c", VERSION_SCRIPT, *engine.distributions]
        answer = self.cli.run(argv, entry.env, VERSION_TIMEOUT_S)
        try:
            found = json.loads(answer.out.strip().splitlines()[-1]) if answer.rc == 0 and answer.out else None
        except ValueError:
            found = None
        if not isinstance(found, dict) or not isinstance(found.get("site"), str):
            return None
        found |= {"mtime": mtime, "site_mtime": self.cli.mtime(found["site"])}
        self.cache.put("versions", key, found)
        return found if found.get("version") else None

    def _flags(
        self, engine: Engine, entry: Entry, version: dict[str, Any] | None, *, ask: bool
    ) -> tuple[FlagList | None, str | None]:
        # Per version and per entry: a site's wrapper of the engine's CLI may add flags of its own, and a
        # changed wrapper script (a file among the entry's words) is asked again.
        files = [self.cli.mtime(w) for w in entry.argv if w.startswith("/")]
        # (not the package's folder: two copies of one version behind one entry print the same flags)
        found = [version["name"], version["version"]] if version is not None else []
        key = json.dumps([engine.name, *found, *entry.argv, *files])
        known = self.cache.flags.get(key)
        if known is None and not ask:
            return None, NOT_ASKED
        if known is None:
            with self._lock:
                one = self._asking.setdefault(key, threading.Lock())
            with one:  # a second caller of the same question waits for the first's answer
                known = self.cache.flags.get(key)
                if known is None:
                    known = self._ask(engine, entry)
                    self.cache.put("flags", key, known)
        if known.get("why_not"):
            return None, str(known["why_not"])
        printed = tuple(known.get("said") or ())
        return FlagList(frozenset(known["flags"]), dict(known.get("deprecated") or {}), printed), None

    def _ask(self, engine: Engine, entry: Entry) -> dict[str, Any]:
        argv = [*entry.argv, *engine.help_args]
        began = time.monotonic()
        answer = self.cli.run(argv, entry.env, self.help_timeout_s)
        with self._lock:
            self.asked += 1
        took = time.monotonic() - began
        parsed = parse_help(answer.out) if answer.rc == 0 else FlagList(frozenset())
        if not parsed.flags:
            last = (answer.err.strip().splitlines() or [f"exit status {answer.rc}"])[-1]
            why = f"`{' '.join(argv)}` printed no flags ({last[:300]})"
            log.info("asked %s for its flags: %s", engine.label, why)  # the profile's note says it too
            return {"why_not": why}
        said = [ln.strip() for ln in answer.err.splitlines() if "deprecat" in ln.lower()]
        log.info(
            "asked %s for its flags: %d in %.1fs (%s)", engine.label, len(parsed.flags), took, " ".join(argv)
        )
        return {"flags": sorted(parsed.flags), "deprecated": parsed.deprecated, "said": said[:20]}

    def check_cached(self, profile: Profile) -> list[tuple[str, str]]:
        """`check` with what is known already: an engine not asked yet leaves the profile valid, noted."""
        return self.check(profile, ask=False)

    def check(self, profile: Profile, *, ask: bool = True) -> list[tuple[str, str]]:
        """The profile's flags against its engine's parser, and the facts it relies on against its
        version: (key, message) for each problem; warnings kept for the reads (seen)."""
        engine = engine_for(profile)
        if not engine.distributions:
            return []  # an engine k25-ctl knows only through the profile
        installed, entry = self.identify(profile, ask=ask)
        problems: list[tuple[str, str]] = []
        warnings: list[str] = []
        if installed.why_not == NOT_ASKED:
            warnings.append(f"{engine.label}'s flags not read yet: {NOT_ASKED}")
        elif installed.flags is None or entry is None:
            warnings.append(f"{engine.label} could not be asked for its flags: {installed.why_not}")
        else:
            problems += self._unknown_flags(profile, engine, installed, entry, warnings)
            warnings += [f"{installed.describe()} printed: {line}" for line in installed.flags.printed]
        if installed.version is not None:
            facts, said = engine.installed_facts(profile, installed)
            problems += facts
            warnings += said
        self._seen[profile.name] = ProfileEngine(installed, tuple(warnings))
        return problems

    def _unknown_flags(
        self, profile: Profile, engine: Engine, installed: Installed, entry: Entry, warnings: list[str]
    ) -> list[tuple[str, str]]:
        flags = installed.flags or FlagList(frozenset())
        out = []
        for written, name in flag_words(entry.args, engine.flag_name):
            if flags.accepts(name):
                full = flags.full(name)
                if full in flags.deprecated:
                    warnings.append(
                        f"{written}: {installed.describe()}'s help says: {flags.deprecated[full]}"
                    )
                continue
            near = flags.nearest(name)
            message = f"{written}: not a flag of {installed.describe()}"
            message += f"; did you mean {near}?" if near else ""
            if name in engine.park_flag_reasons:
                message += f" (it parks: {engine.park_flag_reasons[name]})"
            if profile.command is not None:
                out.append(("command", message))
            elif written in profile.extra_args:
                out.append(("extra_args", message))
            else:  # a flag k25-ctl renders from a profile key
                out.append(("engine", message))
        return out
