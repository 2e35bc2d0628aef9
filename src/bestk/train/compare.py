"""Matched comparison of estimators: ``bestk compare --estimators a,b,c --seeds S``.

For each seed, every method starts RL from the *same* SFT warm-up weights (computed once per
seed and saved), sees the same training prompts in the same order, draws its sampling noise
from the same per-step generators, and uses the same optimiser, rollout budget and evaluation
prompts; only the advantage computation differs — plus what a method declares for itself:

* a :class:`Method` has a label, an estimator, its options and config overrides of its own
  (``advantage_reward=success`` for GRPO on 0/1 success, ``optim.lr=1e-4``, ...);
* an A/A control (``--control grpo``) is the same method again with its ``sampling_seed``
  from the ``CONTROL_SAMPLING`` stream (:mod:`bestk._seeds`): same weights and prompts,
  independent sampling noise;
* ``lr_sweep`` picks each method's learning rate on a *validation split* (the last
  ``val_prompts`` training prompts, held out from training by the ``validation`` task wrapper;
  the test prompts are never used) by the mean over k = 1, 2, 4, ... of validation pass@k,
  on ``sweep_seeds`` seeds of their own, the grid extended past an edge (at most
  ``max_extensions`` rates) until the chosen rate is interior (:mod:`bestk.lr_sweep`); A/A
  controls take their method's rate;
* ``kappo`` calibrates ``kappo_grpo`` methods whose ``calibration`` option is ``"auto"`` from a
  bank of the seed's SFT policy on *every* training prompt, so KAPPO trains on the same prompt
  set as the others;
* runs that calibrate in-run from their ``kappo`` section (``algorithm=apo`` / ``dpo``, or
  ``kappo_grpo`` without a calibration) share one reference bank per seed (``share_bank``):
  the bank each of them would sample -- same SFT weights, prompts, M and sampling seed, so the
  same bank -- is sampled once, by the trainer's own code, into ``OUT/_bank/`` (with the
  completions when an @k-DPO run needs them) and given to every run as ``kappo.bank``; each
  run calibrates it with its own k, beta and kind. Results are those of unshared runs.

Runs execute in ``workers`` processes (each single-threaded; 1 = in this process), SFT first,
then the runs seed by seed. Every finished run writes ``OUT/<label>/seed<S>/result.json``
atomically; a rerun with the same configuration skips finished runs and continues an
interrupted one from its last checkpoint (``resume=True``), so a killed grid resumes where it
stopped. Runs and shared banks made from a seed's SFT weights are keyed by their digest too
(:func:`weights_digest`, recorded as ``run.reference_weights``), and recomputed weights drop
the seed's KAPPO calibration: where the weights come out different in the last bits (another
machine's kernels), what was made from the old ones is redone, so the runs of a seed stay
paired.
Finally ``OUT/results.json`` (``{label: {"seedS": {"start", "end", "run"}}}``),
``OUT/compare.md`` and ``OUT/compare.png``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import multiprocessing as mp
import re
import shutil
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.progress import Progress

from bestk._atomic import atomic_path, write_text_atomic
from bestk._optional import pyplot
from bestk._seeds import COMPARE_SEEDS, CONTROL_SAMPLING, KAPPO_AUTO_BANK, SWEEP_SEEDS
from bestk.estimators import ESTIMATORS, estimator_info
from bestk.figures import save_figure
from bestk.kappo.calibration import calibrate, calibration_kind
from bestk.lr_sweep import fixed_rate, sweep_until_interior
from bestk.stats import mean_ci
from bestk.train.algorithms import ALGORITHMS
from bestk.train.checkpoint import latest_checkpoint
from bestk.train.config import (
    TrainConfig,
    apply_overrides,
    config_from_dict,
    config_to_dict,
    load_config,
)
from bestk.train.evaluate import evaluate
from bestk.train.loop import Trainer
from bestk.train.reference import (
    BANK_FILE,
    CALIBRATION_FILE,
    TOKENS_FILE,
    calibrate_bank,
    calibration_values,
    save_reference,
)
from bestk.train.reference_plan import plan_reference
from bestk.train.report import curve_of
from bestk.train.rundir import read_metrics
from bestk.train.setup import load_run_policy, load_run_task, max_new_tokens, sampling_options
from bestk.train.sft import sft_weights
from bestk.train.validation import (
    check_device,
    check_names,
    check_values,
    resolve_defaults,
    validate,
)

__all__ = ["run_compare", "validation_runs", "Method", "KappoAuto", "summarize",
           "write_summary", "method_slug", "sweep_score"]


def summarize(values: np.ndarray) -> tuple[float, float]:
    """Mean and the half-width of a 95% t-interval over seeds (``nan`` for one seed):
    :func:`bestk.stats.mean_ci`."""
    return mean_ci(values)


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
    options: dict[str, Any] = field(default_factory=dict)
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


def _base_config(config: Path | None, max_steps: int | None, overrides: list[str]) -> TrainConfig:
    cfg = load_config(config) if config is not None else TrainConfig()
    if max_steps is not None:
        cfg.max_steps = max_steps
    apply_overrides(cfg, overrides)
    return cfg


def _fingerprint(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def weights_digest(path: str | Path) -> str:
    """SHA-256 (16 hex digits) of the tensors of a saved state dict: names, dtypes, shapes and
    bytes in name order, so equal weights give equal digests whatever the file's container.

    A grid keys every run and shared bank made from a seed's SFT weights by this digest, not
    only by the SFT configuration: recomputing the weights on another machine (a resumed or
    restored grid) can change them in the last float bits, and runs made from different
    weights would no longer be paired."""
    state = torch.load(path, map_location="cpu")
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().contiguous().cpu()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())  # 0-dim and empty too
    return h.hexdigest()[:16]


def _non_default(value: Any, default: Any) -> Any:
    """The parts of a nested config dict that differ from the defaults (``None`` if none).

    Run keys are fingerprints of these, so a config key that a later bestk version adds with
    a default leaves the keys of finished runs unchanged (they stay resumable)."""
    if isinstance(value, dict) and isinstance(default, dict):
        out = {}
        for k, v in value.items():
            d = _non_default(v, default[k]) if k in default else v
            if k not in default or d is not None:
                out[k] = d
        return out or None
    return None if value == default else value


def _config_key(cfg: TrainConfig, sections: Sequence[str] | None = None) -> Any:
    d = config_to_dict(resolve_defaults(cfg))
    base = config_to_dict(resolve_defaults(TrainConfig()))
    if sections is not None:
        d, base = {k: d[k] for k in sections}, {k: base[k] for k in sections}
    return _non_default(d, base)


def _sft_key(cfg: TrainConfig) -> str:
    return _fingerprint(_config_key(cfg, ("model", "task", "sft", "seed")))


def _methods(estimators: Sequence[str | Method], estimator_options: dict[str, dict] | None,
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


def _run_config(base: TrainConfig, m: Method, seed_index: int, seed_id: int, out: Path,
                lr: float | None = None) -> TrainConfig:
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
    n = resolve_defaults(cfg).rollout.n
    assert n is not None  # resolve_defaults fills rollout.n
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
    else:
        validate(cfg)
    return resolve_defaults(cfg)


# ---------------------------------------------------------------------------------------------
# jobs (module-level functions: they run in worker processes)


def _sft_job(cfg_dict: dict[str, Any], path: str, kappo: dict[str, Any] | None,
             cal_path: str | None) -> str:
    """SFT of one seed (saved atomically to ``path``) and, if asked, its KAPPO calibration."""
    cfg = config_from_dict(copy.deepcopy(cfg_dict))
    key = _sft_key(cfg)
    meta = Path(path + ".json")
    if not (Path(path).exists() and meta.exists() and json.loads(meta.read_text()) == key):
        if cal_path is not None:  # made from the weights this replaces
            Path(cal_path).unlink(missing_ok=True)
        weights = sft_weights(cfg)
        with atomic_path(path) as tmp:
            torch.save(weights, tmp)
        write_text_atomic(meta, json.dumps(key))
    if kappo is not None and cal_path is not None and not Path(cal_path).exists():
        _calibrate(cfg, path, KappoAuto(**kappo), Path(cal_path))
    return path


def _calibrate(cfg: TrainConfig, sft_path: str, kp: KappoAuto, cal_path: Path) -> None:
    """A bank of ``bank_n`` samples of the SFT policy on every training prompt -> calibration."""
    cfg = resolve_defaults(cfg)  # the sampling keys a config leaves null
    task, device = load_run_task(cfg)
    model, tokenizer = load_run_policy(cfg, task, device)
    model.load_state_dict(torch.load(sft_path))
    exs = task.train
    res = evaluate(model, tokenizer, task, exs, n=kp.bank_n, **sampling_options(cfg),
                   max_new_tokens=max_new_tokens(cfg, task), seed=KAPPO_AUTO_BANK.seed(cfg.seed))
    vals = calibration_values(task, kp.kind, res.rewards)
    bank = {int(ex["id"]): row.tolist() for ex, row in zip(exs, vals, strict=True)}
    calibrate(bank, k=kp.k, beta=kp.beta, kind=kp.kind).save(cal_path)


def _bank_key(cfg: TrainConfig) -> str:
    """What a run's in-run reference bank depends on besides the weights' own SFT key: runs of
    one seed with equal keys sample the same bank."""
    k, r = cfg.kappo, cfg.rollout
    key = {"sft": _sft_key(cfg), "seed": cfg.seed, "M": k.bank_size, "prompts": k.bank_prompts,
           "temperature": r.temperature, "top_p": r.top_p, "max_new_tokens": r.max_new_tokens}
    if k.calibration is not None:  # @k-DPO with a calibration file: a bank on its prompts
        key["calibration"] = k.calibration
    return _fingerprint(key)


def _samples_bank(cfg: TrainConfig) -> tuple[bool, bool]:
    """``(samples a reference bank in-run, keeps its completions)`` for a run config."""
    spec = ALGORITHMS[cfg.algorithm]
    samples = spec.samples_bank(cfg)
    return samples, samples and spec.bank_completions


def _bank_job(cfg_dict: dict[str, Any], sft_path: str | None, bank_dir: str, key: str,
              completions: bool) -> str:
    """Sample the reference bank of ``cfg``'s run from the seed's SFT weights once, with the
    trainer's own code (the run's :class:`~bestk.train.reference_plan.ReferencePlan`), into
    ``bank_dir`` (``bank.jsonl``, ``bank_tokens.safetensors`` when the run keeps completions,
    then ``calibration.json`` of ``cfg``'s k and beta -- its presence marks a complete bank --
    and ``bank.key``)."""

    out = Path(bank_dir)
    if (out / CALIBRATION_FILE).exists() and (out / "bank.key").exists() and \
            (out / "bank.key").read_text() == key and \
            (not completions or (out / TOKENS_FILE).exists()):
        return bank_dir
    cfg = config_from_dict(copy.deepcopy(cfg_dict))
    work = Path(bank_dir + ".work")
    for d in (out, work):
        shutil.rmtree(d, ignore_errors=True)
    cfg.out, cfg.kappo.bank = str(work), None
    validate(cfg)
    cfg = resolve_defaults(cfg)
    task, device = load_run_task(cfg)
    plan = plan_reference(cfg, ALGORITHMS[cfg.algorithm], task)
    model, tokenizer = load_run_policy(cfg, task, device)
    if sft_path is not None:
        model.load_state_dict(torch.load(sft_path))
    bank = plan.reference_bank(model, tokenizer, task, max_new_tokens(cfg, task))
    k = cfg.kappo
    if bank is None:
        raise ValueError(f"the bank job of {key} samples no reference bank")
    work.mkdir(parents=True)
    save_reference(work, calibrate_bank(bank, task, plan.kind, k.k, k.beta), bank)
    out.mkdir(parents=True)
    for name in (BANK_FILE, TOKENS_FILE, CALIBRATION_FILE):  # calibration.json last
        if (work / name).exists():
            (work / name).replace(out / name)
    write_text_atomic(out / "bank.key", key)
    shutil.rmtree(work, ignore_errors=True)
    return bank_dir


def _prompt_fingerprint(tr: Any) -> str:
    ids = sorted(int(e["id"]) for e in tr.rl_prompts)  # the prompts RL draws from
    ev = [int(e["id"]) for e in tr.eval_examples]
    return _fingerprint({"task": tr.task.name, "train": ids, "eval": ev})


def _rl_job(cfg_dict: dict[str, Any], sft_path: str | None, label: str, key: str,
            weights: str | None = None) -> dict:
    """One RL run from the seed's SFT weights (resumed from its checkpoint if it has one);
    writes ``result.json`` atomically and returns it. ``key`` identifies the run (its
    configuration and, with SFT, the digest ``weights`` of the SFT weights): a finished result
    or a checkpoint made under another key is not reused."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass
    cfg = config_from_dict(copy.deepcopy(cfg_dict))
    assert cfg.out is not None  # _run_config gives every run its directory
    run_dir = Path(cfg.out)
    result_path = run_dir / "result.json"
    if result_path.exists():
        done = json.loads(result_path.read_text())
        if done.get("key") == key:
            return done
    t0 = time.perf_counter()
    same = (run_dir / "run.key").exists() and (run_dir / "run.key").read_text() == key
    if same and latest_checkpoint(run_dir / "checkpoints") is not None:
        tr = Trainer.resume(run_dir)
    else:
        shutil.rmtree(run_dir, ignore_errors=True)
        tr = Trainer(cfg, warm_start=sft_path)
        write_text_atomic(run_dir / "run.key", key)
    tr.run(progress=False)
    if tr.interrupted:
        raise KeyboardInterrupt
    evals = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["phase"] == "eval"]
    keep = [k for k in evals[-1] if not k.endswith(("_lo", "_hi"))]
    task = tr.task
    # what the method learns from: the 0/1 success for estimators that see it, binary tasks
    # and binary KAPPO calibrations of apo / dpo
    binary = tr.binary_advantages or not task.graded or (
        not tr.spec.uses_estimator and tr.kappo_kind is not None
        and calibration_kind(tr.kappo_kind).binary)
    run = {
        "estimator": cfg.estimator if tr.spec.uses_estimator else None,
        "options": {k: (v if not hasattr(v, "kind") else f"calibration ({v.kind})")
                    for k, v in tr.estimator_options.items()},
        "reward": "success" if binary else "graded",
        "prompts": _prompt_fingerprint(tr),
        "algorithm": cfg.algorithm,
        # on-policy completions sampled during RL, plus the reference bank of a calibration
        # made in the run (an offline algorithm such as dpo samples none during RL)
        "rollouts": (cfg.max_steps * cfg.rollout.prompts_per_step * (cfg.rollout.n or 0)
                     if tr.spec.online else 0),
        "bank": tr.bank_samples,
        "bank_shared": cfg.kappo.bank is not None,
        "lr": cfg.optim.lr,
        "seed": cfg.seed,
        "sampling_seed": tr.sampling_seed,
        "reference_weights": weights,  # weights_digest of the SFT warm start (None: none)
        "wall_seconds": time.perf_counter() - t0,
    }
    out = {"label": label, "key": key, "run": run,
           "start": {k: evals[0][k] for k in keep if k in evals[0]},
           "end": {k: evals[-1][k] for k in keep}}
    write_text_atomic(result_path, json.dumps(out, indent=1))
    for ck in (run_dir / "checkpoints", run_dir / "final"):
        shutil.rmtree(ck, ignore_errors=True)  # the result is all a comparison keeps
    return out


