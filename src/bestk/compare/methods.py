"""The arms of a comparison: :class:`Method` (an estimator, its options, overrides of its own, an
A/A control), :class:`KappoAuto` (a per-seed KAPPO calibration), and the config of each run of
the grid.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bestk._seeds import CONTROL_SAMPLING
from bestk.estimators import ESTIMATORS, estimator_info
from bestk.train.algorithms import ALGORITHMS
from bestk.train.config import ResolvedTrainConfig, TrainConfig
from bestk.train.config.io import apply_overrides, config_to_dict, load_config
from bestk.train.config.machine import check_device
from bestk.train.validation import (
    check_names,
    check_values,
    resolve_config,
    resolve_defaults,
)


@dataclass(frozen=True)
class Method:
    """One arm of a comparison.

    ``overrides`` are ``key=value`` config overrides for this method's runs only (they may not
    touch the model, task or SFT sections: every method starts from the same SFT weights).
    ``options`` are estimator options (over the estimator's registered ``default_options``
    when it is not the base config's estimator); a string value with
    ``{seed}`` is formatted with the seed index. ``control_of`` makes an A/A control of that
    method: same estimator, options, overrides and learning rate, sampling noise from
    ``sampling_seed = CONTROL_SAMPLING.seed(seed)`` (:mod:`bestk._seeds`).
    """

    label: str
    estimator: str
    options: dict[str, object] = field(default_factory=dict)
    overrides: tuple[str, ...] = ()
    control_of: str | None = None


@dataclass(frozen=True)
class KappoAuto:
    """Per-seed KAPPO calibration from the seed's SFT policy on every training prompt: a bank
    of ``bank_n`` samples per prompt (0/1 success for ``kind="binary"``, raw rewards for
    ``"winrate"``), then ``bestk.kappo.calibrate(bank, k, beta, kind)``."""

    k: int = 4
    beta: float = 1e-3
    bank_n: int = 30
    kind: str = "binary"


def method_slug(label: str) -> str:
    """A directory name for a method label (``"grpo (A/A)"`` -> ``"grpo_A_A"``)."""
    slug = re.sub(r"[^A-Za-z0-9_.=-]+", "_", label).strip("_")
    if not slug:
        raise ValueError(f"method label {label!r} has no usable characters")
    return slug


def base_config(config: Path | None, max_steps: int | None, overrides: list[str]) -> TrainConfig:
    cfg = load_config(config) if config is not None else TrainConfig()
    if max_steps is not None:
        cfg.max_steps = max_steps
    apply_overrides(cfg, overrides)
    return cfg


def make_methods(estimators: Sequence[str | Method],
                 estimator_options: dict[str, dict[str, object]] | None,
             controls: Sequence[str]) -> list[Method]:
    methods: list[Method] = []
    for e in estimators:
        methods.append(e if isinstance(e, Method) else Method(e, e))
    labels = [m.label for m in methods]
    extra = [e for e in (estimator_options or {}) if e not in labels]
    if extra:
        raise ValueError(f"estimator_options for {', '.join(map(repr, extra))}, which "
                         f"is not among the compared estimators {labels}")
    if estimator_options:
        methods = [Method(m.label, m.estimator, {**m.options, **estimator_options[m.label]},
                          m.overrides, m.control_of) if m.label in estimator_options else m
                   for m in methods]
    for c in controls:
        base = next((m for m in methods if m.label == c), None)
        if base is None:
            raise ValueError(f"--control {c!r} is not among the compared methods {labels}")
        methods.append(Method(f"{c} (A/A)", base.estimator, dict(base.options), base.overrides,
                              control_of=c))
    labels = [m.label for m in methods]
    if len(set(labels)) != len(labels):
        raise ValueError(f"duplicate method labels {labels}")
    slugs = [method_slug(lb) for lb in labels]
    if len(set(slugs)) != len(slugs):
        raise ValueError(f"method labels {labels} map to the same directory names {slugs}")
    for m in methods:
        if m.control_of is not None and m.control_of not in labels:
            raise ValueError(f"A/A control {m.label!r} of unknown method {m.control_of!r}")
    return methods


def run_config(base: TrainConfig, m: Method, seed_index: int, seed_id: int, out: Path,
               lr: float | None = None) -> ResolvedTrainConfig:
    if m.estimator not in ESTIMATORS:
        raise ValueError(f"unknown estimator(s) {m.estimator!r}; valid: "
                         f"{', '.join(sorted(ESTIMATORS))}")
    cfg = copy.deepcopy(base)
    cfg.estimator = m.estimator
    info = estimator_info(m.estimator)
    opts = dict(info.default_options) if m.estimator != base.estimator else \
        dict(base.estimator_options)
    opts.update({k: v.format(seed=seed_index) if isinstance(v, str) and "{seed}" in v else v
                 for k, v in m.options.items()})
    n = cfg.rollout.n or ALGORITHMS[cfg.algorithm].default_n  # the group size it will have
    cfg.estimator_options = info.fit_group(opts, n)
    apply_overrides(cfg, list(m.overrides))
    before, after = config_to_dict(base), config_to_dict(cfg)
    touched = [k for k in ("model", "task", "sft") if before[k] != after[k]]
    if touched:
        raise ValueError(f"method {m.label!r}: overrides may not change {touched} (every method "
                         "starts from the same SFT weights on the same task)")
    cfg.seed = seed_id
    if m.control_of is not None:
        cfg.sampling_seed = CONTROL_SAMPLING.seed(seed_id)
    if lr is not None:
        cfg.optim.lr = float(lr)
    cfg.out = str(out)
    cal = cfg.estimator_options.get("calibration")
    if isinstance(cal, str) and not Path(cal).exists():
        # made later by this comparison's SFT jobs; the trainer checks it once it exists
        check_names(cfg)
        check_values(cfg)
        check_device(cfg.device)
        return resolve_defaults(cfg)
    return resolve_config(cfg)
