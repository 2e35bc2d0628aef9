"""``bestk lab digits``: sweep and test every reward variant, write the outputs, resume.

:func:`run_digits` is the command; :func:`run_settings` (each finished setting saved
atomically and reused on a rerun) and :func:`write_outputs` are shared with the sparse
testbed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from rich.progress import Progress

from bestk.lab.common.io import (
    TestbedData,
    write_json_atomic,
    write_text_atomic,
)
from bestk.lab.common.optim import torch_threads
from bestk.lab.digits.data import testbed_data
from bestk.lab.digits.engine import (
    Problem,
    RunSpec,
    make_problem,
)
from bestk.lab.digits.report import plot, render_testbed
from bestk.lab.digits.settings import (
    LEARNERS,
    DigitsConfig,
    Learner,
)
from bestk.lab.digits.sweep import SettingResult, merge_settings, sweep_and_test


def _spec(cfg: DigitsConfig) -> RunSpec:
    return RunSpec(n=cfg.n, steps=cfg.steps, batch_size=cfg.batch_size, hidden=cfg.hidden,
                   ks=tuple(cfg.ks), eval_every=cfg.eval_every, seed=cfg.seed,
                   kappo_bank=cfg.kappo_bank, sft_steps=cfg.sft_steps, sft_lr=cfg.sft_lr)


def run_digits(cfg: DigitsConfig, out: str | Path, *, progress: bool = True,
               resume: bool = True) -> dict[str, SettingResult]:
    """Sweep and test every reward variant; write ``results.json`` (per reward: the sweep, the
    selected rates and the per-slot test results), ``testbeds.json`` (per-seed data for the
    claims), ``results.md``, ``digits.png`` and ``config.json`` under ``out``.

    Each finished reward variant is saved atomically to ``out/settings/``; with ``resume`` a
    rerun with the same configuration reuses it (a killed run continues where it stopped).
    """
    cfg.validate()
    out = Path(out)
    with torch_threads(cfg.threads):
        return _run_digits(cfg, out, progress=progress, resume=resume)


Ticker = Callable[[str, int], Callable[[], None]]
#: What the settings of a command are keyed by (a reward variant's name, a group size).
K = TypeVar("K", str, int)

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from _typeshed import DataclassInstance

    class LabConfig(DataclassInstance, Protocol):
        """A classification command's settings (:class:`DigitsConfig`, ``SparseConfig``): a
        dataclass with the :meth:`key` of the fields that change its results."""

        def key(self) -> str: ...


def run_settings(out: Path, items: Sequence[tuple[K, str]], key: str, *, resume: bool,
                 progress: bool, prefix: str,
                 compute: Callable[[K, Ticker], SettingResult]) -> dict[K, SettingResult]:
    """``{item: compute(item, tick)}`` for ``(item, file name)`` pairs, each result saved
    atomically to ``out/settings/<file name>`` with its wall time and the config ``key``;
    with ``resume`` a saved result of the same key is reused instead of recomputed."""
    results: dict[K, SettingResult] = {}
    with Progress(disable=not progress, transient=True) as bar:
        def tick(desc: str, total: int) -> Callable[[], None]:
            task = bar.add_task(f"{prefix} {desc}", total=total)
            return lambda: bar.advance(task)

        for item, fname in items:
            part = out / "settings" / fname
            if resume and part.exists():
                saved = json.loads(part.read_text())
                if saved.get("config_key") == key:
                    results[item] = saved
                    continue
            t0 = time.perf_counter()
            st = {**compute(item, tick), "wall_seconds": time.perf_counter() - t0,
                  "config_key": key}
            write_json_atomic(part, st)
            results[item] = st
    return results


def write_outputs(out: Path, cfg: LabConfig, results: Mapping[K, SettingResult],
                  data: Mapping[str, TestbedData]) -> None:
    """``config.json`` (with the summed training time), ``results.json`` and the per-seed
    ``testbeds.json`` of a classification command."""
    wall = sum(st.get("wall_seconds", 0.0) for st in results.values())
    write_json_atomic(out / "config.json", {**asdict(cfg), "config_key": cfg.key(),
                                            "training_wall_seconds": wall})
    write_json_atomic(out / "results.json", results)
    write_json_atomic(out / "testbeds.json", data)


def _run_digits(cfg: DigitsConfig, out: Path, *, progress: bool, resume: bool
                ) -> dict[str, SettingResult]:
    key = cfg.key()
    spec = _spec(cfg)

    def compute(reward: str, tick: Ticker) -> SettingResult:
        learners = [LEARNERS[lb] for lb in cfg.learners if LEARNERS[lb].applies(reward, cfg.n)]

        def make(split: str) -> Problem:
            return make_problem(reward, split=split, test_fraction=cfg.test_fraction,
                                val_fraction=cfg.val_fraction, seed=cfg.seed)

        def run(group: list[Learner], run_spec: RunSpec) -> SettingResult:
            return sweep_and_test(make, group, run_spec, seeds=cfg.seeds, lr_grid=cfg.lr_grid,
                                  sweep_seeds=cfg.sweep_seeds, progress=tick,
                                  max_extensions=cfg.max_extensions,
                                  kappo_betas=cfg.kappo_betas)

        # exploratory learners: a batch of their own (their own rollouts), after the others,
        # so that they change no other learner's numbers
        res = run([x for x in learners if not x.exploratory], spec)
        extra = [x for x in learners if x.exploratory]
        if extra:
            res = merge_settings(res, run(extra, replace(spec, exploratory=True)))
        return {"reward": reward, "n": cfg.n, "ks": list(cfg.ks),
                "learners": [x.label for x in learners],
                "skipped": {lb: ("binary rewards only" if LEARNERS[lb].binary_only else
                                 f"needs N >= {LEARNERS[lb].min_n}")
                            for lb in cfg.learners if not LEARNERS[lb].applies(reward, cfg.n)},
                **res}

    results = run_settings(out, [(r, f"{r}.json") for r in cfg.rewards], key, resume=resume,
                           progress=progress, prefix="digits", compute=compute)
    data = testbed_data(cfg, results)
    write_outputs(out, cfg, results, data)
    md = [f"# bestk lab digits\n\nMLP (hidden {cfg.hidden}) on scikit-learn digits, N = {cfg.n} "
          f"rollouts per image, {cfg.steps} Adam steps of {cfg.batch_size} images; "
          f"{cfg.seeds} paired seeds; learning rate per learner from a sweep over "
          f"{list(cfg.lr_grid)} on a validation split; exact evaluation on the test split.\n"]
    for reward, tb in data.items():
        md.append(render_testbed(tb, f"{reward}"))
    write_text_atomic(out / "results.md", "\n".join(md))
    plot(results, out / "digits.png")
    return results