def _execute(jobs: list[tuple], workers: int, progress: bool, what: str) -> list[Any]:
    """Run ``(fn, *args)`` jobs in order (in-process for 1 worker, else a process pool of
    single-threaded workers); results in job order."""
    if not jobs:
        return []
    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task(what, total=len(jobs))
        if workers <= 1:
            out = []
            for fn, *args in jobs:
                out.append(fn(*args))
                bar.advance(task)
            return out
        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"),
                                 initializer=_worker_init) as pool:
            futs = [pool.submit(fn, *args) for fn, *args in jobs]
            for f in futs:
                f.result()
                bar.advance(task)
            return [f.result() for f in futs]


def _worker_init() -> None:
    torch.set_num_threads(1)


# ---------------------------------------------------------------------------------------------
# the grid


def sweep_score(end: dict[str, float], n: int) -> float:
    """Mean over k = 1, 2, 4, ... <= n of pass@k (the learning-rate selection score)."""
    ks = [k for k in (2**i for i in range(20)) if k <= n]
    return float(np.mean([end[f"pass@{k}"] for k in ks]))


def _grid(methods: list[Method], base: TrainConfig, seeds: Sequence[int], out: Path,
          lrs: dict[str, float] | None, kappo: KappoAuto | None, workers: int,
          progress: bool, resume: bool, what: str, shared: Path | None = None,
          share_bank: bool = True) -> dict[str, dict[str, Any]]:
    """SFT (and KAPPO calibration) per seed under ``shared`` (default ``out``), the seeds'
    shared reference banks, then every (method, seed) run under ``out``; returns
    ``{label: {"seedS": result}}``."""
    shared = out if shared is None else shared
    sft_dir = shared / "_sft"
    sft_jobs, runs = [], []
    banks: dict[str, list[Any]] = {}  # bank dir -> [job config, sft path, key, completions]
    if not resume:
        shutil.rmtree(shared / "_bank", ignore_errors=True)
    needs_cal = kappo is not None and any(
        estimator_info(m.estimator).calibrated and m.options.get("calibration") == "auto"
        for m in methods)
    for i, sid in enumerate(seeds):
        sft_path = None
        cal_path = None
        if needs_cal:
            cal_path = str(shared / "_calibration" / f"seed{i}.json")
        if base.sft.steps > 0 or needs_cal:
            probe = copy.deepcopy(base)
            probe.seed = sid
            probe.out = str(sft_dir / f"work{i}")
            sft_path = str(sft_dir / f"seed{i}.pt")
            if not resume:
                for p in (sft_path, sft_path + ".json", cal_path):
                    if p:
                        Path(p).unlink(missing_ok=True)
            sft_jobs.append((_sft_job, config_to_dict(probe), sft_path,
                             None if kappo is None or not needs_cal else {
                                 "k": kappo.k, "beta": kappo.beta, "bank_n": kappo.bank_n,
                                 "kind": kappo.kind}, cal_path))
            if base.sft.steps == 0:
                sft_path = None
        for m in methods:
            mm = m
            if m.options.get("calibration") == "auto":
                if cal_path is None:
                    raise ValueError(f"method {m.label!r} has calibration 'auto' but no KAPPO "
                                     "calibration was configured")
                mm = Method(m.label, m.estimator, {**m.options, "calibration": cal_path},
                            m.overrides, m.control_of)
            cfg = _run_config(base, mm, i, sid, out / method_slug(m.label) / f"seed{i}",
                              None if lrs is None else lrs[m.label])
            samples, completions = _samples_bank(cfg)
            if share_bank and samples and cfg.kappo.bank is None:
                bkey = _bank_key(cfg)
                bdir = str(shared / "_bank" / f"seed{i}-{bkey}")
                job = banks.setdefault(bdir, [cfg, sft_path, bkey, completions])
                if completions and not job[3]:  # sample the completions for the dpo runs
                    banks[bdir] = [cfg, sft_path, bkey, True]
                cfg = copy.deepcopy(cfg)
                cfg.kappo.bank = bdir
            key = _fingerprint({"config": _config_key(cfg), "sft": _sft_key(cfg)})
            if not resume and cfg.out is not None:
                shutil.rmtree(cfg.out, ignore_errors=True)
            runs.append((i, m.label, cfg, sft_path, key))
    _execute(sft_jobs, workers, progress, f"{what}: SFT")
    # what was made from a seed's SFT weights is keyed by their digest too (weights_digest)
    digests = {p: weights_digest(p) for p in {sft for *_, sft, _ in runs} if p is not None}

    def with_weights(key: str, sft: str | None) -> str:
        return key if sft is None else _fingerprint({"key": key, "weights": digests[sft]})

    _execute([(_bank_job, config_to_dict(c), sft, bdir, with_weights(bkey, sft), comp)
              for bdir, (c, sft, bkey, comp) in banks.items()], workers, progress,
             f"{what}: KAPPO banks")
    results = _execute([(_rl_job, config_to_dict(cfg), sft, label, with_weights(key, sft),
                         None if sft is None else digests[sft])
                        for _, label, cfg, sft, key in runs], workers, progress, f"{what}: RL")
    grid: dict[str, dict[str, Any]] = {m.label: {} for m in methods}
    for (i, label, *_), res in zip(runs, results, strict=True):
        grid[label][f"seed{i}"] = res
    return grid


