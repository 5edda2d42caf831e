"""The Pareto view of a comparison (which profile serves more within a latency SLO): per profile, a latency
against throughput (or goodput) over its load levels, as a table in the terminal and, with `--plot
FILE.svg|.png`, a chart drawn by matplotlib (the optional `plot` extra: pip install 'k25-ctl[plot]'). A level
is Pareto-optimal when no level of any profile has both more throughput and less latency: those are
starred."""

from __future__ import annotations

from pathlib import Path

from daemon.cli.client import ApiJson
from daemon.cli.remote import figure
from daemon.core.errors import InvalidInput

X_KEYS = {
    "throughput": ("output_throughput", "output tok/s"),
    "goodput": ("request_goodput", "goodput req/s"),
}
Y_KEYS = {
    f"{metric}_{stat}": (
        f"{'median' if stat == 'p50' else stat}_{metric}_ms",
        f"{metric.upper()} {stat} (ms)",
    )
    for metric in ("ttft", "tpot", "e2el")
    for stat in ("p50", "p95")
}


def points(rows: list[ApiJson], x: str, y: str) -> dict[str, list[tuple[float, float, str]]]:
    """Per profile: (x, y, the level) for every level that has both figures."""
    xk, yk = X_KEYS[x][0], Y_KEYS[y][0]
    out: dict[str, list[tuple[float, float, str]]] = {}
    for r in rows:
        for lv in r.get("levels") or []:
            if lv.get(xk) is None or lv.get(yk) is None:
                continue
            rate = lv.get("request_rate")
            load = f"{rate} req/s" if rate not in (None, "inf") else f"c={lv.get('max_concurrency')}"
            out.setdefault(r["profile"], []).append((float(lv[xk]), float(lv[yk]), load))
    return out


def front(pts: dict[str, list[tuple[float, float, str]]]) -> set[tuple[str, str]]:
    """(profile, level) of the points no other point beats on both axes (more x, less y)."""
    every = [(p, x, y, load) for p, ps in pts.items() for x, y, load in ps]
    return {
        (p, load)
        for p, x, y, load in every
        if not any(ox >= x and oy <= y and (ox > x or oy < y) for _, ox, oy, _ in every)
    }


def table(rows: list[ApiJson], x: str, y: str) -> list[str]:
    pts = points(rows, x, y)
    best = front(pts)
    out = [f"{'profile':18} {'level':>14} {X_KEYS[x][1]:>14} {Y_KEYS[y][1]:>16}  (* on the Pareto front)"]
    for profile, ps in pts.items():
        for px, py, load in sorted(ps):
            star = " *" if (profile, load) in best else ""
            out.append(f"{profile:18} {load:>14} {figure(px, '.2f'):>14} {figure(py, '.2f'):>16}{star}")
    return out if pts else [f"no level has both {X_KEYS[x][0]} and {Y_KEYS[y][0]}"]


def plot(rows: list[ApiJson], x: str, y: str, path: Path, title: str) -> None:
    """The chart, one line of points per profile, written as SVG or PNG (by the file's suffix)."""
    if path.suffix.lower() not in (".svg", ".png"):
        raise InvalidInput(f"--plot {path}: write .svg or .png")
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display: a file
        import matplotlib.pyplot as plt
    except ImportError:
        raise InvalidInput("--plot needs matplotlib: pip install 'k25-ctl[plot]'") from None
    plt.rcParams["svg.fonttype"] = "none"  # text as <text>, not glyph paths: searchable, smaller
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for profile, ps in points(rows, x, y).items():
        ps = sorted(ps)
        ax.plot([p[0] for p in ps], [p[1] for p in ps], marker="o", label=profile)
        for px, py, load in ps:
            ax.annotate(load, (px, py), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlabel(X_KEYS[x][1])
    ax.set_ylabel(Y_KEYS[y][1])
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None} if path.suffix.lower() == ".svg" else None)
    plt.close(fig)
