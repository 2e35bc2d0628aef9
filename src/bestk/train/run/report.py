"""``report.md`` and PNG plots of a run directory, rebuilt from ``metrics.jsonl``.

Plots: ``passk.png`` (pass@k over k at the start and the end of RL, with bootstrap CIs over
prompts), ``bestk.png`` (the same for best@k, graded tasks), ``training.png`` (training reward,
success rate and token entropy over RL steps -- @k-DPO: pair accuracy, margin and loss -- and
held-out pass@1 / pass@n per evaluation). A KAPPO run's report also describes its calibration
(``calibration.json``): kind, k, beta, M, the number of prompts and where it came from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bestk._atomic import write_text_atomic
from bestk._optional import pyplot
from bestk.figures import save_figure
from bestk.kappo.calibration import Calibration
from bestk.train.algorithms import ALGORITHMS
from bestk.train.algorithms._base import rollout_batch_text
from bestk.train.config.io import config_to_dict
from bestk.train.reference.bank import BANK_FILE, CALIBRATION_FILE
from bestk.train.run.console import rate
from bestk.train.run.directory import read_metrics, read_run_config

__all__ = ["write_report", "curve_of"]


def curve_of(record: Mapping[str, float], prefix: str
             ) -> tuple[list[int], list[float], list[float], list[float]]:
    """``(ks, means, lo, hi)`` of ``prefix@k`` keys in an evaluation record (k ascending)."""
    ks = sorted(
        int(k.split("@")[1]) for k in record
        if k.startswith(prefix + "@") and k.split("@")[1].isdigit()
    )
    mean = [record[f"{prefix}@{k}"] for k in ks]
    lo = [record.get(f"{prefix}@{k}_lo", record[f"{prefix}@{k}"]) for k in ks]
    hi = [record.get(f"{prefix}@{k}_hi", record[f"{prefix}@{k}"]) for k in ks]
    return ks, mean, lo, hi


def _plot_curves(path: Path, start: Mapping[str, float], end: Mapping[str, float], prefix: str,
                 title: str) -> None:
    plt = pyplot(extra="train")

    fig, ax = plt.subplots(figsize=(5, 3.6))
    for rec, label, color in ((start, "start of RL", "tab:gray"), (end, "end of RL", "tab:blue")):
        ks, m, lo, hi = curve_of(rec, prefix)
        ax.plot(ks, m, "o-", color=color, label=f"{label} (step {rec['step']})")
        ax.fill_between(ks, lo, hi, color=color, alpha=0.2)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")
    ax.set_ylabel(f"{prefix}@k (held-out)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)  # atomic; a failed write names the path


#: Training panels, (title, [(metric key, label), ...]), of a run that samples rollouts
#: (``pg``, ``apo``: rewards and entropy) ...
_ROLLOUT_PANELS = (
    ("training rollouts", [("reward_mean", "mean reward"), ("success_rate", "success rate")]),
    ("token entropy (training rollouts)", [("entropy", "entropy")]),
)
#: ... and of a run that trains on the bank's pairs (``dpo``: pair accuracy, margin, loss).
#: A panel is drawn with the keys the run logged.
_DPO_PANELS = (
    ("@k-DPO pairs (implicit reward)", [("reward_accuracy", "accuracy"),
                                         ("reward_margin", "margin")]),
    ("@k-DPO loss", [("loss", "loss")]),
)


def _plot_training(path: Path, train: Sequence[Mapping[str, float]],
                   evals: Sequence[Mapping[str, float]], n: int) -> None:
    plt = pyplot(extra="train")

    chosen = _ROLLOUT_PANELS if "reward_mean" in train[0] else _DPO_PANELS
    panels = [(t, [(k, lb) for k, lb in keys if k in train[0]]) for t, keys in chosen]
    panels = [(t, keys) for t, keys in panels if keys]
    fig, axes = plt.subplots(1, len(panels) + 1, figsize=(4 * (len(panels) + 1), 3.4))
    steps = [r["step"] for r in train]
    for ax, (title, keys) in zip(axes, panels, strict=False):
        for key, label in keys:
            ax.plot(steps, [r[key] for r in train], label=label, alpha=0.9)
        ax.set_title(title)
        if len(keys) > 1:
            ax.legend()
    es = [r["step"] for r in evals]
    axes[-1].plot(es, [r["pass@1"] for r in evals], "o-", label="pass@1")
    if evals and n > 1 and f"pass@{n}" in evals[0]:  # n = 1: pass@1 is drawn once
        axes[-1].plot(es, [r[f"pass@{n}"] for r in evals], "o-", label=f"pass@{n}")
    axes[-1].set_title("held-out evaluation")
    axes[-1].legend()
    for ax in axes:
        ax.set_xlabel("RL step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path)  # atomic; a failed write names the path


def _table(start: Mapping[str, float], end: Mapping[str, float], prefix: str) -> list[str]:
    ks, m0, lo0, hi0 = curve_of(start, prefix)
    _, m1, lo1, hi1 = curve_of(end, prefix)
    lines = [
        f"| k | {prefix}@k start (step {start['step']}) | {prefix}@k end (step {end['step']}) |",
        "|---|---|---|",
    ]
    for i, k in enumerate(ks):
        lines.append(
            f"| {k} | {m0[i]:.3f} [{lo0[i]:.3f}, {hi0[i]:.3f}] | "
            f"{m1[i]:.3f} [{lo1[i]:.3f}, {hi1[i]:.3f}] |"
        )
    return lines


def _evaluations_table(evals: Sequence[Mapping[str, float]], n: int) -> list[str]:
    """One row per evaluation of the run (every ``eval.every`` steps and the end): pass@1 and
    pass@n with their 95% intervals, best@1, mean reward and token entropy."""
    cols = [("pass@1", True), (f"pass@{n}", True), ("best@1", False), ("reward_mean", False),
            ("entropy", False)]
    cols = [(k, ci) for k, ci in cols if any(k in e for e in evals)]
    lines = ["| step | " + " | ".join(k for k, _ in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for e in evals:
        cells = [("–" if k not in e else f"{e[k]:.3f} [{e[k + '_lo']:.3f}, {e[k + '_hi']:.3f}]"
                  if ci and f"{k}_lo" in e else f"{e[k]:.3f}") for k, ci in cols]
        lines.append(f"| {e['step']} | " + " | ".join(cells) + " |")
    return lines


def write_report(out: str | Path) -> Path:
    """(Re)write ``out/report.md`` and its plots from ``out/metrics.jsonl``: the run's
    description (:func:`_header_lines`), its held-out evaluations (:func:`_eval_lines`) and
    its training curve (:func:`_training_lines`)."""
    out = Path(out)
    rows = read_metrics(out / "metrics.jsonl")
    cfg = config_to_dict(read_run_config(out)) if (out / "config.yaml").exists() else {}
    train = [r for r in rows if r.get("phase") == "train"]
    evals = [r for r in rows if r.get("phase") == "eval"]
    sft = [r for r in rows if r.get("phase") == "sft"]
    lines = [f"# bestk training report: `{out}`", "", *_header_lines(out, cfg, train, sft), ""]
    if len(evals) >= 1:
        lines += _eval_lines(out, evals, train[-1]["step"] if train else 0)
    if train:
        lines += _training_lines(out, train, evals)
    path = out / "report.md"
    write_text_atomic(path, "\n".join(lines))
    return path


def _header_lines(out: Path, cfg: Mapping[str, Any], train: list[dict[str, Any]],
                  sft: list[dict[str, Any]]) -> list[str]:
    """The run's description: task, algorithm and estimator, model, steps and batch, the SFT
    warm-up and, for a KAPPO run, its calibration (:func:`_kappo_lines`)."""
    model = cfg.get("model", {})
    algorithm = cfg.get("algorithm", "pg")
    spec = ALGORITHMS.get(algorithm)
    batch = (spec.batch_text if spec is not None else rollout_batch_text)(cfg)
    return [
        f"- task: `{cfg.get('task', {}).get('name')}` "
        f"{cfg.get('task', {}).get('options') or '(default options)'}",
        f"- algorithm: `{algorithm}` ({spec.title if spec is not None else 'unknown algorithm'})"
        + (f"; estimator: `{cfg.get('estimator')}` "
           f"{cfg.get('estimator_options') or '(default options)'}"
           if spec is not None and spec.uses_estimator else ""),
        f"- model: `{model.get('path') or 'tiny ' + str(model.get('arch'))}`",
        f"- RL steps: {train[-1]['step'] if train else 0} of {cfg.get('max_steps')}; {batch}",
        f"- SFT warm-up: {sft[-1]['sft_step'] if sft else cfg.get('sft', {}).get('steps', 0)} "
        "steps" + (f" (final loss {sft[-1]['loss']:.3f})" if sft else ""),
        *_kappo_lines(out, spec.pool_note if spec is not None else "", cfg.get("kappo", {})),
    ]


def _eval_lines(out: Path, evals: list[dict[str, Any]], last_step: int) -> list[str]:
    """The held-out sections: pass@k (and best@k for a graded task) at the start and the end
    with their plots, the other metrics, and every evaluation's row."""
    start, end = evals[0], evals[-1]
    n = int(end.get("n", 1))
    lines = [
        "## Held-out pass@k (unbiased, 95% bootstrap CI over prompts)",
        "",
        f"{int(end.get('num_prompts', 0))} held-out prompts, n = {n} samples each, "
        "start = before RL (after SFT), end = last evaluation.",
        "",
        *([f"**No evaluation was run at the end of RL (step {last_step})**: the end column "
           f"is the last evaluation, of step {end['step']}.", ""]
          if end["step"] != last_step else []),
        *_table(start, end, "pass"),
        "",
        "![pass@k](passk.png)",
        "",
    ]
    _plot_curves(out / "passk.png", start, end, "pass", "held-out pass@k")
    if "best@1" in end:
        lines += ["## Held-out best@k (unbiased)", "", *_table(start, end, "best"), ""]
        lines += ["![best@k](bestk.png)", ""]
        _plot_curves(out / "bestk.png", start, end, "best", "held-out best@k")
    lines += ["## Other held-out metrics", "", "| metric | start | end |", "|---|---|---|"]
    for key in ("reward_mean", "entropy", "distinct", "response_len"):
        if key in start and key in end:
            lines.append(f"| {key} | {start[key]:.3f} | {end[key]:.3f} |")
    return lines + ["", "## Every evaluation", "",
                    "The held-out metrics at each evaluated step (95% intervals over prompts):",
                    "", *_evaluations_table(evals, n), ""]


