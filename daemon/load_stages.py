"""Where a load's time went, from the engine's own journal lines (rules in `engines/`): each stage the
engine printed, with its seconds. Stages the engine did not print are absent, never guessed. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

from daemon.engines.base import Engine


@dataclass
class LoadStages:
    engine: Engine
    stages: dict[str, float] = field(default_factory=dict)
    _begun: dict[str, float] = field(default_factory=dict)

    def feed(self, line: str, at: float) -> str | None:
        """One journal line (`at`: its timestamp, seconds); the stage it completed, if any."""
        for rule in self.engine.stage_rules:
            m = rule.pattern.search(line)
            if m is None:
                continue
            if rule.mark == "begin":
                self._begun[rule.stage] = at
                return None
            if rule.mark == "end":
                began = self._begun.pop(rule.stage, None)
                if began is None:
                    return None
                self.stages[rule.stage] = max(0.0, at - began)
            else:
                self.stages[rule.stage] = float(m["secs"])
            return rule.stage
        return None
