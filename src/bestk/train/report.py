"""``report.md`` and PNG plots of a run directory, rebuilt from ``metrics.jsonl``.

Plots: ``passk.png`` (pass@k over k at the start and the end of RL, with bootstrap CIs over
prompts), ``bestk.png`` (the same for best@k, graded tasks), ``training.png`` (training reward,
success rate and token entropy over RL steps, and held-out pass@1 / pass@n per evaluation).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bestk._optional import pyplot

__all__ = ["write_report", "curve_of"]


def curve_of(record: dict[str, Any], prefix: str) -> tuple[list[int], list[float], list, list]:
    """``(ks, means, lo, hi)`` of ``prefix@k`` keys in an evaluation record (k ascending)."""
    ks = sorted(
        int(k.split("@")[1]) for k in record
        if k.startswith(prefix + "@") and k.split("@")[1].isdigit()
    )
    mean = [record[f"{prefix}@{k}"] for k in ks]
    lo = [record.get(f"{prefix}@{k}_lo", record[f"{prefix}@{k}"]) for k in ks]
    hi = [record.get(f"{prefix}@{k}_hi", record[f"{prefix}@{k}"]) for k in ks]
    return ks, mean, lo, hi


def _plot_curves(path: Path, start: dict, end: dict, prefix: str, title: str) -> None:
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
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_training(path: Path, train: list[dict], evals: list[dict], n: int) -> None:
    plt = pyplot(extra="train")

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    steps = [r["step"] for r in train]
    axes[0].plot(steps, [r["reward_mean"] for r in train], label="mean reward")
    axes[0].plot(steps, [r["success_rate"] for r in train], label="success rate", alpha=0.8)
    axes[0].set_title("training rollouts")
    axes[1].plot(steps, [r["entropy"] for r in train], color="tab:red")
    axes[1].set_title("token entropy (training rollouts)")
    es = [r["step"] for r in evals]
    axes[2].plot(es, [r["pass@1"] for r in evals], "o-", label="pass@1")
    if evals and f"pass@{n}" in evals[0]:
        axes[2].plot(es, [r[f"pass@{n}"] for r in evals], "o-", label=f"pass@{n}")
    axes[2].set_title("held-out evaluation")
    for ax in axes:
        ax.set_xlabel("RL step")
        ax.grid(alpha=0.3)
    axes[0].legend()
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _table(start: dict, end: dict, prefix: str) -> list[str]:
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


def write_report(out: str | Path) -> Path:
    """(Re)write ``out/report.md`` and its plots from ``out/metrics.jsonl``."""
    from bestk._atomic import write_text_atomic
    from bestk.train.config import config_to_dict
    from bestk.train.rundir import read_metrics, read_run_config

    out = Path(out)
    rows = read_metrics(out / "metrics.jsonl")
    cfg = config_to_dict(read_run_config(out)) if (out / "config.yaml").exists() else {}
    model = cfg.get("model", {})
    train = [r for r in rows if r.get("phase") == "train"]
    evals = [r for r in rows if r.get("phase") == "eval"]
    sft = [r for r in rows if r.get("phase") == "sft"]
    lines = [f"# bestk training report: `{out}`", ""]
    lines += [
        f"- task: `{cfg.get('task', {}).get('name')}` "
        f"{cfg.get('task', {}).get('options') or '(default options)'}",
        f"- estimator: `{cfg.get('estimator')}` "
        f"{cfg.get('estimator_options') or '(default options)'}",
        f"- model: `{model.get('path') or 'tiny ' + str(model.get('arch'))}`",
        f"- RL steps: {train[-1]['step'] if train else 0} of {cfg.get('max_steps')}; "
        f"rollout {cfg.get('rollout', {}).get('prompts_per_step')} prompts x "
        f"{cfg.get('rollout', {}).get('n')} samples",
        f"- SFT warm-up: {sft[-1]['sft_step'] if sft else cfg.get('sft', {}).get('steps', 0)} "
        "steps" + (f" (final loss {sft[-1]['loss']:.3f})" if sft else ""),
        "",
    ]
    if len(evals) >= 1:
        start, end = evals[0], evals[-1]
        n = int(end.get("n", 1))
        lines += [
            "## Held-out pass@k (unbiased, 95% bootstrap CI over prompts)",
            "",
            f"{int(end.get('num_prompts', 0))} held-out prompts, n = {n} samples each, "
            "start = before RL (after SFT), end = last evaluation.",
            "",
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
        lines += [
            "## Other held-out metrics",
            "",
            "| metric | start | end |",
            "|---|---|---|",
        ]
        for key in ("reward_mean", "entropy", "distinct", "response_len"):
            if key in start and key in end:
                lines.append(f"| {key} | {start[key]:.3f} | {end[key]:.3f} |")
        lines.append("")
    if train:
        n_eval = int(evals[-1].get("n", 1)) if evals else 1
        _plot_training(out / "training.png", train, evals, n_eval)
        speed = sum(r["completions_per_s"] for r in train) / len(train)
        lines += [
            "## Training",
            "",
            f"Mean training reward {train[0]['reward_mean']:.3f} (step {train[0]['step']}) -> "
            f"{train[-1]['reward_mean']:.3f} (step {train[-1]['step']}); "
            f"{speed:.0f} completions/s per RL step on average.",
            "",
            "![training](training.png)",
            "",
        ]
    path = out / "report.md"
    write_text_atomic(path, "\n".join(lines))
    return path