def run_compare(
    estimators: Sequence[str | Method],
    *,
    seeds: int = 3,
    out: str | Path = "runs/compare",
    config: Path | None = None,
    max_steps: int | None = None,
    overrides: list[str] | None = None,
    progress: bool = True,
    estimator_options: dict[str, dict[str, Any]] | None = None,
    controls: Sequence[str] = (),
    workers: int = 1,
    lr_sweep: Sequence[float] | None = None,
    sweep_seeds: int = 2,
    val_prompts: int = 256,
    kappo: KappoAuto | None = None,
    resume: bool = True,
    share_bank: bool = True,
    max_extensions: int = 3,
    select_by: str | None = None,
    common_lr_from: str | None = None,
) -> str:
    """Run the matched grid (module docstring); return the markdown table (also written to
    ``compare.md``).

    ``estimators`` are estimator names (each its own method) or :class:`Method` objects;
    ``estimator_options`` maps a label to options, e.g. ``{"kappo_grpo": {"calibration":
    "cal/seed{seed}.json"}}``; ``controls`` adds an A/A control of each named method;
    ``share_bank`` samples one KAPPO reference bank per seed for the runs that calibrate
    in-run (module docstring; ``False``: each run samples its own, with the same result).
    ``select_by`` names the validation metric the sweep maximises (e.g. ``"pass@1"``;
    default: the mean over k of pass@k); ``common_lr_from`` sweeps only that method and runs
    every method at its chosen rate (one rate for all, as when a paper compares its variants
    at one rate).
    """
    if not estimators:
        raise ValueError("--estimators is empty")
    if seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {seeds}")
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    if max_extensions < 0:
        raise ValueError(f"--max-extensions must be >= 0, got {max_extensions}")
    methods = _methods(estimators, estimator_options, controls)
    out = Path(out)
    base = _base_config(config, max_steps, list(overrides or []))
    test_seeds = [COMPARE_SEEDS.seed(base.seed, index=s) for s in range(seeds)]
    # validate every run configuration before any work starts
    for i, sid in enumerate(test_seeds):
        for m in methods:
            if m.options.get("calibration") != "auto":
                _run_config(base, m, i, sid, out / method_slug(m.label) / f"seed{i}")
    lrs = None
    t0 = time.time()
    if lr_sweep:
        swept = methods
        if common_lr_from is not None:
            swept = [m for m in methods if m.label == common_lr_from]
            if not swept:
                raise ValueError(f"common_lr_from {common_lr_from!r} is not one of the methods "
                                 f"{[m.label for m in methods]}")
        lrs = _sweep(swept, base, out, [float(v) for v in lr_sweep], sweep_seeds, val_prompts,
                     kappo, workers, progress, resume, share_bank, max_extensions, select_by,
                     common_lr_from)
        if common_lr_from is not None:
            lrs = {m.label: lrs[common_lr_from] for m in methods}
    elif common_lr_from is not None or select_by is not None:
        raise ValueError("common_lr_from / select_by need an lr_sweep")
    grid = _grid(methods, base, test_seeds, out, lrs, kappo, workers, progress, resume, "test",
                 share_bank=share_bank)
    results = {label: {s: {"start": r["start"], "end": r["end"], "run": r["run"]}
                       for s, r in runs.items()} for label, runs in grid.items()}
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "results.json", json.dumps(results, indent=1))
    write_text_atomic(out / "compare.json", json.dumps({
        "methods": [{"label": m.label, "estimator": m.estimator, "options": m.options,
                     "overrides": list(m.overrides), "control_of": m.control_of}
                    for m in methods],
        "seeds": seeds, "lr": lrs, "wall_seconds": time.time() - t0}, indent=1, default=str))
    return write_summary(out, results, base.eval.n)


