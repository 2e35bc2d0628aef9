"""The summary of a finished grid: ``compare.md`` (final pass@k / best@k with 95% t-intervals
over seeds) and ``compare.png`` (pass@k over k, per method).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bestk._atomic import write_text_atomic
from bestk._optional import pyplot
from bestk.figures import save_figure
from bestk.stats import mean_ci
from bestk.train.run.report import curve_of

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from bestk.compare.jobs import SeedResult


def summarize(values: np.ndarray) -> tuple[float, float]:
    """Mean and the half-width of a 95% t-interval over seeds (``nan`` for one seed):
    :func:`bestk.stats.mean_ci`."""
    return mean_ci(values)


def write_summary(out: Path, results: dict[str, dict[str, SeedResult]], n: int) -> str:
    """Write ``compare.md`` / ``compare.png`` for ``results`` (``{estimator: {"seedS": {"start":
    eval record, "end": eval record}}}``, as in ``results.json``); return the tables."""
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= n]
    if n not in ks:
        ks.append(n)
    graded = any("best@1" in r["end"] for runs in results.values() for r in runs.values())
    cols = [f"pass@{k}" for k in ks] + ([f"best@{k}" for k in ks] if graded else [])
    lines = [
        "| estimator | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]

    def cell(vals: list[float], signed: bool = False) -> str:
        mean, half = summarize(np.array(vals))
        return f"{mean:+.3f} ± {half:.3f}" if signed else f"{mean:.3f} ± {half:.3f}"

    start_row = ""
    for name, runs in results.items():
        cells = [cell([r["end"][c] for r in runs.values()]) for c in cols]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
        if not start_row:
            cells = [cell([r["start"][c] for r in runs.values()]) for c in cols]
            start_row = "| (start of RL) | " + " | ".join(cells) + " |"
    lines.append(start_row)
    # Paired gains (end - start of RL, same seed): the SFT start varies across seeds, the
    # gain much less, so these intervals are the informative ones for few seeds.
    gains = ["| estimator | " + " | ".join(f"Δ{c}" for c in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for name, runs in results.items():
        cells = [cell([r["end"][c] - r["start"][c] for r in runs.values()], signed=True)
                 for c in cols]
        gains.append(f"| {name} | " + " | ".join(cells) + " |")
    seeds = len(next(iter(results.values())))
    text = (
        f"Final held-out metrics, mean ± 95% t-interval over {seeds} seed(s) (– for one seed); "
        "every method starts from the same SFT weights per seed and draws its training prompts "
        "from the same seeded stream.\n\n"
        + "\n".join(lines)
        + "\n\nGain over the start of RL (paired by seed), mean ± 95% t-interval:\n\n"
        + "\n".join(gains)
        + "\n\n![pass@k overlay](compare.png)\n"
    )
    text = text.replace("± nan", "± –")
    lines = lines + [""] + gains
    write_text_atomic(out / "compare.md", text)
    _plot(out / "compare.png", results)
    return "\n".join(lines).replace("± nan", "± –")


def _plot(path: Path, results: dict[str, dict[str, SeedResult]]) -> None:
    plt = pyplot(extra="train")
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    start_done = False
    styles = ["o-", "s--", "^-.", "v:", "D-", "P--", "X-.", "*:"]
    for i, (name, runs) in enumerate(results.items()):
        curves = np.array([curve_of(r["end"], "pass")[1] for r in runs.values()])
        ks = curve_of(next(iter(runs.values()))["end"], "pass")[0]
        mean = curves.mean(0)
        half = np.array([summarize(curves[:, j])[1] for j in range(curves.shape[1])])
        half = np.nan_to_num(half, nan=0.0)
        (line,) = ax.plot(ks, mean, styles[i % len(styles)], label=name, ms=3, lw=1.3)
        # pass@k lies in [0, 1]; a t-interval over few seeds can reach past it.
        lo, hi = np.clip(mean - half, 0, 1), np.clip(mean + half, 0, 1)
        ax.fill_between(ks, lo, hi, color=line.get_color(), alpha=0.07)
        if not start_done:
            st = np.array([curve_of(r["start"], "pass")[1] for r in runs.values()]).mean(0)
            ax.plot(ks, st, "k--", label="start of RL", lw=1)
            start_done = True
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")
    ax.set_ylabel("held-out pass@k (mean over seeds, band: 95% t-interval)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
