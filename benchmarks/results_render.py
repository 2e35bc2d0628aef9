"""Rendering of ``benchmarks/make_results.py``: the committed per-seed data files
(``docs/results/data/*.json``) -> ``docs/results/claims.json`` (the verdict rule,
:func:`bestk.lab.claims.evaluate_claims`) -> ``docs/results.md``, with the figures; and
:func:`check`, CI's re-render into a temporary copy. Nothing here runs an experiment.
"""

from __future__ import annotations

import filecmp
import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bestk.figures import save_figure
from bestk.lab import digits as lab_digits
from bestk.lab.claims import (
    ALPHA,
    TESTBEDS,
    VERDICTS,
    arm_outcome,
    bimodal_arms,
    check_controls,
    counts,
    evaluate_claims,
    render_claims,
    render_declared,
)
from bestk.lab.common.io import (
    fmt,
    markdown_table,
    metric_key,
    pyplot,
    write_json_atomic,
    write_text_atomic,
)
from bestk.stats import mean_ci, paired_test
from results_specs import (
    DATA_FORMAT,
    KAPPO_LANGUAGE,
    LANGUAGE,
    PAIRED_METRICS,
    PRETRAINED,
    run_environment,
)


def _mean_band(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean over seeds (rows) and the half-width of its 95% t-interval, per column."""
    stats = [mean_ci(rows[:, j]) for j in range(rows.shape[1])]
    return np.array([m for m, _ in stats]), np.nan_to_num([h for _, h in stats], nan=0.0)


def kappo_figure(tb: dict[str, Any], path: Path) -> None:
    """The KAPPO Figs. 2-3 analogues of the KAPPO language testbed: the change of held-out
    pass@k_eval from the start of RL (paired by seed) for @k-A*PO with k = 1, 2, 4 (a) and
    @k-DPO with k = 1, 2 (b), and pass@k_eval after RL of @k-A*PO (k = 4) with n = 1..8
    completions per prompt against PKPO (c); bands are 95% t-intervals over seeds."""
    plt = pyplot(extra="lab")
    ks = tb["curve_ks"]
    methods = tb["methods"]
    panels = [
        ("(a) @k-A*PO (Fig. 2a)", ["apo(k=1)", "apo(k=2)", "apo(k=4)"], True),
        ("(b) @k-DPO (Fig. 2b)", ["dpo(k=1)", "dpo(k=2)"], True),
        ("(c) @k-A*PO (k=4) vs PKPO (Fig. 3)",
         ["apo(k=4)", "apo(k=4,n=2)", "apo(k=4,n=4)", "apo(k=4,n=8)", "pkpo(k=4)"], False),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    for ax, (title, labels, delta) in zip(axes, panels, strict=True):
        for lb in labels:
            if lb not in methods:
                continue
            m = methods[lb]
            end = np.array([m["end"][metric_key("pass", k)] for k in ks]).T
            start = np.array([m["start"][metric_key("pass", k)] for k in ks]).T
            mean, half = _mean_band(end - start if delta else end)
            budget = m["config"]["rollouts"]
            (line,) = ax.plot(ks, mean, "-", lw=1.4, label=f"{lb}, {budget:,} rollouts")
            ax.fill_between(ks, mean - half, mean + half, color=line.get_color(), alpha=0.12)
        if delta:
            ax.axhline(0.0, color="k", lw=0.8, ls="--")
            ax.set_ylabel("Δ pass@k_eval (end − start of RL)")
        else:
            first = methods[labels[0]]
            st = np.array([first["start"][metric_key("pass", k)] for k in ks]).T.mean(0)
            ax.plot(ks, st, "k--", lw=1, label="start of RL")
            ax.set_ylabel("held-out pass@k_eval")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k_eval")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"KAPPO on anagrams (0/1 success), {len(tb['seeds'])} seeds, held-out "
                 "test prompts", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)


#: Steps per window of the pretrained testbed's training curves (each step: 8 prompts).
CURVE_WINDOW = 5


def pretrained_figure(tb: dict[str, Any], path: Path) -> None:
    """The pretrained testbed's learning curves and pass@k curve: (a) pass@1, (b) pass@n
    (n = the rollouts of a group, 16: the share of groups with a success) and (c) the token
    entropy of each step's own rollouts on training prompts, before the step's update, in
    windows of :data:`CURVE_WINDOW` steps; (d) held-out pass@k for k = 1..n_eval at the end
    of RL, with the start. Lines are means over seeds, bands 95% t-intervals over seeds."""
    plt = pyplot(extra="lab")
    methods = tb["methods"]
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.6))
    # the group size: the last rollout.n override (later overrides win)
    group = [int(o.split("=")[1]) for o in tb["spec"]["overrides"] if o.startswith("rollout.n=")]
    w = CURVE_WINDOW
    curves = ("success_rate", "group_any_success", "entropy")
    for lb, m in methods.items():
        cur = m.get("train_curve", {})
        for ax, key in zip(axes[:3], curves, strict=True):
            if key not in cur:
                continue
            rows = np.asarray(cur[key], dtype=float)  # (seeds, steps)
            w = max(1, min(CURVE_WINDOW, rows.shape[1]))
            cut = rows[:, : rows.shape[1] // w * w].reshape(rows.shape[0], -1, w).mean(2)
            steps = (np.arange(cut.shape[1]) + 1) * w
            mean, half = _mean_band(cut)
            (line,) = ax.plot(steps, mean, ".-", lw=1.4, label=lb)
            top = 1.0 if key != "entropy" else np.inf
            ax.fill_between(steps, np.clip(mean - half, 0, top), np.clip(mean + half, 0, top),
                            color=line.get_color(), alpha=0.12)
        ks = tb["curve_ks"]
        end = np.array([m["end"][metric_key("pass", k)] for k in ks]).T
        mean, half = _mean_band(end)
        (line,) = axes[3].plot(ks, mean, "-", lw=1.4, label=lb)
        axes[3].fill_between(ks, np.clip(mean - half, 0, 1), np.clip(mean + half, 0, 1),
                             color=line.get_color(), alpha=0.12)
    first = next(iter(methods.values()))
    ks = tb["curve_ks"]
    axes[3].plot(ks, np.array([first["start"][metric_key("pass", k)] for k in ks]).T.mean(0),
                 "k--", lw=1, label="start of RL")
    titles = [("(a) pass@1 of the step's rollouts", "pass@1 (training prompts)"),
              (f"(b) pass@{group[-1]} of the step's rollouts (a group has a success)",
               f"pass@{group[-1]} (training prompts)"),
              ("(c) token entropy of the step's rollouts", "entropy (nats per token)"),
              ("(d) held-out pass@k at the end of RL", "pass@k (held-out test prompts)")]
    for ax, (title, ylabel) in zip(axes, titles, strict=True):
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes[:3]:
        ax.set_xlabel(f"RL step (means over windows of {w} steps)")
    axes[3].set_xscale("log", base=2)
    axes[3].set_xlabel("k")
    fig.suptitle(f"SmolLM2-135M-Instruct, arithmetic in chat: {len(tb['seeds'])} seeds",
                 fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)


def pretrained_notes(tb: dict[str, Any]) -> str:
    """The pretrained testbed's own record in results.md: the shared warm start and its
    evaluations, the rate check of the grid's first seed, GRPO's sharpening (its held-out
    pass@16 and pass@1 change from the shared start, 95% t-interval over seeds), the common
    learning rate and its limitation, and the pilots behind the design."""
    out = []
    warm = tb.get("warm_start")
    if warm:
        ev = warm["evaluations"]
        rows = [[step, *["–" if ev[step].get(k) is None else f"{ev[step][k]:.3f}"
                         for k in ("pass@1", "pass@16", "entropy")]]
                for step in sorted(ev, key=int)]
        out.append(f"Shared warm start: GRPO from the base model for {warm['steps']} steps "
                   "(its merged weights are every run's start); its own held-out evaluations "
                   "(step 0 = the base model):\n")
        out.append(markdown_table(["step", "pass@1", "pass@16", "entropy"], rows))
    rc = tb.get("rate_check")
    if rc:
        rows = [[lb, *[f"{r['moves'][k]:+.3f}" for k in r["moves"]],
                 "yes" if r["trains"] else "NO"] for lb, r in rc["methods"].items()]
        keys = list(next(iter(rc["methods"].values()))["moves"])
        out.append(f"Rate check (seed {rc['seed']}, learning rate {rc['lr']} for every "
                   f"method, judged before any other seed ran; {rc['rule']}):\n")
        out.append(markdown_table(["method", *[f"{k} change" for k in keys], "trains"], rows))
    grpo = tb.get("methods", {}).get("grpo")
    if grpo and len(tb.get("seeds", [])) >= 2:
        parts = []
        for k in ("pass@16", "pass@1"):
            t = paired_test(grpo["end"][k], grpo["start"][k])
            parts.append(f"{k} {np.mean(grpo['start'][k]):.3f} -> "
                         f"{np.mean(grpo['end'][k]):.3f} (change {t.diff:+.4f}, 95% CI "
                         f"[{t.ci95[0]:+.4f}, {t.ci95[1]:+.4f}])")
        out.append("GRPO from the shared start, over the seeds (the claims' precondition: "
                   "GRPO sharpens, i.e. pass@16 rises by less than the SESOI 0.02 while pass@1 "
                   "rises): " + "; ".join(parts) + ".\n")
    out.append("One learning rate for every method (GRPO's from the step pilot), not a "
               "sweep per method: a method whose best rate lies elsewhere is compared at a rate "
               "tuned for GRPO, so a verdict here is about the methods at that rate. Pilots "
               "behind the design: " + ", ".join(
                   f"[{n}](results/data/pilots/{n})" for n in (
                       "smollm2-base.json", "smollm2-samples.json", "smollm2-steps.json",
                       "smollm2-warm.json", "smollm2-power.json", "smollm2-rate-check.json"))
               + "; the design: [smollm2-preregistration.md](results/smollm2-preregistration.md)"
               ".\n")
    return "\n".join(out)


def copy_if_exists(src: Path, dst: Path) -> None:
    if src.exists():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)



# ---------------------------------------------------------------------------------------------
# rendering


def load_data(docs: Path) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """``({testbed id: data}, {file name: file metadata})`` from ``docs/results/data``."""
    tbs, files = {}, {}
    for p in sorted((docs / "results" / "data").glob("*.json")):
        d = json.loads(p.read_text())
        if d.get("format") != DATA_FORMAT:
            continue
        meta = {k: v for k, v in d.items() if k != "testbeds"}
        # files written before the top-level field carry the commit in their environment only
        meta["commit"] = d.get("commit") or d.get("environment", {}).get("commit") or "unknown"
        files[p.stem] = meta
        tbs.update(d["testbeds"])
    return tbs, files


def _cell(values) -> str:
    m, h = mean_ci(values)
    return f"{m:.3f} ± {h:.3f}".replace("± nan", "± –")


#: Where the pilot records that the testbeds' texts quote lie (``TestbedSpec.pilot_values``):
#: the committed ``docs/results/data`` of this checkout.
PILOT_DATA = Path(__file__).resolve().parents[1] / "docs" / "results" / "data"


def _testbed_section(tid: str, tb: dict[str, Any] | None,
                     data_dir: Path = PILOT_DATA) -> str:
    """The testbed's section of results.md: its ``why``, the pilot numbers filled from the
    records under ``data_dir`` (:meth:`TestbedSpec.why_text`), and its data."""
    spec = TESTBEDS[tid]
    lines = [f"\n### {tid}: {spec.title}\n", spec.why_text(data_dir) + "\n"]
    if tb is None:
        lines.append(f"No data yet: run `{spec.command}`.\n")
        return "\n".join(lines)
    if tid == "kappo-exact":
        rows = [[c["kind"], c["k"], c["method"], c["limit"], fmt(c["error"]),
                 fmt(c["closed_form_error"]),
                 "–" if c["pass_rate_error"] is None else fmt(c["pass_rate_error"]), c["steps"],
                 "yes" if c["passed"] else "NO"] for c in tb["cases"]]
        lines.append("Total-variation distance of the trained policy to the method's derived "
                     "limit (`error`) and to the closed form, max over prompts; tolerance "
                     f"{tb['tolerance']:g} (derivations: `bestk.lab.kappo`):\n")
        lines.append(markdown_table(["reward", "k", "method", "limit", "error", "closed form",
                                     "pass-rate error", "steps", "ok"], rows))
        lines += [f"- not run: {x['method']} on {x['kind']} rewards — {x['reason']}"
                  for x in tb.get("skipped", [])]
        return "\n".join(lines) + "\n"
    if tid == "smollm2-rollouts":
        lines.append(f"{tb['prompts']} prompts, groups of {tb['group']}, pass rate measured "
                     f"on {tb['measure_samples']} other samples of each prompt (mean "
                     f"{tb['pass_rate_mean']:.3f}); share of the gradient budget by pass rate:\n")
        rows = [[lb, *[f"{100 * v:.1f}%" for v in m["share"]]]
                for lb, m in tb["methods"].items()]
        rows.append(["prompts", *next(iter(tb["methods"].values()))["prompts"]])
        lines.append(markdown_table(["method", *tb["bins"]], rows))
        return "\n".join(lines)
    if tid == "bandit-exact":
        rows = [[r["bandit"], r["N"], r["estimator"], r["objective"], f"{r['rel_bias']:.3g}",
                 f"{r['var_over_signal']:.3f}"] for r in tb["bias"]
                if r["N"] == max(x["N"] for x in tb["bias"])]
        lines.append(markdown_table(["bandit", "N", "estimator", "unbiased for", "rel. bias",
                                     "var/‖E g‖²"], rows))
        return "\n".join(lines)
    if tid in PRETRAINED:
        lines.append(pretrained_notes(tb))
    if not tb["seeds"]:
        lines.append(f"No finished seeds yet: `{spec.command}` is running or has not run.\n")
        return "\n".join(lines)
    measure = {"language": "held-out test prompts at the end of RL, unbiased estimate from "
                           "the samples of each prompt",
               "bandit": "exact, averaged over the learning curve"}.get(
                   spec.kind, "test split at the end of training, exact")
    lines.append(lab_digits.render_testbed(tb, measure=measure))
    extra = [k for k in ("distinct_correct", "distinct", "entropy")
             if k in next(iter(tb["methods"].values()))["end"]]
    if extra:
        rows = [[lb, *[f"{_cell(m['end'][k])} ({_cell(np.subtract(m['end'][k], m['start'][k]))})"
                       for k in extra]] for lb, m in tb["methods"].items()]
        lines.append("Diversity of the held-out samples at the end of RL (change from the start "
                     "of RL in brackets); `distinct_correct` counts distinct *successful* "
                     "completions among the samples of a prompt:\n")
        lines.append(markdown_table(["method", *extra], rows))
    if spec.kind == "sparse" and "ml" in tb["methods"]:
        lines.append(_ml_gap(tb))
    cfg_rows = [[lb, _trains_with(m["config"]), m["config"]["reward"], m["config"]["lr"],
                 f"{m['config']['rollouts']:,}",
                 f"{m['config'].get('bank', 0):,}" + (" (shared)" if m["config"].get(
                     "bank_shared") else ""), m["config"].get("control_of") or ""]
                for lb, m in tb["methods"].items()]
    lines.append("Run configurations (as recorded with the per-seed data; rollouts = on-policy "
                 "completions sampled during RL, bank = reference samples of the KAPPO "
                 "calibration):\n")
    lines.append(markdown_table(["method", "trains with", "reward it sees", "learning rate",
                                 "rollouts", "bank", "A/A control of"], cfg_rows))
    explore = [lb for lb, m in tb["methods"].items() if m["config"].get("exploratory")]
    if explore:
        lines.append("Exploratory arms: " + ", ".join(f"`{lb}`" for lb in explore) + ". No "
                     "claim names them, so no verdict judges them; they show how more @k "
                     "estimators compare. Each has its learning rate from the same sweep "
                     "protocol as the other methods and starts from the same weights per seed, "
                     "but is swept and trained as a batch (bandit, digits) or grid (language) of "
                     "its own, with sampling noise of its own, so adding it changed no other "
                     "method's numbers." + _exploratory_start(tb) + "\n")
    if tb.get("kappo_calibration"):
        cal = tb["kappo_calibration"]
        lines.append("KAPPO calibration from the policy RL starts from (the SFT policy on "
                     f"digits; per KL strength tried where keyed by beta): {json.dumps(cal)}\n")
    if tb.get("reference_banks"):
        rows = [[b["bank"].split("-")[0], b["prompts"], b["M"], f"{b['pass_rate_mean']:.3f}",
                 " / ".join(f"{q:.3f}" for q in b["pass_rate_quartiles"]),
                 f"{b['share_N0']:.3f}", f"{b['share_NM']:.3f}",
                 "–" if b.get("logp_success_mean") is None else
                 f"{b['logp_success_mean']:.2f} ± {b['logp_success_sd']:.2f}",
                 "–" if b.get("logp_failure_mean") is None else f"{b['logp_failure_mean']:.2f}"]
                for b in tb["reference_banks"]]
        lines.append("Reference banks (one per seed, shared by the seed's KAPPO runs): pass "
                     "rates N/M, and the reference's sequence log-probabilities log π_ref(y|x) "
                     "of its completions (nats), the scale beta was chosen against:\n")
        lines.append(markdown_table(["seed", "prompts", "M", "mean pass rate",
                                     "pass-rate quartiles", "share N = 0", "share N = M",
                                     "log π_ref, successes", "log π_ref, failures"], rows))
    return "\n".join(lines)


def _exploratory_start(tb: dict[str, Any]) -> str:
    """A sentence on how closely a merged language grid's arms start where the testbed's
    methods start (empty when they start exactly there, or the arms are not a merged grid)."""
    ex = tb.get("exploratory") or {}
    gap = ex.get("start_max_abs_diff", 0.0)
    if not gap:
        return ""
    others = {k: v for k, v in (ex.get("start_gaps") or {}).items()
              if not k.startswith(PAIRED_METRICS)}
    more = ("; on the other start metrics at most " + ", ".join(
        f"{v:.2g} ({k})" for k, v in sorted(others.items()))) if others else ""
    return (" They ran on a machine whose CPU kernels differ in the last bits from those "
            f"that ran the testbed (collected at commit {ex['commit']}), so the same SFT seed's "
            "policy and its "
            "evaluation samples differ slightly: their starting pass@k / best@k differ from "
            f"the other methods' by at most {gap:.2g} on any k and seed (merged within "
            f"{ex['start_tolerance']:g}, the SESOI){more}. They are paired with the other "
            "methods by seed up to that.")


def _ml_gap(tb: dict[str, Any]) -> str:
    """How closely each RL learner tracks exact maximum likelihood on a sparse testbed
    (SoftmaxGRPO section 6.1: SoftmaxGRPO "closely tracks" exact ML): the paired gap
    ``ml - learner`` of test pass@1 per seed, its 95% interval, and the learner's share of
    ML's pass@1."""
    ml = np.asarray(tb["methods"]["ml"]["end"]["pass@1"])
    rows = []
    for lb, m in tb["methods"].items():
        if lb == "ml" or m["config"].get("control_of"):
            continue
        x = np.asarray(m["end"]["pass@1"])
        gap, half = mean_ci(ml - x)
        rows.append([lb, f"{x.mean():.3f}", f"{gap:+.3f} ± {half:.3f}",
                     f"{x.mean() / ml.mean():.2f}"])
    return ("How closely each learner tracks exact ML (SoftmaxGRPO section 6.1 says "
            "SoftmaxGRPO \"closely tracks\" it, without a number): test pass@1, the paired gap "
            f"to exact ML's {ml.mean():.3f} (mean ± 95% half-width over seeds) and the share of "
            "ML's pass@1 reached:\n\n"
            + markdown_table(["learner", "pass@1", "gap to exact ML", "share of ML"], rows)
            + "\n")


def _trains_with(cfg: dict[str, Any]) -> str:
    """``estimator`` for ``pg`` runs, the algorithm and its k otherwise."""
    alg = cfg.get("algorithm", "pg")
    if alg == "pg":
        return str(cfg["estimator"])
    ks = [o.split("=", 1)[1] for o in cfg.get("overrides", []) if o.startswith("kappo.k=")]
    return {"apo": "@k-A*PO", "dpo": "@k-DPO"}.get(alg, alg) + (f" k={ks[0]}" if ks else "")


#: The testbeds whose paired-difference figure ``render`` draws from the claims document.
PAIRED_FIGURES = (*LANGUAGE, *KAPPO_LANGUAGE, *PRETRAINED)


def _arm_label(e: dict[str, Any], doc: dict[str, Any]) -> str:
    """``claim[tag]: a − b (verdict)`` of a claims.json arm (an A/A control: passed / FAILED)."""
    tag = "[" + e["id"].split("[", 1)[1] if "[" in e["id"] else ""
    return f"{e['claim_id']}{tag}: {e['a']} − {e['b']} ({arm_outcome(e, doc)})"


def paired_figure(doc: dict[str, Any], testbed: str, path: Path) -> bool:
    """The per-seed paired differences a − b of every judged arm on ``testbed`` (dots), their
    mean and 95% t-interval (bar), the arm's MDE in the claimed direction (red tick) and the
    paper's effect where the source reports one (green diamond); one panel per primary
    metric (on a non-inferiority arm, which tests ``a − b + margin``, both count from
    ``−margin``, marked x). These are the differences the verdicts test. Returns False (and
    draws nothing) when no arm of the testbed has been judged."""
    arms = [e for e in doc["claims"] if e["testbed"] == testbed and e["kind"] == "trained"
            and e["primary"]["diff"] is not None]
    if not arms:
        return False
    plt = pyplot(extra="lab")
    metrics: list[str] = []
    for e in arms:
        if e["primary"]["metric"] not in metrics:
            metrics.append(e["primary"]["metric"])
    groups = [[e for e in arms if e["primary"]["metric"] == m] for m in metrics]
    fig, axes = plt.subplots(len(groups), 1, squeeze=False,
                             figsize=(10, 1.5 + 0.42 * len(arms) + 0.5 * len(groups)),
                             height_ratios=[len(g) + 1 for g in groups])
    for ax, metric, group in zip(axes[:, 0], metrics, groups, strict=True):
        for y, e in enumerate(reversed(group)):
            p = e["primary"]
            d = np.subtract(p["per_seed_a"], p["per_seed_b"])
            jitter = np.linspace(-0.18, 0.18, d.size)
            ax.plot(d, y + jitter, "o", ms=3, color="0.45", zorder=2)
            lo, hi = p["ci95"]
            colour = {"reproduced": "tab:blue", "contradicted": "tab:red",
                      "inconclusive": "tab:orange", "significant, below SESOI": "tab:cyan",
                      "control FAILED": "tab:red"}.get(arm_outcome(e, doc), "0.1")
            ax.errorbar([p["diff"]], [y], xerr=[[p["diff"] - lo], [hi - p["diff"]]], fmt="s",
                        ms=5, color=colour, capsize=3, zorder=3)
            sign = 1.0 if p["direction"] == "greater" else -1.0
            # a non-inferiority arm tests a − b + margin: its effects count from −margin
            base = -p["margin"] if p.get("margin") is not None else 0.0
            if e.get("mde") is not None:
                ax.plot([base + sign * e["mde"]], [y], "|", ms=12, mew=2, color="tab:red",
                        zorder=4)
            if e.get("paper_effect") is not None:
                ax.plot([base + sign * e["paper_effect"]], [y], "D", ms=5, color="tab:green",
                        zorder=4)
            if p.get("margin") is not None:
                ax.plot([-p["margin"]], [y], "x", ms=7, color="k", zorder=4)
        ax.axvline(0.0, color="k", lw=0.8)
        ax.set_yticks(range(len(group)))
        ax.set_yticklabels([_arm_label(e, doc) for e in reversed(group)], fontsize=7)
        ax.set_ylim(-0.6, len(group) - 0.4)
        ax.set_xlabel(f"{metric}: a − b per seed (dots), mean and 95% CI (square)", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(f"{testbed}: paired differences a − b by seed (colour: reproduced blue, "
                 "inconclusive orange, contradicted or control failed red, not reproduced or "
                 "control passed black)\nred tick = MDE in the claimed direction "
                 "(80% power, Holm level); green diamond = paper's effect; x = −margin "
                 "(both counted from it on non-inferiority arms)",
                 fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    return True


def _old_digits_legend_note(tbs: dict[str, dict[str, Any]]) -> str:
    """What the committed ``digits.png`` shows when it was drawn before one colour per learner
    (its data file lacks ``figure_colours``): the old plot coloured the i-th learner of every
    panel alike and drew one legend, the binary panel's."""
    binary = list(tbs.get("digits-binary", {}).get("methods", {}))
    graded = list(tbs.get("digits-graded", {}).get("methods", {}))
    moved = [f"{lb} in the colour labelled {binary[i]}" for i, lb in enumerate(graded)
             if i < len(binary) and binary[i] != lb]
    return ("`digits.png` is drawn by the digits run, not from the data files, and this one "
            "predates one colour per learner: its only legend is the binary panel's, and the "
            "graded panels draw " + (", ".join(moved) or "no learner differently")
            + ". The next digits run draws one colour per learner and a legend per panel.\n")


def count_line(name: str, c: dict[str, int]) -> str:
    return f"{name} {sum(c.values())}: " + (", ".join(f"{v} {n}" for v, n in c.items())
                                            or "none")


def render(docs: Path, *, fast: bool = False) -> dict[str, Any]:
    """claims.json, results.md and the paired-difference figures from the per-seed data
    files. Raises :class:`bestk.lab.claims.ControlFailed` (and writes nothing) when an A/A
    control comes out significant."""
    tbs, files = load_data(docs)
    doc = evaluate_claims(tbs, min_seeds=2 if fast else None)
    check_controls(doc)
    write_json_atomic(docs / "results" / "claims.json", doc)
    figures = [t for t in PAIRED_FIGURES
               if paired_figure(doc, t, docs / "results" / f"{t}-paired.png")]
    env = next(iter(files.values()))["environment"] if files else run_environment()
    walls = ", ".join(f"{name} {meta['wall_seconds'] / 60:.1f} min (commit "
                      f"`{meta['commit']}`)" for name, meta in files.items())
    cnt = counts(doc)
    head = [
        "# Results: the papers' claims on small testbeds\n",
        "Generated by `python benchmarks/make_results.py` from the per-seed data in "
        "[results/data/](results/data/) via [results/claims.json](results/claims.json) — do not "
        f"edit by hand (`python benchmarks/make_results.py --check` verifies it). Torch "
        f"{env['torch']}, Python "
        f"{env['python']}, one CPU thread per run on a shared 2-core {env['machine']} machine"
        f"{' (fast smoke mode: numbers meaningless)' if fast else ''}. Training time of the "
        f"runs (single-threaded, summed) and the commit each testbed ran at: "
        f"{walls or 'no runs yet'}.\n",
        "## How to read this\n",
        "Every claim is declared in code (`bestk.lab.claims.CLAIMS`; *When the rule was "
        "declared* below says which parts of the rule came after which testbed's data): the "
        "methods compared, the reward each sees, the testbeds, one primary metric with its "
        "claimed direction, secondary metrics and, for \"Pareto-dominates\" claims, a "
        "non-inferiority margin of 0.02 (absolute) on pass@1 / best@1, which decides that "
        "metric on its own (it is not also counted as a \"significantly worse\" secondary). "
        "Comparisons are paired "
        "by seed (same initial weights, same prompts or minibatches; only the sampling noise "
        "and the method differ). For every arm (claim × testbed) the primary difference a − b "
        "gets a two-sided paired t-test — for \"a matches b\" claims (a non-inferiority "
        "margin on the primary itself) the test of a − b + margin, so that *reproduced* means "
        "the 95% interval of a − b lies above −margin; the p-values of all primary tests of "
        "a *family* are Holm-corrected together at "
        f"α = {ALPHA} (A/A controls included; one family per question: "
        + "; ".join(f"{name}, {f['size']} tests" for name, f in doc["families"].items())
        + " — `TestbedSpec.family`, declared before the pretrained testbed's runs, so its "
        "arms and the toy testbeds' do not dilute each other); secondary metrics are "
        "Holm-corrected within their arm. "
        "Beside the t-test every arm has the exact sign-flip permutation p-value "
        "(`bestk.stats.sign_flip_p`, no normality assumed, Holm-corrected the same way); an "
        "arm whose verdict differs under it is marked *not robust*. With n seeds the "
        "sign-flip p cannot go below 2/2^n (0.0078 at 8 seeds): where even that p could not "
        "pass Holm over this family, the other arms' p as observed, the flag is *n/a (cannot "
        "reach α with n seeds)*, and a significant verdict there rests on the "
        "t-distribution's tails alone. When the paired "
        "differences do not vary at all there is no t-test: equal runs give p = 1, a "
        "constant nonzero difference the exact sign-flip p 2/2^n.\n",
        "Effect sizes: every claim declares its *smallest effect size of interest* (SESOI, "
        "`bestk.lab.claims.SESOI`; on the toy testbeds after their first data, see below), "
        "with its source: the smallest effect its "
        "sources report, or 0.02 absolute where they report none (the margin on \"a "
        "matches b\" claims). Every judged arm records it, its *minimum detectable effect* "
        "(MDE: the difference the paired t-test detects with 80% power at α / family size, "
        "from the observed SD of the paired differences), the effect its source paper "
        "reports (or none, with the reason), the *headroom* (distance to the metric's bound "
        "of b's mean and of its median seed, whichever is smaller: a mean pulled down by a "
        "few low seeds overstates the typical seed's room, and a null at a ceiling is not "
        "evidence) and the seeds the MDE would need to reach the SESOI. A "
        "non-significant arm is **not reproduced** only when its 95% interval, counted in "
        "the claimed direction, ends below the SESOI (an equivalence-style test: every "
        "effect of interest is excluded), and **inconclusive** otherwise, or when b's "
        "headroom is below the SESOI or b did not move from its start. A significant "
        "difference against the claim is **contradicted** whatever the MDE. A significant "
        "difference in the claimed direction is inconclusive when the MDE exceeds the "
        "paper's effect (such an estimate overstates the effect, a type M error), and "
        "**significant, below SESOI** (not counted as reproduced) when its estimate is "
        "smaller than the SESOI. An arm is "
        "inconclusive whatever its outcome when a method's learning rate sits at the edge "
        "of its grid or the testbed did not train (GRPO's pass@1 did not double on the "
        "language tasks); on a claim that a sharpens less than b, when b does not sharpen "
        "(its pass@16 does not end below its start: nothing to lessen). A claim that b "
        "fails to train has that premise judged as part of it: where b's progress from the "
        "start is shown to stay below the SESOI the premise holds and a − b decides (b's "
        "secondaries, an untrained policy's, judge nothing); where it is shown to reach the "
        "SESOI the claim is **not reproduced**; where its interval contains the SESOI the "
        "arm is inconclusive; a significant result against the claim is contradicted either "
        "way. Inconclusive is not evidence against the claim. Each arm also "
        "gives Sarle's bimodality coefficient of a's and b's "
        "per-seed values (above 5/9: the seeds split into two groups, so a mean and a t-test "
        "describe them poorly; the sign-flip p does not assume normality).\n",
        "Reward, prompts and rollout budget must match, except where a claim compares budgets "
        "on purpose (KAPPO Fig. 3: n on-policy completions per prompt against PKPO's n = k), "
        "which its text and its rollouts column say. Every learning rate comes from a sweep "
        "on a validation split over several seeds whose grid is extended until the chosen rate "
        "is interior (`bestk.lr_sweep`; each arm records `lr_a`, `lr_b`, `lr_grid` and "
        "`lr_interior`); the KAPPO testbed runs every method at one rate, as the paper does. "
        "Earlier runs that a testbed's current "
        "design replaced are kept in `results/data/superseded/` and judge nothing. "
        "Every metric is measured on held-out test data: exact probabilities on the lab "
        "testbeds; on the language tasks unbiased pass@k / best@k from 16 samples on each of "
        "512 held-out prompts. The primary \"pass@k at the largest k\" is taken at a k whose "
        "start value leaves room to move (`TestbedSpec.primary_k`: 4 on digits, 8 on the "
        "language tasks).\n",
        "Verdicts:\n",
        *[f"- **{v}** — {d}." for v, d in VERDICTS.items()],
        "\nThe A/A control (`aa-control`) compares GRPO with GRPO: same initial weights and "
        "prompts, independent sampling noise, so every difference is noise; it is included on "
        "every trained testbed kind (`aa-control-kappo`: @k-A*PO against itself on the KAPPO "
        "testbed). A control whose Holm-corrected t-test or sign-flip p comes out significant "
        "fails this whole file: `make_results.py` then exits with an error and writes "
        "nothing.\n",
        "Counts (claims, controls and exact checks apart): "
        + "; ".join([count_line("claim arms", cnt["claims"]),
                     count_line("A/A controls", cnt["controls"]),
                     count_line("exact checks", cnt["exact"])]) + ".\n",
    ]
    tb_sections = ["\n## Testbeds\n",
                   "Why each testbed fits the claims run on it, what was run, the learning-rate "
                   "sweep, the test metrics at the end of training and their change from the "
                   "start of training (the initial policy; the SFT policy on the language "
                   "tasks).\n"]
    for tid in TESTBEDS:
        tb_sections.append(_testbed_section(tid, tbs.get(tid)))
    plots = ["\n## Plots\n"]
    for name, title in (("bandit", "bandit learning curves"), ("digits", "digits"),
                        ("sparse", "sparse classification (SoftmaxGRPO Fig. 2 analogue)"),
                        ("language-permute", "language: anagrams, pass@k after RL"),
                        ("language-reverse", "language: reverse, pass@k after RL"),
                        ("language-permute-kappo",
                         "language: KAPPO Figs. 2-3 analogues on anagrams"),
                        ("smollm2", "pretrained SmolLM2-135M-Instruct: learning curves and "
                                    "pass@k after RL")):
        if (docs / "results" / f"{name}.png").exists():
            plots.append(f"![{title}](results/{name}.png)\n")
        if name in figures:
            plots.append(f"![{name}: paired differences by seed](results/{name}-paired.png)\n")
    if figures:
        plots.append("The *-paired* figures show what the verdicts test: the per-seed "
                     "differences a − b of each arm with their mean and 95% interval, against "
                     "the arm's MDE and the paper's effect; the bands of the pass@k plots "
                     "above are between-seed intervals of each method on its own, wider than "
                     "the paired ones.\n")
    if (docs / "results" / "digits.png").exists() and "digits" in files and \
            "figure_colours" not in files["digits"]:
        plots.append(_old_digits_legend_note(tbs))
    plots.append("\nFull per-command reports: "
                 + ", ".join(f"[results/{p.name}](results/{p.name})"
                             for p in sorted((docs / "results").glob("*.md"))) + ".\n")
    bim = bimodal_arms(doc)
    shape = ["\n## Bimodal per-seed values\n",
             "Arms where a method's per-seed primary values have Sarle's bimodality "
             "coefficient above 5/9 (two groups of seeds, e.g. runs that escaped a poor start "
             "and runs that did not): their means and t-tests summarise them poorly, so read "
             "them with the sign-flip p and the paired figures.\n",
             markdown_table(["arm", "method", "bimodality coefficient"],
                            [[a, m, f"{bc:.2f}"] for a, m, bc in bim]) + "\n"
             if bim else "None of the judged arms.\n"]
    write_text_atomic(docs / "results.md", "\n".join(head) + "\n" + render_claims(doc)
                      + "\n" + render_declared(doc) + "\n".join(shape)
                      + "\n".join(tb_sections) + "\n".join(plots))
    return doc


#: What ``--check`` compares byte for byte.
CHECKED = ("results.md", "results/claims.json")
#: The largest root-mean-square pixel difference (0-255 scale) ``--check`` allows between a
#: committed figure and its re-render from the data: PNG bytes depend on the matplotlib /
#: FreeType build (anti-aliased text), but a moved marker, line or band changes many pixels
#: by far more (measured: 0.0 for every figure re-rendered on the machine that made it).
FIGURE_RMS_TOLERANCE = 2.0


def figure_difference(committed: Path, rendered: Path) -> str | None:
    """Why a committed PNG differs from its re-render (``None``: within
    :data:`FIGURE_RMS_TOLERANCE`): another size, or a pixel RMS above the tolerance."""
    import matplotlib.image as mpimg

    a = np.asarray(mpimg.imread(committed), dtype=float) * 255.0
    b = np.asarray(mpimg.imread(rendered), dtype=float) * 255.0
    if a.shape != b.shape:
        return f"its size {a.shape[1]}x{a.shape[0]} differs from the re-render's " \
               f"{b.shape[1]}x{b.shape[0]}"
    if a.shape[-1] != b.shape[-1]:
        return "its colour channels differ from the re-render's"
    rms = float(np.sqrt(np.mean((a - b) ** 2)))
    if rms > FIGURE_RMS_TOLERANCE:
        return f"pixel RMS {rms:.2f} from the re-render > {FIGURE_RMS_TOLERANCE}"
    return None


def check(docs: Path) -> list[str]:
    """Re-render a temporary copy of ``docs`` (its results.md, results/ and the data) and
    return the differences from the committed files (empty: identical). Never runs an
    experiment. Compared byte for byte: :data:`CHECKED`; the figures drawn from the data (the
    paired-difference figures, the KAPPO and pretrained testbeds' figures) are re-rendered
    and compared pixel by pixel (:func:`figure_difference`); the per-command reports
    ``results/<testbed>.md`` and the lab testbeds' figures are copies of the runs' own, which
    the data files cannot reproduce, so they are not compared."""
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "docs"
        shutil.copytree(docs / "results", copy / "results")
        if (docs / "results.md").exists():
            shutil.copyfile(docs / "results.md", copy / "results.md")
        doc = render(copy, fast=False)
        for rel in CHECKED:
            a, b = docs / rel, copy / rel
            if not a.exists():
                problems.append(f"{rel}: not committed")
            elif not filecmp.cmp(a, b, shallow=False):
                problems.append(f"{rel}: differs from a re-render of the committed data")
        for t in PAIRED_FIGURES:
            if any(e["testbed"] == t and e["kind"] == "trained" and e["primary"]["diff"]
                   is not None for e in doc["claims"]) and \
                    not (docs / "results" / f"{t}-paired.png").exists():
                problems.append(f"results/{t}-paired.png: missing")
        drawn = [f"{t}-paired.png" for t in PAIRED_FIGURES
                 if (docs / "results" / f"{t}-paired.png").exists()]
        tbs, _ = load_data(copy)
        for t, draw in ([(t, kappo_figure) for t in KAPPO_LANGUAGE]
                        + [(t, pretrained_figure) for t in PRETRAINED]):
            if t in tbs and tbs[t].get("seeds") and (docs / "results" / f"{t}.png").exists():
                draw(tbs[t], copy / "results" / f"{t}.png")
                drawn.append(f"{t}.png")
        for name in drawn:
            why = figure_difference(docs / "results" / name, copy / "results" / name)
            if why is not None:
                problems.append(f"results/{name}: {why}")
    return problems + preregistration_problems(docs)


def preregistration_problems(docs: Path) -> list[str]:
    """A pre-registered testbed's data must have run at commits that descend from its
    pre-registration (``TestbedSpec.preregistered_at``): the data file's ``commit`` and
    every commit it records for its runs. Checked with git where this is a git checkout
    holding both commits (else nothing to check)."""
    problems = []
    for t in TESTBEDS.values():
        path = docs / "results" / "data" / f"{t.data}.json"
        if t.preregistered_at is None or not path.exists():
            continue
        data = json.loads(path.read_text())
        commits = {data.get("commit"), (data.get("environment") or {}).get("commit")}
        for c in sorted(x for x in commits if x and x != "unknown"):
            rc = subprocess.run(["git", "merge-base", "--is-ancestor", t.preregistered_at, c],
                                cwd=Path(__file__).resolve().parent,
                                capture_output=True).returncode
            if rc == 1:
                problems.append(f"results/data/{t.data}.json: ran at {c}, which does not "
                                f"descend from {t.id}'s pre-registration {t.preregistered_at}")
    return problems

