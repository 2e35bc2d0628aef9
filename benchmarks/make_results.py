"""Regenerate docs/results.md: the papers' claims next to what the bestk lab measures.

    python benchmarks/make_results.py            # full runs (a few minutes on 2 CPU cores)
    python benchmarks/make_results.py --reuse    # re-render from existing runs/lab outputs
    python benchmarks/make_results.py --fast --runs /tmp/x --doc /tmp/x/results.md  # smoke

Runs ``bestk lab bandit`` and ``bestk lab digits`` with their default (seeded) configurations
into ``runs/lab/``, evaluates every claim with :mod:`bestk.lab.claims` and writes the markdown
plus the two plots next to it (``docs/results/``). Everything is seeded and single-threaded,
so a rerun reproduces the numbers (up to floating-point reduction order).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from bestk.lab._io import t95, write_text_atomic
from bestk.lab.bandit import BanditConfig, plot_curves, render_markdown, run_bandit
from bestk.lab.claims import evaluate_claims, render_claims
from bestk.lab.digits import AT_K, DigitsConfig, run_digits

ROOT = Path(__file__).resolve().parents[1]


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


#: The language-task comparison: the trainer's embedded default (tiny Qwen2, reverse digit
#: strings with a graded positional reward, SFT warm-up then 100 RL steps), matched seeds;
#: held-out evaluation at the start and the end of RL with n = 64 samples per prompt. The grid
#: is split over ``workers`` processes by estimator (each redoes the seeded, deterministic SFT).
#: KAPPO @k-GRPO is calibrated per seed from a bank of the SFT policy's 0/1 successes on the
#: first ``bank_prompts`` training prompts (``bank_n`` samples each); the trainer then trains
#: kappo_grpo on those bank prompts only (the calibration knows no other prompt).
LANGUAGE = {"estimators": ["grpo", "argmaxrl", "maxrl", "softmax_grpo", "pkpo", "kappo_grpo"],
            "seeds": 3, "max_steps": None,
            "overrides": ["threads=1", "eval.n=64", "eval.every=100"],
            "kappo": {"k": 4, "beta": 0.1, "bank_prompts": 2048, "bank_n": 8},
            "workers": 2}
LANGUAGE_FAST = {"estimators": ["grpo", "argmaxrl", "maxrl", "softmax_grpo", "pkpo",
                                "kappo_grpo"],
                 "seeds": 2, "max_steps": 1,
                 "overrides": ["threads=1", "model.hidden_size=32", "model.num_layers=1",
                               "model.num_heads=2", "model.intermediate_size=64",
                               "task.options={num_train: 64, num_eval: 4, max_len: 4}",
                               "sft.steps=3", "rollout.prompts_per_step=4", "rollout.n=4",
                               "eval.n=8"],
                 "kappo": {"k": 4, "beta": 0.1, "bank_prompts": 16, "bank_n": 4},
                 "workers": 2}


def _partition(estimators: list[str], workers: int) -> list[list[str]]:
    """Contiguous, nearly equal chunks of the estimator list (order kept)."""
    w = max(1, min(workers, len(estimators)))
    size, extra = divmod(len(estimators), w)
    parts, i = [], 0
    for j in range(w):
        n = size + (j < extra)
        parts.append(estimators[i:i + n])
        i += n
    return parts


def _kappo_calibrations(spec: dict, out: Path) -> str:
    """Per seed: SFT (as ``bestk compare`` does it), a 0/1 bank on training prompts, then
    ``bestk.kappo.calibrate(kind="binary")``. Returns the ``{seed}`` path template."""
    from bestk.kappo import calibrate
    from bestk.train.compare import _base_config
    from bestk.train.evaluate import evaluate
    from bestk.train.loop import Trainer

    kp = spec["kappo"]
    cal_dir = out / "calibration"
    for s in range(spec["seeds"]):
        cfg = _base_config(None, spec["max_steps"], list(spec["overrides"]))
        cfg.estimator, cfg.estimator_options = "grpo", {}
        cfg.seed += s
        cfg.out = str(cal_dir / f"sft_seed{s}")
        if Path(cfg.out).exists():
            shutil.rmtree(cfg.out)
        tr = Trainer(cfg)
        tr.sft()
        exs = tr.task.train[:kp["bank_prompts"]]
        res = evaluate(tr.model, tr.tokenizer, tr.task, exs, n=kp["bank_n"],
                       temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
                       max_new_tokens=tr.max_new_tokens, seed=cfg.seed + 1)
        succ = tr.task.success(res.rewards).astype(float)
        bank = {int(ex["id"]): row.tolist() for ex, row in zip(exs, succ, strict=True)}
        write_text_atomic(cal_dir / f"bank_seed{s}.jsonl", "".join(
            json.dumps({"prompt_id": i, "rewards": r}) + "\n" for i, r in bank.items()))
        cal = calibrate(bank, k=kp["k"], beta=kp["beta"], kind="binary")
        cal.save(cal_dir / f"seed{s}.json")
        shutil.rmtree(cfg.out)  # only the bank and the calibration are kept
    return str(cal_dir / "seed{seed}.json")


def _language_part(spec: dict, out: Path, estimators: list[str]) -> None:
    """One worker: ``run_compare`` on a subset of the estimators into ``out``."""
    from bestk.train.compare import run_compare

    opts = {}
    if "kappo_grpo" in estimators:
        opts["kappo_grpo"] = {"calibration": _kappo_calibrations(spec, out)}
    run_compare(estimators, seeds=spec["seeds"], out=out, max_steps=spec["max_steps"],
                overrides=spec["overrides"], progress=False, estimator_options=opts)


def run_language(out: Path, *, reuse: bool, fast: bool) -> dict:
    """``bestk compare`` on the trainer's default task (reused when the same spec ran)."""
    from bestk.train.compare import _base_config, write_summary

    spec = LANGUAGE_FAST if fast else LANGUAGE
    done = out / "lab_spec.json"
    if not (reuse and done.exists() and json.loads(done.read_text())["spec"] == spec):
        t0 = time.time()
        parts = _partition(spec["estimators"], spec["workers"])
        out.mkdir(parents=True, exist_ok=True)
        procs = []
        for i in range(len(parts)):
            log = open(out / f"part{i}.log", "w")  # noqa: SIM115 (closed below)
            cmd = [sys.executable, __file__, "--language-part", str(i),
                   "--runs", str(out.parent), *(["--fast"] if fast else [])]
            procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log))
        failed = []
        for i, (pr, log) in enumerate(procs):
            if pr.wait() != 0:
                failed.append(i)
            log.close()
        if failed:
            raise RuntimeError(f"language worker(s) {failed} failed; see "
                               f"{', '.join(str(out / f'part{i}.log') for i in failed)}")
        results = {}
        for i in range(len(parts)):
            results.update(json.loads((out / f"part{i}" / "results.json").read_text()))
        results = {e: results[e] for e in spec["estimators"]}
        write_text_atomic(out / "results.json", json.dumps(results, indent=1))
        n = _base_config(None, spec["max_steps"], list(spec["overrides"])).eval.n
        write_summary(out, results, n)
        write_text_atomic(done, json.dumps({"spec": spec, "wall_seconds": time.time() - t0,
                                            "parts": parts}))
    meta = json.loads(done.read_text())
    cal = {}
    for p in sorted(out.glob("part*/calibration/seed*.json")):
        from bestk.kappo import Calibration

        c = Calibration.load(p)
        a = np.asarray(c.values["a_k"], dtype=float)
        ns = np.asarray(c.values["n_success"], dtype=float)
        cal[p.stem] = {"a_k_median": float(np.median(a)), "a_k_min": float(a.min()),
                       "a_k_max": float(a.max()), "share_no_success": float((ns == 0).mean()),
                       "prompts": int(a.size)}
    return {"results": json.loads((out / "results.json").read_text()), "calibration": cal,
            **meta}


