"""Sparse classification: SoftmaxGRPO section 6.1 (ImageNet, ResNet-50) reproduced small.

SoftmaxGRPO's ImageNet experiment trains a classifier from 0/1 rewards (1 when the sampled class
is the label) where the initial pass rate is about 1/1000; REINFORCE "fails to make meaningful
progress", GRPO improves but stays "visibly farther" from exact maximum likelihood, and
SoftmaxGRPO "closely tracks" it as the rollout count grows (Figure 2). scikit-learn's digits
have 10 classes (initial pass rate 0.1), so the effect cannot show there.

Here an example is ``parts = 3`` digit images side by side and its label the 3-digit number they
show: 1000 classes, one flat softmax (like ImageNet's), initial pass rate about 0.001. Training
examples are fresh composites of random training images at every step; the test examples are
``num_eval`` fixed composites of test images (validation composites of held-out training images
for the learning-rate sweep). The engine, the exact evaluation (``p = pi(label | x)``,
``pass@k = 1 - (1 - p)^k``), the paired seeds, the per-learner learning-rate sweep and the A/A
control are those of :mod:`bestk.lab.digits`; the group size ``N`` (rollouts per example) is
the x axis of the paper's figure, and every ``N`` in ``ns`` is its own testbed
(``sparse-n{N}``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from pydantic import Field, field_validator

from bestk._optional import pyplot
from bestk._schema import Float, Int, SchemaChecks, schema_dataclass
from bestk.figures import save_figure
from bestk.lab.common.io import TestbedData, markdown_table, write_text_atomic
from bestk.lab.common.optim import torch_threads
from bestk.lab.digits.data import learner_data, record_sweep
from bestk.lab.digits.engine import RunSpec, make_problem
from bestk.lab.digits.report import render_testbed
from bestk.lab.digits.run import Ticker, run_settings, write_outputs
from bestk.lab.digits.settings import (
    LEARNERS,
    config_key,
    known_learners,
    learning_rates,
    positive_ks,
)
from bestk.lab.digits.sweep import SettingResult, sweep_and_test

__all__ = ["SparseConfig", "run_sparse", "testbed_data"]

SPARSE_LEARNERS = ("ml", "reinforce", "rloo", "grpo", "grpo (A/A)", "softmax_grpo(tau=0.1)",
                   "maxrl")


@schema_dataclass
class SparseConfig(SchemaChecks):
    """Knobs of ``bestk lab sparse``.

    Attributes
    ----------
    ns: rollouts per training example; each is one testbed.
    parts: digit images per example (``10**parts`` classes; 3 -> 1000, initial pass ~0.001).
    learners: labels from :data:`bestk.lab.digits.LEARNERS`.
    seeds: paired test seeds.
    hidden: MLP hidden width.
    steps: Adam steps per run.
    batch_size: composite examples per step.
    lr_grid, sweep_seeds, val_fraction: the learning-rate sweep on the validation split (the
        grid extended past an edge until the chosen rate is interior: :mod:`bestk.lr_sweep`).
    max_extensions: most rates added past the grid's edges for one learner.
    test_fraction: held-out share of the digit images (the test composites are made of them).
    num_eval: composite evaluation examples.
    ks: k values of the reported pass@k.
    eval_every: steps between two points of the training curves.
    seed: base seed.
    threads: torch CPU threads.
    """

    ns: tuple[Int, ...] = (16, 64)
    parts: Int = Field(3, ge=2, le=4, json_schema_extra={"want": "2, 3 or 4"})
    learners: tuple[str, ...] = SPARSE_LEARNERS
    seeds: Int = Field(16, ge=1)
    hidden: Int = Field(128, ge=1)
    steps: Int = Field(1500, ge=1)
    batch_size: Int = Field(64, ge=1)
    lr_grid: tuple[float, ...] = (1e-3, 3e-3, 1e-2)
    max_extensions: Int = Field(3, ge=0)
    sweep_seeds: Int = Field(3, ge=1)
    val_fraction: Float = Field(0.2, ge=0.05, le=0.5)
    test_fraction: Float = Field(0.3, ge=0.05, le=0.9)
    num_eval: Int = Field(2000, ge=1)
    ks: tuple[Int, ...] = (1, 4, 16, 64)
    eval_every: Int = Field(100, ge=1)
    seed: Int = 0
    threads: Int = 1

    @field_validator("ns")
    @classmethod
    def _rollout_counts(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v or min(v) < 2:
            raise ValueError(f"ns must be rollout counts >= 2, got {v}")
        return v

    _learners = field_validator("learners")(known_learners)
    _lrs = field_validator("lr_grid", mode="before")(learning_rates)
    _ks = field_validator("ks")(positive_ks)

    @classmethod
    def fast(cls) -> SparseConfig:
        """Seconds-long settings for tests."""
        return cls(ns=(4,), parts=2, seeds=2, hidden=32, steps=20, batch_size=16,
                   lr_grid=(3e-3, 1e-2), sweep_seeds=1, num_eval=200, ks=(1, 4),
                   eval_every=10)

    def key(self) -> str:
        return config_key(self)


def testbed_id(n: int) -> str:
    return f"sparse-n{int(n)}"


def testbed_data(cfg: SparseConfig, settings: Mapping[int, SettingResult]
                 ) -> dict[str, TestbedData]:
    """Per-seed data for the claims, one testbed per N (like ``digits.testbed_data``)."""
    out = {}
    for n, st in settings.items():
        test = st["test"]
        methods = {
            lb: learner_data(test, lb, "binary", st["selected"][lb], n=n, steps=cfg.steps,
                             batch=cfg.batch_size)
            for lb in st["learners"]
        }
        record_sweep(methods, st)
        out[testbed_id(n)] = {"ks": list(cfg.ks), "seeds": list(range(cfg.seeds)), "n": n,
                              "classes": 10**cfg.parts,
                              # every learner starts from the seed's initial weights
                              "initial_pass@1": float(np.mean(
                                  next(iter(methods.values()))["start"]["pass@1"]))
                              if methods else None,
                              "methods": methods, "sweep": st["sweep"],
                              "wall_seconds": st.get("wall_seconds")}
    return out


def plot(results: Mapping[int, SettingResult], path: Path) -> None:
    """Test pass@1 along training per N (mean over seeds), as SoftmaxGRPO Figure 2."""
    plt = pyplot(extra="lab")

    ns = list(results)
    fig, axes = plt.subplots(1, len(ns), figsize=(5.5 * len(ns), 4), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for j, n in enumerate(ns):
        st, ax = results[n], axes[0][j]
        test = st["test"]
        for i, lb in enumerate(st["learners"]):
            idx = [t for t, s in enumerate(test["slots"]) if s["learner"] == lb]
            curve = np.asarray(test["curve_pass@1"])[idx]
            m = curve.mean(0)
            se = curve.std(0, ddof=1) / math.sqrt(len(idx)) if len(idx) > 1 else 0 * m
            style = "--" if LEARNERS[lb].control_of else "-"
            ax.plot(test["curve_steps"], m, style, label=lb, color=cmap(i % 10))
            ax.fill_between(test["curve_steps"], m - 1.96 * se, m + 1.96 * se, alpha=0.12,
                            color=cmap(i % 10))
        ax.set_title(f"{st['classes']} classes, N = {n} rollouts per example")
        ax.set_xlabel("Adam step")
        ax.set_ylabel("test pass@1 (exact)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)


def run_sparse(cfg: SparseConfig, out: str | Path, *, progress: bool = True,
               resume: bool = True) -> dict[int, SettingResult]:
    """Sweep and test every N; write ``results.json``, ``testbeds.json``, ``results.md``,
    ``sparse.png`` and ``config.json`` under ``out`` (finished Ns saved atomically to
    ``out/settings/`` and reused by a rerun with the same configuration)."""
    cfg.validate()
    out = Path(out)
    learners = [LEARNERS[lb] for lb in cfg.learners]

    def compute(n: int, tick: Ticker) -> SettingResult:
        spec = RunSpec(n=n, steps=cfg.steps, batch_size=cfg.batch_size, hidden=cfg.hidden,
                       ks=tuple(cfg.ks), eval_every=cfg.eval_every, seed=cfg.seed, eval_chunk=4)
        active = [x for x in learners if x.applies("binary", n)]
        res = sweep_and_test(
            lambda split: make_problem("binary", split=split, test_fraction=cfg.test_fraction,
                                       val_fraction=cfg.val_fraction, seed=cfg.seed,
                                       parts=cfg.parts, num_eval=cfg.num_eval),
            active, spec, seeds=cfg.seeds, lr_grid=cfg.lr_grid, sweep_seeds=cfg.sweep_seeds,
            progress=lambda d, t: tick(f"N={n} {d}", t), max_extensions=cfg.max_extensions)
        return {"n": n, "classes": 10**cfg.parts, "ks": list(cfg.ks),
                "learners": [x.label for x in active], **res}

    key = cfg.key()
    with torch_threads(cfg.threads):
        results = run_settings(out, [(n, f"N{n}.json") for n in cfg.ns], key, resume=resume,
                               progress=progress, prefix="sparse", compute=compute)
    data = testbed_data(cfg, results)
    write_outputs(out, cfg, results, data)
    md = [f"# bestk lab sparse\n\n{cfg.parts} digit images per example, {10**cfg.parts} classes "
          f"(initial pass rate ≈ {10.0**-cfg.parts:g}); MLP (hidden {cfg.hidden}); "
          f"{cfg.steps} Adam steps of {cfg.batch_size} examples × N rollouts; {cfg.seeds} paired "
          "seeds; learning rate per learner from a validation sweep; exact test pass@k.\n"]
    for tb_id, tb in data.items():
        md.append(render_testbed(tb, f"{tb_id}: N = {tb['n']}"))
        ml = tb["methods"].get("ml")
        if ml is not None:
            rows = [[lb, f"{np.mean(np.subtract(m['end']['pass@1'], ml['end']['pass@1'])):+.3f}"]
                    for lb, m in tb["methods"].items() if lb != "ml"]
            md.append("Gap to exact ML in test pass@1 (mean over seeds):\n\n"
                      + markdown_table(["learner", "pass@1 − ml"], rows))
    write_text_atomic(out / "results.md", "\n".join(md))
    plot(results, out / "sparse.png")
    return results