def _validation_config(base: TrainConfig, val_prompts: int) -> TrainConfig:
    """``base`` on the validation split: its task's last ``val_prompts`` training prompts,
    held out from training (the ``validation`` task wrapper)."""
    val = copy.deepcopy(base)
    val.task.options = {"task": base.task.name, "options": dict(base.task.options),
                        "size": int(val_prompts)}
    val.task.name = "validation"
    return val


def validation_runs(
    methods: Sequence[Method],
    *,
    lr: float,
    out: str | Path,
    seeds: int = 1,
    config: Path | None = None,
    overrides: list[str] | None = None,
    val_prompts: int = 256,
    kappo: KappoAuto | None = None,
    workers: int = 1,
    progress: bool = False,
) -> dict[str, dict[str, Any]]:
    """Every method at one learning rate on the validation split, exactly as one rate of
    ``run_compare``'s sweep runs it (same split, sweep seeds, shared SFT weights and banks):
    a pilot of a testbed design before its grid, which never touches the test prompts.

    Returns ``{label: {"seedS": result}}`` (each ``OUT/lr<lr>/<label>/seedS/result.json``;
    finished runs are reused, interrupted ones resumed)."""
    if not methods:
        raise ValueError("validation_runs needs at least one method")
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    base = _base_config(config, None, list(overrides or []))
    val = _validation_config(base, val_prompts)
    out = Path(out)
    sweep_seeds = [SWEEP_SEEDS.seed(base.seed, index=j) for j in range(seeds)]
    return _grid(list(methods), val, sweep_seeds, out / f"lr{lr:g}",
                 {m.label: float(lr) for m in methods}, kappo, workers, progress, True,
                 f"validation lr={lr:g}", shared=out)


