"""The phases of a run as public steps, for what runs them outside a
:class:`~bestk.train.trainer.Trainer`: ``bestk compare`` checks every run of its grid before
any work, shares one SFT warm-up, KAPPO calibration and reference bank per seed between its
methods' runs, and keeps a summary of each finished run.

Each step is the Trainer's own code or the same functions it calls, so that what a step makes
is what the run would have made itself:

* :func:`check_run`: every check ``Trainer(cfg)`` makes before it touches the run directory
  (a :class:`~bestk.train.setup.RunSetup`);
* :func:`sft_weights`, :func:`save_weights`: the SFT warm-up without a run directory, and its
  weights written atomically (:func:`load_weights` reads them back);
* :func:`sampled_calibration`: a KAPPO calibration from samples of every training prompt;
* :func:`samples_bank`, :func:`reference_bank`, :func:`bank_complete`: whether a run samples
  a reference bank in-run, that bank sampled once into a directory that runs read through
  ``kappo.bank``, and whether a directory holds a complete one;
* :func:`resumable`: whether a run directory holds a checkpoint to continue from;
* :func:`run_summary` (:meth:`Trainer.summary <bestk.train.trainer.Trainer.summary>`): what a
  finished run was and measured (:class:`RunSummary`).

The long steps stop at their next safe point when ``should_stop()`` says so, raising
:class:`Stopped`; :class:`StopRequest` is the Trainer's own stop (``tr.stop``).
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import torch

from bestk._atomic import atomic_path
from bestk._seeds import KAPPO_AUTO_BANK
from bestk.kappo import Calibration
from bestk.kappo.calibration import calibrate, calibration_kind
from bestk.tasks import Task
from bestk.train.algorithms import ALGORITHMS
from bestk.train.config import ResolvedTrainConfig, TrainConfig
from bestk.train.reference.bank import (
    BANK_FILE,
    CALIBRATION_FILE,
    TOKENS_FILE,
    calibrate_bank,
    calibration_values,
    save_reference,
)
from bestk.train.reference.plan import plan_reference
from bestk.train.rollout.engine import ENGINES
from bestk.train.rollout.evaluate import evaluate
from bestk.train.rollout.settings import sampling_options
from bestk.train.run.directory import read_metrics
from bestk.train.runtime.files import last_run_checkpoint, load_weights
from bestk.train.runtime.stop import Stopped, StopRequest
from bestk.train.setup import RunSetup, load_run_policy, load_run_task, max_new_tokens
from bestk.train.sft import sft_warmup
from bestk.train.validation import resolve_config

if TYPE_CHECKING:  # pragma: no cover - annotations only (transformers is optional)
    from transformers import PreTrainedTokenizerBase

    from bestk.train.model.policy import Policy

__all__ = ["RunSetup", "check_run", "sft_weights", "save_weights", "load_weights",
           "sampled_calibration", "samples_bank", "bank_complete", "reference_bank",
           "resumable", "RunSummary", "run_summary", "Stopped", "StopRequest"]


def check_run(cfg: TrainConfig, *, task: Task | None = None) -> RunSetup:
    """Every check ``Trainer(cfg)`` makes before it touches the run directory or builds a model
    -- the config's values, the task's options and sizes, the KAPPO plan, the estimator's
    options and reward domain, the prompt pool -- and nothing else: nothing is written.
    Returns the run's :class:`~bestk.train.setup.RunSetup` (its resolved config, task, plan
    and prompts). ``task``: the run's task, already loaded (``bestk compare`` checks every run
    of its grid this way before any work, loading each seed's task once: the first run's
    ``setup.task``)."""
    return RunSetup(cfg, task=task)


def sft_weights(cfg: TrainConfig, *, should_stop: Callable[[], bool] | None = None
                ) -> dict[str, torch.Tensor]:
    """The policy's weights after ``cfg``'s SFT warm-up, with no run directory: the run's task
    and fresh policy (:func:`~bestk.train.setup.load_run_task`,
    :func:`~bestk.train.setup.load_run_policy`), :func:`~bestk.train.sft.sft_warmup` (its log
    dropped; stopped by ``should_stop``, raising :class:`Stopped`), then a detached copy of
    the state dict: the weights a run of ``cfg`` has when its RL starts. ``cfg`` is checked and
    resolved first (:func:`~bestk.train.validation.resolve_config`; a resolved config only
    checked)."""
    cfg = resolve_config(cfg)
    task, device = load_run_task(cfg)
    model, tokenizer = load_run_policy(cfg, task, device)
    sft_warmup(model, tokenizer, task, cfg, device, log=lambda record: None,
               should_stop=should_stop)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def save_weights(weights: Mapping[str, torch.Tensor], path: str | Path) -> None:
    """``torch.save`` of ``weights`` (a state dict: :func:`sft_weights`) into ``path``
    atomically (:func:`bestk._atomic.atomic_path`: a crash leaves the old file or none, never a
    torn one); :func:`load_weights` reads it back (a run's ``warm_start`` takes the path)."""
    with atomic_path(path) as tmp:
        torch.save(weights, tmp)


def sampled_calibration(cfg: ResolvedTrainConfig, *, k: int, beta: float, kind: str,
                        samples: int, weights: str | Path | None = None,
                        should_stop: Callable[[], bool] | None = None) -> Calibration:
    """A KAPPO calibration (:func:`bestk.kappo.calibrate` with ``k``, ``beta`` and ``kind``) of
    the policy a run of ``cfg`` loads (``weights``' state dict over it, when given: SFT
    weights), from ``samples`` completions of every training prompt drawn by the run's rollout
    engine with its sampling settings (noise ``KAPPO_AUTO_BANK.seed(cfg.seed)``; the
    calibration reads rewards only, so the entropy of one sample per prompt is measured).
    ``should_stop`` is asked between batches: :class:`Stopped` when it says so."""
    task, device = load_run_task(cfg)
    model, tokenizer = _policy(cfg, task, device, weights)
    exs = task.train
    new_tokens = max_new_tokens(cfg, task)
    backend = ENGINES[cfg.rollout.engine].make(model, tokenizer, cfg, new_tokens)
    try:
        res = evaluate(backend.engine(sampling_options(cfg)), task, exs, n=samples,
                       max_new_tokens=new_tokens, seed=KAPPO_AUTO_BANK.seed(cfg.seed),
                       should_stop=should_stop, entropy_samples=1)
    finally:
        backend.close()
    vals = calibration_values(task, kind, res.rewards)
    bank = {int(ex["id"]): row.tolist() for ex, row in zip(exs, vals, strict=True)}
    return calibrate(bank, k=k, beta=beta, kind=kind)


def _policy(cfg: ResolvedTrainConfig, task: Task, device: torch.device,
            weights: str | Path | None) -> tuple[Policy, PreTrainedTokenizerBase]:
    """The policy a run of ``cfg`` loads (:func:`~bestk.train.setup.load_run_policy`), with
    the state dict of the file ``weights`` over it when given (SFT weights)."""
    model, tokenizer = load_run_policy(cfg, task, device)
    if weights is not None:
        model.load_state_dict(load_weights(weights))
    return model, tokenizer


def samples_bank(cfg: ResolvedTrainConfig) -> tuple[bool, bool]:
    """``(samples a reference bank in-run, keeps its completions)`` for a run config (its
    algorithm's :meth:`~bestk.train.algorithms.AlgorithmSpec.samples_bank` and
    ``bank_completions``)."""
    spec = ALGORITHMS[cfg.algorithm]
    samples = spec.samples_bank(cfg)
    return samples, samples and spec.bank_completions


def bank_complete(out: str | Path, completions: bool) -> bool:
    """Whether the directory ``out`` holds a complete reference bank (:func:`reference_bank`):
    its ``calibration.json`` (written last), and ``bank_tokens.safetensors`` when the runs
    that read it need the ``completions``."""
    out = Path(out)
    return (out / CALIBRATION_FILE).exists() and (not completions
                                                  or (out / TOKENS_FILE).exists())


def reference_bank(cfg: ResolvedTrainConfig, out: str | Path, *,
                   weights: str | Path | None = None,
                   should_stop: Callable[[], bool] | None = None) -> Path:
    """Sample the reference bank a run of ``cfg`` would sample in-run, with the trainer's own
    code (the run's :class:`~bestk.train.reference.plan.ReferencePlan`), from the policy ``cfg``
    loads (``weights``' state dict over it: the SFT weights the run starts from), into the
    directory ``out``, replaced: ``bank.jsonl``, ``bank_tokens.safetensors`` when the run keeps
    completions, then ``calibration.json`` of ``cfg``'s kind, k and beta
    (:func:`~bestk.train.reference.bank.calibrate_bank`; its presence marks a complete bank,
    :func:`bank_complete`). Runs read it with ``kappo.bank: OUT`` (calibrated with their own k,
    beta, kind). The files are written in ``OUT.work`` and moved in. ``ValueError`` when a run
    of ``cfg`` samples no bank; ``should_stop``: :class:`Stopped` between batches."""
    out = Path(out)
    work = Path(str(out) + ".work")
    for d in (out, work):
        shutil.rmtree(d, ignore_errors=True)
    cfg = copy.deepcopy(cfg)
    cfg.out, cfg.kappo.bank = str(work), None
    cfg = resolve_config(cfg)  # checked again after the changes (not resolved again)
    task, device = load_run_task(cfg)
    plan = plan_reference(cfg, ALGORITHMS[cfg.algorithm], task)
    model, tokenizer = _policy(cfg, task, device, weights)
    bank = plan.reference_bank(model, tokenizer, task, max_new_tokens(cfg, task),
                               should_stop=should_stop)
    if bank is None:
        raise ValueError(f"a run of algorithm {cfg.algorithm!r} with this config samples no "
                         f"reference bank (for {str(out)!r})")
    k = cfg.kappo
    work.mkdir(parents=True)
    save_reference(work, calibrate_bank(bank, task, plan.kind, k.k, k.beta), bank)
    out.mkdir(parents=True)
    for name in (BANK_FILE, TOKENS_FILE, CALIBRATION_FILE):  # calibration.json last
        if (work / name).exists():
            (work / name).replace(out / name)
    shutil.rmtree(work, ignore_errors=True)
    return out


def resumable(out: str | Path) -> bool:
    """Whether the run directory ``out`` holds a checkpoint of a run to continue from
    (``out/checkpoints``: :func:`~bestk.train.runtime.files.last_run_checkpoint`)."""
    return last_run_checkpoint(Path(out) / "checkpoints") is not None


class RunSummary(TypedDict):
    """What a run was and measured (:func:`run_summary`), in this order: the estimator
    (``None`` for an algorithm that uses none) and its options (a calibration shown as
    ``"calibration (KIND)"``), the reward the method learns from (``"success"``: the 0/1
    success, else ``"graded"``), the task, the ids of the training prompts RL drew from
    (sorted) and of the held-out prompts it evaluated on, the algorithm, its rollout budget
    (completions sampled during RL: 0 for an offline one) and its reference bank's samples,
    whether that bank was shared (``kappo.bank``), the learning rate, the seeds, and the
    ``eval`` and ``train`` records of ``metrics.jsonl``."""

    estimator: str | None
    options: dict[str, object]
    reward: str
    task: str
    train_prompt_ids: list[int]
    eval_prompt_ids: list[int]
    algorithm: str
    rollouts: int
    bank: int
    bank_shared: bool
    lr: float
    seed: int
    sampling_seed: int
    evaluations: list[dict[str, Any]]
    train: list[dict[str, Any]]


def run_summary(setup: RunSetup, options: Mapping[str, object], binary: bool) -> RunSummary:
    """The :class:`RunSummary` of the run of ``setup`` (read from ``setup.out/metrics.jsonl``):
    ``options`` are its estimator's (a calibration loaded) and ``binary`` whether the
    estimator sees the 0/1 success (:meth:`~bestk.train.trainer.Trainer.summary` gives both,
    from its algorithm). The reward is ``"success"`` when ``binary``, when the task is binary,
    or for an algorithm without an estimator when its KAPPO calibration is binary."""
    cfg, spec, task = setup.cfg, setup.spec, setup.task
    kind = setup.kappo_kind
    success = binary or not task.graded or (
        not spec.uses_estimator and kind is not None and calibration_kind(kind).binary)
    records = read_metrics(setup.out / "metrics.jsonl")
    return {
        "estimator": cfg.estimator if spec.uses_estimator else None,
        "options": {k: (v if not hasattr(v, "kind") else f"calibration ({v.kind})")
                    for k, v in options.items()},
        "reward": "success" if success else "graded",
        "task": task.name,
        "train_prompt_ids": sorted(int(e["id"]) for e in setup.rl_prompts),
        "eval_prompt_ids": [int(e["id"]) for e in setup.eval_examples],
        "algorithm": cfg.algorithm,
        # on-policy completions sampled during RL (an offline algorithm such as dpo samples
        # none during RL); the reference bank of a calibration made in the run besides
        "rollouts": (cfg.max_steps * cfg.rollout.prompts_per_step * (cfg.rollout.n or 0)
                     if spec.online else 0),
        "bank": setup.bank_samples,
        "bank_shared": cfg.kappo.bank is not None,
        "lr": cfg.optim.lr,
        "seed": cfg.seed,
        "sampling_seed": setup.sampling_seed,
        "evaluations": [r for r in records if r["phase"] == "eval"],
        "train": [r for r in records if r["phase"] == "train"],
    }
