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


def segments(stages: dict[str, float], load_seconds: float | None) -> list[tuple[str, float]]:
    """Disjoint pieces of the start -> HTTP up time, for a stacked bar: the weights (vLLM's model load when
    printed: it includes them), compile and graphs, the rest of the engine's init (KV cache, warm-up), and
    what no line accounts for. A page-cache warm before the start is its own piece, first; a parked
    engine's wake (its weights back from host RAM) is the whole of its load."""
    out: list[tuple[str, float]] = []
    for own in ("warm", "wake"):
        if own in stages:
            out.append((own, stages[own]))
    load = stages.get("model_load", stages.get("weights"))
    if load is not None:
        out.append(("weights", load))
    inner = [(k, stages[k]) for k in ("compile", "graphs") if k in stages]
    out += inner
    if (init := stages.get("engine_init")) is not None:
        out.append(("kv_cache_warmup", max(0.0, init - sum(v for _, v in inner))))
    if load_seconds is not None:
        known = sum(v for k, v in out if k != "warm")
        if load_seconds - known > 0.05:
            out.append(("other", load_seconds - known))
    return out