def _training_lines(out: Path, train: list[dict[str, Any]], evals: list[dict[str, Any]]
                    ) -> list[str]:
    """The training section: the plot and a line on the reward (or, for @k-DPO, the pair
    accuracy) from the first step to the last, with the mean speed."""
    n_eval = int(evals[-1].get("n", 1)) if evals else 1
    _plot_training(out / "training.png", train, evals, n_eval)
    if "reward_mean" in train[0]:
        speed = sum(r["completions_per_s"] for r in train) / len(train)
        summary = (f"Mean training reward {train[0]['reward_mean']:.3f} (step "
                   f"{train[0]['step']}) -> {train[-1]['reward_mean']:.3f} (step "
                   f"{train[-1]['step']}); {rate(speed)} completions/s per RL step on average.")
    else:
        speed = sum(r["pairs_per_s"] for r in train) / len(train)
        summary = (f"Pair accuracy of the implicit reward {train[0]['reward_accuracy']:.3f} "
                   f"(step {train[0]['step']}) -> {train[-1]['reward_accuracy']:.3f} (step "
                   f"{train[-1]['step']}), loss {train[0]['loss']:.3f} -> "
                   f"{train[-1]['loss']:.3f}; {rate(speed)} pairs/s on average.")
    return ["## Training", "", summary, "", "![training](training.png)", ""]


def _kappo_lines(out: Path, pool_note: str, kp: Mapping[str, object]) -> list[str]:
    """The report's description of a KAPPO run's calibration (none without one)."""
    path = out / CALIBRATION_FILE
    if not path.is_file():
        return []
    try:
        cal = Calibration.load(path)
    except ValueError:
        return [f"- KAPPO calibration: `{CALIBRATION_FILE}` is unreadable"]
    source = (f"from the file `{kp.get('calibration')}`" if kp.get("calibration") else
              "in-run: the frozen reference (after SFT) sampled the bank")
    pool = "these prompts only" + pool_note
    lines = [
        f"- KAPPO calibration ({cal.kind}, {source}): k = {cal.k}, beta = {cal.beta}, "
        f"M = {cal.M}, {cal.num_prompts} prompts; RL drew {pool} "
        f"(`{CALIBRATION_FILE}`" + (f", `{BANK_FILE}`" if (out / BANK_FILE).is_file() else "")
        + ")",
    ]
    return lines