def _sweep(methods: list[Method], base: TrainConfig, out: Path, grid: list[float],
           sweep_seeds: int, val_prompts: int, kappo: KappoAuto | None, workers: int,
           progress: bool, resume: bool, share_bank: bool = True,
           max_extensions: int = 3, select_by: str | None = None,
           common_lr_from: str | None = None) -> dict[str, float]:
    """Each method's learning rate from ``grid`` on the validation split, the grid extended
    past an edge until the chosen rate is interior (module docstring,
    :mod:`bestk.lr_sweep`); writes ``OUT/sweep/selection.json``."""
    if sweep_seeds < 1:
        raise ValueError(f"sweep_seeds must be >= 1, got {sweep_seeds}")
    val = _validation_config(base, val_prompts)
    tuned = [m for m in methods if m.control_of is None]
    sdir = out / "sweep"
    if not resume:
        shutil.rmtree(sdir, ignore_errors=True)
    seeds = [SWEEP_SEEDS.seed(base.seed, index=j) for j in range(sweep_seeds)]
    by_label = {m.label: m for m in tuned}

    def score(want: Any) -> dict[str, dict[float, float]]:
        by_rate: dict[float, list[str]] = {}
        for lb, rates in want.items():
            for lr in rates:
                by_rate.setdefault(float(lr), []).append(lb)
        got: dict[str, dict[float, float]] = {}
        for lr, labels in sorted(by_rate.items()):
            ms = [by_label[lb] for lb in labels]
            res = _grid(ms, val, seeds, sdir / f"lr{lr:g}", {m.label: lr for m in ms}, kappo,
                        workers, progress, True, f"sweep lr={lr:g}", shared=sdir,
                        share_bank=share_bank)
            for m in ms:
                ends = [r["end"] for r in res[m.label].values()]
                if select_by is not None and any(select_by not in e for e in ends):
                    raise ValueError(f"select_by {select_by!r} is not a validation metric; "
                                     f"valid: {sorted(ends[0])}")
                vals = [e[select_by] if select_by is not None else
                        sweep_score(e, base.eval.n) for e in ends]
                got.setdefault(m.label, {})[lr] = float(np.mean(vals))
        return got

    if len(grid) == 1:
        got = score({lb: grid for lb in by_label})  # one batch of runs, as for a longer grid
        sweep = fixed_rate(list(by_label), grid[0], {lb: got[lb][grid[0]] for lb in by_label})
    else:
        sweep = sweep_until_interior(score, list(by_label), grid,
                                     max_extensions=max_extensions)
    selected = dict(sweep["selected"])
    for m in methods:
        if m.control_of is not None:
            selected[m.label] = selected[m.control_of]
    write_text_atomic(sdir / "selection.json", json.dumps(
        {**sweep, "seeds": sweep_seeds, "val_prompts": val_prompts,
         "select_by": (f"validation {select_by}" if select_by is not None else
                       "mean over k = 1, 2, 4, ... of validation pass@k"),
         "common_lr_from": common_lr_from, "selected": selected}, indent=1))
    return selected


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


def _plot(path: Path, results: dict[str, dict[str, Any]]) -> None:
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
