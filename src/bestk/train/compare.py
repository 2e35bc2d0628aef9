"""Matched comparison of estimators: ``bestk compare --estimators a,b,c --seeds S``.

For each seed, every estimator starts from the *same* SFT warm-up weights (computed once per
seed), sees the same training prompts in the same order, draws its sampling noise from the
same per-step generators, and uses the same optimiser, rollout budget and evaluation prompts;
only the advantage computation differs. Writes ``OUT/<estimator>/seed<S>/`` run directories,
``OUT/results.json``, ``OUT/compare.md`` (final pass@k / best@k, mean over seeds with a 95%
Student-t CI over seeds) and ``OUT/compare.png`` (overlay of the final pass@k curves).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from bestk.train.config import TrainConfig, apply_overrides, load_config, validate

__all__ = ["run_compare", "DEFAULT_OPTIONS", "summarize", "write_summary"]

#: Options an estimator needs that the base config does not give (``pkpo`` needs ``k``).
DEFAULT_OPTIONS: dict[str, dict[str, Any]] = {"pkpo": {"k": 4}}

# Two-sided 95% Student-t quantiles for 1..10 degrees of freedom (then ~normal).
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228]


def _t95(df: int) -> float:
    return _T95[df - 1] if 1 <= df <= len(_T95) else 1.96


def summarize(values: np.ndarray) -> tuple[float, float]:
    """Mean and the half-width of a 95% t-interval over seeds (0 for one seed)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size < 2:
        return float(v.mean()), 0.0
    return float(v.mean()), _t95(v.size - 1) * float(v.std(ddof=1)) / math.sqrt(v.size)


def _base_config(config: Path | None, max_steps: int | None, overrides: list[str]) -> TrainConfig:
    cfg = load_config(config) if config is not None else TrainConfig()
    if max_steps is not None:
        cfg.max_steps = max_steps
    apply_overrides(cfg, overrides)
    return cfg


def run_compare(
    estimators: list[str],
    *,
    seeds: int = 3,
    out: str | Path = "runs/compare",
    config: Path | None = None,
    max_steps: int | None = None,
    overrides: list[str] | None = None,
    progress: bool = True,
    estimator_options: dict[str, dict[str, Any]] | None = None,
) -> str:
    """Run the matched grid; return the markdown table (also written to ``compare.md``).

    ``estimator_options`` maps an estimator name to its options (over
    :data:`DEFAULT_OPTIONS`), e.g. ``{"kappo_grpo": {"calibration": "cal/seed{seed}.json"}}``:
    a string value containing ``{seed}`` is formatted with the seed index ``0..seeds-1``
    (a KAPPO calibration is made from each seed's own SFT policy).
    """
    import copy

    import bestk
    from bestk.train.loop import Trainer, read_metrics

    if not estimators:
        raise ValueError("--estimators is empty")
    if seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {seeds}")
    extra = [e for e in (estimator_options or {}) if e not in estimators]
    if extra:
        raise ValueError(f"estimator_options for {', '.join(map(repr, extra))}, which "
                         f"is not among the compared estimators {estimators}")
    unknown = [e for e in estimators if e not in bestk.ESTIMATORS]
    if unknown:
        raise ValueError(
            f"unknown estimator(s) {', '.join(map(repr, unknown))}; valid: "
            f"{', '.join(sorted(bestk.ESTIMATORS))}"
        )
    out = Path(out)
    base = _base_config(config, max_steps, list(overrides or []))
    cfgs: dict[tuple[str, int], TrainConfig] = {}
    for name in estimators:
        for s in range(seeds):
            cfg = copy.deepcopy(base)
            cfg.estimator = name
            opts = dict(DEFAULT_OPTIONS.get(name, {})) if name != base.estimator else {}
            opts.update(base.estimator_options if name == base.estimator else {})
            opts.update({
                k: v.format(seed=s) if isinstance(v, str) and "{seed}" in v else v
                for k, v in (estimator_options or {}).get(name, {}).items()
            })
            if "k" in opts and isinstance(opts["k"], int):
                opts["k"] = min(opts["k"], cfg.rollout.n)
            cfg.estimator_options = opts
            cfg.seed = base.seed + s
            cfg.out = str(out / name / f"seed{s}")
            validate(cfg)  # fail before any run starts
            cfgs[(name, s)] = cfg
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    for s in range(seeds):
        sft_state = None
        for name in estimators:
            cfg = cfgs[(name, s)]
            run_dir = Path(cfg.out)
            if run_dir.exists():
                shutil.rmtree(run_dir)
            tr = Trainer(cfg)
            if sft_state is not None:
                tr.model.load_state_dict(sft_state)
                tr.sft_done = True
            elif cfg.sft.steps > 0:
                tr.sft()
                sft_state = {k: v.detach().clone() for k, v in tr.model.state_dict().items()}
            tr.run(progress=progress)
            evals = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["phase"] == "eval"]
            results.setdefault(name, {})[f"seed{s}"] = {"start": evals[0], "end": evals[-1]}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    table = write_summary(out, results, base.eval.n)
    return table


def write_summary(out: Path, results: dict[str, dict[str, Any]], n: int) -> str:
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
    start_row = None
    for name, runs in results.items():
        cells = []
        for c in cols:
            mean, half = summarize(np.array([r["end"][c] for r in runs.values()]))
            cells.append(f"{mean:.3f} ± {half:.3f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
        if start_row is None:
            cells = []
            for c in cols:
                mean, half = summarize(np.array([r["start"][c] for r in runs.values()]))
                cells.append(f"{mean:.3f} ± {half:.3f}")
            start_row = "| (start of RL) | " + " | ".join(cells) + " |"
    lines.append(start_row)
    # Paired gains (end - start of RL, same seed): the SFT start varies across seeds, the
    # gain much less, so these intervals are the informative ones for few seeds.
    gains = ["| estimator | " + " | ".join(f"Δ{c}" for c in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for name, runs in results.items():
        cells = []
        for c in cols:
            d = np.array([r["end"][c] - r["start"][c] for r in runs.values()])
            mean, half = summarize(d)
            cells.append(f"{mean:+.3f} ± {half:.3f}")
        gains.append(f"| {name} | " + " | ".join(cells) + " |")
    seeds = len(next(iter(results.values())))
    prompts = "draws its training prompts from the same seeded stream"
    if "kappo_grpo" in results:
        prompts += " (kappo_grpo only among the prompts of its calibration bank)"
    text = (
        f"Final held-out metrics, mean ± 95% t-interval over {seeds} seed(s); every estimator "
        f"starts from the same SFT weights per seed and {prompts}.\n\n"
        + "\n".join(lines)
        + "\n\nGain over the start of RL (paired by seed), mean ± 95% t-interval:\n\n"
        + "\n".join(gains)
        + "\n\n![pass@k overlay](compare.png)\n"
    )
    lines = lines + [""] + gains
    (out / "compare.md").write_text(text)
    _plot(out / "compare.png", results)
    return "\n".join(lines)


def _plot(path: Path, results: dict[str, dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bestk.train.report import curve_of

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    start_done = False
    styles = ["o-", "s--", "^-.", "v:", "D-", "P--", "X-.", "*:"]
    for i, (name, runs) in enumerate(results.items()):
        curves = np.array([curve_of(r["end"], "pass")[1] for r in runs.values()])
        ks = curve_of(next(iter(runs.values()))["end"], "pass")[0]
        mean = curves.mean(0)
        half = np.array([summarize(curves[:, j])[1] for j in range(curves.shape[1])])
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
    fig.savefig(path, dpi=110)
    plt.close(fig)