def _language_bullet(language: dict) -> str:
    """What the language comparison ran, from its recorded spec and results."""
    from bestk.train.compare import _base_config

    spec, res = language["spec"], language["results"]
    end = next(iter(next(iter(res.values())).values()))["end"]
    cfg = _base_config(None, spec["max_steps"], list(spec["overrides"]))
    kp = spec.get("kappo")
    text = (f"- `bestk compare` (language task; `bestk.train.compare.run_compare`) — the "
            f"trainer's embedded default configuration (tiny {cfg.model.arch} from scratch, "
            f"{cfg.model.num_layers} blocks of width {cfg.model.hidden_size}; task "
            f"`{cfg.task.name}`: "
            "reverse digit strings, graded positional reward, success = exact answer; "
            f"{cfg.sft.steps} SFT steps then {cfg.max_steps} RL steps of "
            f"{cfg.rollout.prompts_per_step} prompts × {cfg.rollout.n} completions, lr "
            f"{cfg.optim.lr}) with the overrides "
            f"`{' '.join(spec['overrides'])}`; estimators {', '.join(spec['estimators'])}; "
            f"{spec['seeds']} seeds (per seed every estimator starts RL from the same SFT "
            "weights and draws the same prompts and sampling noise); held-out evaluation at "
            f"the start and the end of RL on {int(end['num_prompts'])} prompts × "
            f"{int(end['n'])} samples (pass@k and best@k for k = 1..{int(end['n'])}, "
            "entropy, distinct completions). ")
    if len(language.get("parts", [])) > 1:
        text += (f"The grid ran in {len(language['parts'])} single-threaded processes ("
                 + "; ".join(", ".join(p) for p in language["parts"]) + "), each "
                 "redoing the seeded SFT; the 'Δpass@k at the start of RL' rows (must be 0) "
                 "check that they start from identical weights. ")
    if kp and "kappo_grpo" in spec["estimators"]:
        text += (f"kappo_grpo: binary calibration (k = {kp['k']}, β = {kp['beta']}) per seed "
                 f"from a bank of {kp['bank_n']} samples of that seed's SFT policy on each of "
                 f"the first {kp['bank_prompts']} training prompts (0/1 success); the trainer "
                 "trains it on those bank prompts only, and `advantage_reward: auto` feeds it "
                 "(and maxrl) the 0/1 success, the others the graded reward. ")
    return text + f"Wall time {language['wall_seconds'] / 60:.1f} min.\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "lab",
                    help="where the raw lab outputs go")
    ap.add_argument("--doc", type=Path, default=ROOT / "docs" / "results.md")
    ap.add_argument("--reuse", action="store_true",
                    help="re-render from existing outputs in --runs (run what is missing)")
    ap.add_argument("--fast", action="store_true", help="seconds-long smoke configuration")
    ap.add_argument("--language", action="store_true",
                    help="also run the language task with `bestk compare` (~20 min on 2 cores)")
    ap.add_argument("--language-part", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    torch.set_num_threads(1)
    if args.language_part is not None:  # worker process of run_language
        spec = LANGUAGE_FAST if args.fast else LANGUAGE
        ests = _partition(spec["estimators"], spec["workers"])[args.language_part]
        _language_part(spec, args.runs / "language" / f"part{args.language_part}", ests)
        return 0
    bcfg = BanditConfig.fast() if args.fast else BanditConfig()
    dcfg = DigitsConfig.fast() if args.fast else DigitsConfig()
    bdir, ddir = args.runs / "bandit", args.runs / "digits"
    t0 = time.time()
    bres_path = bdir / "results.json"
    if args.reuse and bres_path.exists() and \
            json.loads(bres_path.read_text())["config"] == json.loads(json.dumps(asdict(bcfg))):
        bandit = json.loads(bres_path.read_text())
        write_text_atomic(bdir / "results.md", render_markdown(bandit))
        plot_curves(bandit, bdir / "curves.png")
    else:
        bandit = json.loads(json.dumps(run_bandit(bcfg, bdir, progress=sys.stdout.isatty())))
    t_bandit = time.time() - t0
    t1 = time.time()
    digits = run_digits(dcfg, ddir, progress=sys.stdout.isatty(), resume=args.reuse)
    t_digits = time.time() - t1

    language = None
    if args.language:
        language = run_language(args.runs / "language", reuse=args.reuse, fast=args.fast)

    # Wall time of the runs themselves (not of a --reuse re-render).
    t_bandit = bandit.get("wall_seconds", t_bandit)
    t_digits = json.loads((ddir / "config.json").read_text()).get("training_wall_seconds",
                                                                   t_digits)
    claims = evaluate_claims(bandit, digits, language)
    img_dir = args.doc.parent / "results"
    img_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(bdir / "curves.png", img_dir / "bandit_curves.png")
    shutil.copyfile(ddir / "digits.png", img_dir / "digits.png")
    shutil.copyfile(bdir / "results.md", img_dir / "bandit.md")
    shutil.copyfile(ddir / "results.md", img_dir / "digits.md")
    if language is not None:
        shutil.copyfile(args.runs / "language" / "compare.png", img_dir / "language.png")
        shutil.copyfile(args.runs / "language" / "compare.md", img_dir / "language.md")
    rel = img_dir.relative_to(args.doc.parent)
    head = [
        "# Results: the papers' claims, reproduced small\n",
        "Generated by `python benchmarks/make_results.py` — do not edit by hand. "
        f"Commit `{_git_commit()}`, torch {torch.__version__}, Python "
        f"{platform.python_version()}, 1 CPU thread of a shared 2-core machine; wall time of the "
        f"runs: bandit {t_bandit:.0f} s, digits {t_digits:.0f} s"
        f"{' (fast smoke mode)' if args.fast else ''}. The runs are seeded and single-threaded: "
        "a rerun on the same machine and torch build gives bit-identical results.json.\n",
        f"Every number below comes from {'three' if language else 'two'} seeded commands "
        "(their raw outputs are in "
        f"`{args.runs.relative_to(ROOT) if args.runs.is_relative_to(ROOT) else args.runs}/`):\n",
        f"- `bestk lab bandit` — {len(bcfg.bandits)} softmax bandits with 8 arms "
        f"({', '.join(bcfg.bandits)}); exact bias/variance at N ∈ {list(bcfg.ns)} by "
        f"enumerating every multiset of N draws; learning curves with N={bcfg.curve_n}, "
        f"{bcfg.steps} Adam steps (lr {bcfg.lr}), {bcfg.seeds} seeds (base seed {bcfg.seed}).",
        f"- `bestk lab digits` — MLP (hidden {dcfg.hidden}) on scikit-learn digits "
        f"(1797 images, {int(dcfg.test_fraction * 100)}% held out), {dcfg.steps} Adam steps "
        f"(lr {dcfg.lr}) of {dcfg.batch_size} images × N rollouts, N ∈ {list(dcfg.ns)}, "
        f"rewards {list(dcfg.rewards)}, {dcfg.seeds} seeds (base seed {dcfg.seed}); every "
        "learner of a seed starts from the same weights and sees the same minibatches. "
        f"KAPPO @k-GRPO: k={AT_K}, β={dcfg.kappo_beta} (binary) / "
        f"{dcfg.kappo_winrate_beta} (win-rate), bank of {dcfg.kappo_bank} samples per image "
        "from the initial policy. Test metrics are exact (pass@k = 1 − (1 − p)^k with "
        "p = π(label | x); best@k from the closed form), so the only noise is between seeds."
        + ("\n" if language is None else ""),
        *([_language_bullet(language)] if language is not None else []),
        "Comparisons are paired by seed: `a ± h` is the mean per-seed difference and its "
        "two-sided 95% Student-t half-width; `(sig.)` marks intervals that exclude 0. With "
        f"{dcfg.seeds} seeds the t quantile is large "
        f"({t95(dcfg.seeds - 1):.2f}), so only clear effects are "
        "significant. Verdict rules are printed with each claim and applied mechanically "
        "(`bestk.lab.claims`).\n",
    ]
    plots = [
        f"\n## Plots\n\n![bandit learning curves]({rel}/bandit_curves.png)\n\n"
        f"![digits]({rel}/digits.png)\n",
        *([f"\n![language task: pass@k after RL]({rel}/language.png)\n"]
          if language is not None else []),
        "\n## Full tables\n\nThe complete per-command reports (every estimator, N and k, "
        f"learning curves, allocation for both reward kinds): [{rel}/bandit.md]({rel}/bandit.md) "
        f"and [{rel}/digits.md]({rel}/digits.md)"
        + (f"; language task: [{rel}/language.md]({rel}/language.md)" if language else "")
        + ".\n",
    ]
    write_text_atomic(args.doc, "\n".join(head) + "\n" + render_claims(claims) + "".join(plots))
    print(f"wrote {args.doc} ({len(claims)} claims); bandit {t_bandit:.0f}s, "
          f"digits {t_digits:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
