"""The checks of a run's config that need the registries, the task, the model or a bank,
and the one resolution of a command that runs them.

The config room (:mod:`bestk.train.config`) holds the schema (types, ranges, the rules
between fields, checked by pydantic whenever a config is built, read or assigned to), the
resolution's rules (:func:`bestk.train.config.resolve.fill_defaults`) and the checks against
the machine (:mod:`bestk.train.config.machine`: paths, device, threads, memory bounds). What
needs the rooms above it is here: the algorithm (``ALGORITHMS``) and estimator
(``ESTIMATORS``) names, the estimator's and the task's option names, what the algorithm
accepts (its spec's ``check``), the ``kappo`` section's use and calibration file,
``report_to`` (``bestk.train.run.reporters``), the batches a run holds (from its algorithm),
the optional packages, a local model directory, and a dry run of the estimator on a dummy
batch (:func:`check_resolved` runs them all).

:func:`resolve_config` is the one resolution of a command: the names checked, the fields a
config leaves to the algorithm (``rollout.n``, ``out``; from its :class:`~bestk.train.
algorithms.AlgorithmSpec`) and to the model (the sampling keys; its ``generation_config``,
read once) filled in by :func:`resolve_defaults`, then every check, giving the
:class:`~bestk.train.config.ResolvedTrainConfig` the trainer, the algorithms and evaluation
take.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from bestk._optional import require
from bestk._options import check_option_names
from bestk.estimators import (
    ESTIMATORS,
    advantages,
    check_estimator_options,
    estimator_info,
    resolve_options,
)
from bestk.kappo.calibration import calibrate, calibration_kind
from bestk.tasks import Task, task_options
from bestk.train.algorithms import ALGORITHMS
from bestk.train.config import ResolvedTrainConfig, TrainConfig
from bestk.train.config.io import check_schema
from bestk.train.config.machine import (
    COMPLETION_BYTES,
    REWARD_BYTES,
    Batch,
    check_device,
    check_machine,
    check_paths,
    refuse_batches,
)
from bestk.train.config.resolve import ModelFacts, fill_defaults
from bestk.train.model.source import (
    GGUF_MODULES,
    check_model_source,
    is_gguf,
    model_generation_config,
    vocab_size,
)
from bestk.train.reference.bank import calibration_prompt_ids
from bestk.train.reference.plan import load_kappo_file
from bestk.train.rollout.engine import ENGINES
from bestk.train.run.reporters import INTEGRATIONS, resolve_report_to

__all__ = [
    "validate",
    "resolve_config",
    "resolve_defaults",
    "check_resolved",
    "check_names",
    "check_values",
    "check_algorithm",
    "check_batch_memory",
    "check_task_memory",
    "check_group_size",
    "check_reward_domain",
    "check_dependencies",
    "check_kappo_file",
    "check_estimator_runs",
]


def resolve_defaults(cfg: TrainConfig) -> ResolvedTrainConfig:
    """The :class:`~bestk.train.config.ResolvedTrainConfig` of ``cfg``: its ``None`` fields
    filled in by :func:`bestk.train.config.resolve.fill_defaults` from its algorithm's
    :class:`~bestk.train.algorithms.AlgorithmSpec` (``rollout.n``, ``out``) and what
    ``model.path``'s files say (its ``generation_config`` and vocabulary, read here once:
    :func:`~bestk.train.model.source.model_generation_config`,
    :func:`~bestk.train.model.source.vocab_size`). ``cfg`` itself is not changed.

    This is *the* resolution of a command: :func:`resolve_config` calls it once and
    everything downstream takes its result. An unknown algorithm is refused
    (:func:`check_names`)."""
    spec = ALGORITHMS.get(cfg.algorithm)
    if spec is None:
        check_names(cfg)  # raises: an unknown algorithm has no defaults to fill in
    assert spec is not None
    return fill_defaults(cfg, spec, _model_facts)


def _model_facts(path: str | None) -> ModelFacts:
    """What the resolution reads of ``model.path`` (:class:`~bestk.train.config.resolve.
    ModelFacts`)."""
    return ModelFacts(model_generation_config(path), vocab_size(path))


def resolve_config(cfg: TrainConfig) -> ResolvedTrainConfig:
    """Check every value of ``cfg`` and fill in its defaults, once: the config a command runs
    with. A :class:`~bestk.train.config.ResolvedTrainConfig` is checked again (it may have been
    changed since) and copied, not resolved again; any other config is checked by name
    (:func:`check_names`), resolved (:func:`resolve_defaults`) and checked
    (:func:`check_resolved`). ``ValueError`` naming the offending key."""
    if isinstance(cfg, ResolvedTrainConfig):
        check_names(cfg)
        check_resolved(cfg)
        return cfg.model_copy(deep=True)
    check_names(cfg)
    resolved = resolve_defaults(cfg)
    check_resolved(resolved)
    return resolved


def validate(cfg: TrainConfig) -> None:
    """Check every value before any work; raise ``ValueError`` naming the offending key
    (:func:`resolve_config`, its result dropped: for callers that only check a config; a
    command that runs one uses :func:`resolve_config` and keeps the result)."""
    resolve_config(cfg)


def check_resolved(cfg: ResolvedTrainConfig) -> None:
    """The checks of a resolved config, in order: the schema and ``report_to``
    (:func:`check_values`), the run directory's and model's paths (:func:`check_paths`), what
    the algorithm accepts (:func:`check_algorithm`), the device (:func:`check_device`), what
    the machine can hold (:func:`check_machine`: threads, the tiny model's size;
    :func:`check_batch_memory`: every batch a run holds at once), the optional packages the
    config needs (:func:`check_dependencies`), a local model directory or GGUF file
    (:func:`bestk.train.model.source.check_model_source`), a KAPPO calibration file
    (:func:`check_kappo_file`), and, for an algorithm that uses the estimator, a group size it
    learns from (:func:`check_group_size`) and the estimator options' *values*, by running the
    estimator on a dummy batch shaped like a training batch (:func:`check_estimator_runs`; a
    ``calibration`` path is loaded). Nothing here trains,
    builds a model or writes a file."""
    check_values(cfg)
    check_paths(cfg)
    check_algorithm(cfg)
    check_device(cfg.device)
    check_machine(cfg)
    check_batch_memory(cfg)
    check_dependencies(cfg)
    if cfg.model.path is not None:
        check_model_source(cfg.model.path)
    check_kappo_file(cfg)
    if ALGORITHMS[cfg.algorithm].uses_estimator:
        check_group_size(cfg)
        check_estimator_runs(cfg)


def check_names(cfg: TrainConfig) -> None:
    """The algorithm and estimator are registered; task option names and, for an algorithm
    that uses the estimator, the estimator's option names are known (a ``calibration`` the
    ``kappo`` section supplies counts as given)."""
    if cfg.algorithm not in ALGORITHMS:
        raise ValueError(
            f"unknown algorithm {cfg.algorithm!r}; valid: {', '.join(ALGORITHMS)}"
        )
    if cfg.estimator not in ESTIMATORS:
        raise ValueError(
            f"unknown estimator {cfg.estimator!r}; valid: {', '.join(sorted(ESTIMATORS))}"
        )
    for key, engine in (("rollout.engine", cfg.rollout.engine), ("eval.engine", cfg.eval.engine)):
        if engine not in ENGINES:
            raise ValueError(f"config key {key!r}: unknown rollout engine {engine!r}; valid: "
                             f"{', '.join(ENGINES)}")
    if ALGORITHMS[cfg.algorithm].uses_estimator:  # the others refuse estimator_options
        given = dict(cfg.estimator_options)
        if estimator_info(cfg.estimator).calibrated:
            given.setdefault("calibration", "kappo section")  # calibrated from the kappo section
        check_estimator_options(cfg.estimator, given)
    check_option_names("task", cfg.task.name, cfg.task.options, task_options(cfg.task.name))


def check_values(cfg: TrainConfig) -> None:
    """The schema's rules on the whole config (:func:`bestk.train.config.io.check_schema`) and
    the ``report_to`` integrations' names."""
    check_schema(cfg)
    resolve_report_to(cfg.report_to)


def check_algorithm(cfg: ResolvedTrainConfig) -> None:
    """What the algorithm accepts (its own ``check``), and the ``kappo`` section's use: a
    ``kappo.calibration`` file for a run that calibrates nothing, or next to an
    ``estimator_options.calibration``, is refused."""
    spec = ALGORITHMS[cfg.algorithm]
    spec.check(cfg)
    if cfg.kappo.calibration is not None:
        if "calibration" in cfg.estimator_options:
            raise ValueError(
                "give the calibration once: estimator_options.calibration or kappo.calibration"
            )
        if not spec.calibrated(cfg):
            raise ValueError(
                f"config key 'kappo.calibration' is set, but algorithm {cfg.algorithm!r} with "
                f"estimator {cfg.estimator!r} uses no calibration (apo, dpo, or pg with an "
                "estimator that needs one, such as kappo_grpo)"
            )
    if cfg.kappo.bank is not None and not spec.samples_bank(cfg):
        raise ValueError(
            "config key 'kappo.bank' is set, but the run samples no reference bank (it needs a "
            "calibration from the kappo section, or @k-DPO's pairs)"
        )
    if (spec.calibrated(cfg) and spec.binary_only and cfg.kappo.kind != "auto"
            and not calibration_kind(cfg.kappo.kind).binary):
        raise ValueError(
            f"algorithm {cfg.algorithm!r} needs a binary calibration (pairs of a success and a "
            "failure); config key 'kappo.kind' is 'winrate'"
        )


def check_kappo_file(cfg: ResolvedTrainConfig) -> None:
    """A ``kappo.calibration`` file loads, and its k, beta and kind match the ``kappo``
    section (its prompt ids are checked against the task when the trainer loads it)."""
    if cfg.kappo.calibration is None:
        return
    load_kappo_file(cfg, binary_only=ALGORITHMS[cfg.algorithm].binary_only)


def check_batch_memory(cfg: ResolvedTrainConfig) -> None:
    """A one-line ``ValueError`` (:func:`~bestk.train.config.machine.refuse_batches`) when a batch a
    run of ``cfg`` will hold cannot fit in the machine's memory (the device's and the CPU's) at
    :data:`COMPLETION_BYTES` an item, a lower bound, whatever the task: the completions of one
    RL step (``rollout.prompts_per_step x rollout.n``; at least the ``2 x rollout.n`` rewards
    of the estimator's dry run), of one @k-DPO step (``2 x kappo.dpo_pairs`` bank completions a
    prompt, at least one prompt), of one evaluation (``eval.n`` for each held-out prompt, at
    least one), the examples of one SFT step (``sft.batch_size``, drawn with replacement) and
    one bank prompt's ``kappo.bank_size`` reference samples (sampled at once).
    ``rollout.n=1000000000`` or ``sft.batch_size=1000000000`` is refused at once, not after
    minutes of validation and a kill for memory. What depends on the task's sizes (the held-out
    prompts that exist, the bank's prompts) is bounded once it is loaded
    (:func:`check_task_memory`). A batch this allows may still not fit (the model's activations
    and KV cache come on top)."""
    r, e, k, s = cfg.rollout, cfg.eval, cfg.kappo, cfg.sft
    spec = ALGORITHMS[cfg.algorithm]
    batches: list[Batch] = []
    if spec.online:
        batches.append((
            max(r.prompts_per_step, 2) * r.n, COMPLETION_BYTES,
            f"rollout.n={r.n} with rollout.prompts_per_step={r.prompts_per_step}: "
            f"{r.prompts_per_step * r.n:.3g} completions a step",
            "rollout.n or rollout.prompts_per_step"))
    elif spec.bank_completions:  # trains on pairs of the bank's completions (@k-DPO)
        batches.append((2 * k.dpo_pairs, COMPLETION_BYTES,
                        f"kappo.dpo_pairs={k.dpo_pairs}: {2 * k.dpo_pairs:.3g} bank completions "
                        "a step for each prompt", "kappo.dpo_pairs"))
    batches.append((
        e.n, COMPLETION_BYTES,
        f"eval.n={e.n}: {e.n:.3g} completions an evaluation of one held-out prompt", "eval.n"))
    if s.steps > 0:
        batches.append((s.batch_size, COMPLETION_BYTES,
                        f"sft.batch_size={s.batch_size}: {s.batch_size:.3g} examples an SFT step",
                        "sft.batch_size"))
    if spec.samples_bank(cfg) and k.bank is None:
        batches.append((k.bank_size, COMPLETION_BYTES,
                        f"kappo.bank_size={k.bank_size}: {k.bank_size:.3g} reference samples of "
                        "a bank prompt (sampled together)", "kappo.bank_size"))
    refuse_batches(cfg.device, batches)


def check_task_memory(cfg: ResolvedTrainConfig, task: Task, bank_prompts: int = 0) -> None:
    """What :func:`check_batch_memory` bounds once the task is loaded, on the prompts that
    will exist, before any model is built or file written: the completions of one evaluation,
    ``eval.n`` for each of ``min(eval.num_prompts, the task's held-out prompts)`` prompts
    (``eval.num_prompts=1000000000`` of a task with 4 is 4 prompts), and the reference bank
    the run samples, ``kappo.bank_size`` for each of its ``bank_prompts`` prompts (a
    :data:`REWARD_BYTES` reward each; :data:`COMPLETION_BYTES` when the algorithm keeps the
    completions). One-line ``ValueError`` (:func:`~bestk.train.config.machine.refuse_batches`)."""
    e, k = cfg.eval, cfg.kappo
    prompts = min(e.num_prompts or len(task.eval), len(task.eval))
    asked = "null" if e.num_prompts is None else e.num_prompts
    batches: list[Batch] = [(
        e.n * prompts, COMPLETION_BYTES,
        f"eval.n={e.n} with eval.num_prompts={asked} ({prompts} of the {len(task.eval)} "
        f"held-out prompts of task {task.name!r}): {e.n * prompts:.3g} completions an "
        "evaluation", "eval.n or eval.num_prompts")]
    if bank_prompts and k.bank is None:
        each = COMPLETION_BYTES if ALGORITHMS[cfg.algorithm].bank_completions else REWARD_BYTES
        batches.append((
            bank_prompts * k.bank_size, each,
            f"kappo.bank_size={k.bank_size} with kappo.bank_prompts="
            f"{'null' if k.bank_prompts is None else k.bank_prompts} ({bank_prompts} prompts): "
            f"{bank_prompts * k.bank_size:.3g} reference samples",
            "kappo.bank_size or kappo.bank_prompts"))
    refuse_batches(cfg.device, batches)


def check_group_size(cfg: ResolvedTrainConfig) -> None:
    """``rollout.n`` is at least the smallest group the estimator learns from
    (:meth:`bestk.estimators.EstimatorInfo.min_group_size` with ``estimator_options``): a
    group estimator (GRPO, RLOO, the @k ones) gives a group of one sample an advantage of 0,
    so ``rollout.n=1`` would train nothing, silently. One-line ``ValueError`` naming both."""
    options = {k: v for k, v in cfg.estimator_options.items() if k != "calibration"}
    need = estimator_info(cfg.estimator).min_group_size(options)
    if cfg.rollout.n < need:
        given = f" with {options}" if options else ""
        raise ValueError(
            f"config key 'rollout.n' is {cfg.rollout.n}, but estimator {cfg.estimator!r}{given} "
            f"needs groups of at least {need} completions (every advantage of a smaller group "
            f"is 0: nothing would train); set rollout.n >= {need}, or use an estimator that "
            "learns from single samples (e.g. reinforce)"
        )


def check_reward_domain(cfg: ResolvedTrainConfig, task: Task, calibration_kind: str | None
                        ) -> None:
    """An estimator that needs 0/1 rewards (``maxrl``; ``kappo_grpo`` with a binary
    calibration of kind ``calibration_kind``) and sees the raw reward
    (``advantage_reward: raw``) of a graded task would stop at the first graded reward, after
    the SFT: refused when the task is loaded, before any work."""
    if not ALGORITHMS[cfg.algorithm].uses_estimator or cfg.advantage_reward != "raw":
        return
    if task.graded and estimator_info(cfg.estimator).binary_rewards(calibration_kind):
        raise ValueError(
            f"estimator {cfg.estimator!r} needs 0/1 rewards, but task {task.name!r} is graded "
            "and advantage_reward is 'raw'; use advantage_reward=success (or auto: the 0/1 "
            "success), or an estimator for any reward (e.g. argmaxrl, grpo)"
        )


def check_dependencies(cfg: ResolvedTrainConfig) -> None:
    """The optional packages this config needs are installed (else
    :class:`bestk._optional.MissingDependency`, an ``ImportError`` naming the extra): the
    ``train`` extra's transformers, tokenizers, safetensors and matplotlib, PEFT for
    ``model.lora``, the ``gguf`` extra (gguf, accelerate) for a ``.gguf`` ``model.path``, and
    each integration of ``report_to``, the package of each rollout engine (vLLM). A task
    checks its own (the ``dataset`` task needs ``datasets``, a reward its scorer) when it
    loads."""
    for module in ("transformers", "tokenizers", "safetensors", "matplotlib"):
        require(module, extra="train")
    if cfg.model.lora.r > 0:
        require("peft", extra="train")
    if is_gguf(cfg.model.path):
        for module in GGUF_MODULES:
            require(module, extra="gguf", who="bestk train")
    for name in resolve_report_to(cfg.report_to):
        module, extra = INTEGRATIONS[name]
        require(module, extra=extra)
    for engine in dict.fromkeys((cfg.rollout.engine, cfg.eval.engine)):
        ENGINES[engine].check_installed(engine, cfg.device)


@contextmanager
def _global_rng_preserved() -> Iterator[None]:
    """Leave the python, numpy and torch (CPU) global RNG states as they were."""
    py, npy = random.getstate(), np.random.get_state()  # noqa: NPY002
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            random.setstate(py)
            np.random.set_state(npy)  # noqa: NPY002


def check_estimator_runs(cfg: ResolvedTrainConfig, options: dict[str, Any] | None = None
                         ) -> None:
    """Run ``bestk.advantages`` on a dummy batch of 2 groups of ``rollout.n`` 0/1 rewards with
    the configured options (path-valued ones loaded, :func:`bestk.estimators.resolve_options`,
    unless given), so that the estimator's own checks reject bad option values before any
    work. An estimator the ``kappo`` section calibrates gets a dummy calibration of the
    configured k, beta and kind. The global RNG states are left untouched."""
    opts = resolve_options(cfg.estimator, cfg.estimator_options) if options is None else options
    labels: list[int | str] = [0, 1]
    if "calibration" not in opts and estimator_info(cfg.estimator).calibrated:
        kind = {"auto": "binary"}.get(cfg.kappo.kind, cfg.kappo.kind)  # auto: a binary dummy
        opts = {**opts, "calibration": calibrate(
            {0: [0.0, 1.0], 1: [0.0, 1.0]}, k=cfg.kappo.k, beta=cfg.kappo.beta, kind=kind)}
    cal = opts.get("calibration")
    if hasattr(cal, "prompt_ids"):
        assert cal is not None  # a calibration: None has no prompt_ids
        known = calibration_prompt_ids(cal)
        labels = [known[0], known[min(1, len(known) - 1)]]
    n = cfg.rollout.n
    rewards = torch.tensor([float((i + g) % 2) for g in range(2) for i in range(n)],
                           dtype=torch.float64)
    group = [labels[g] for g in range(2) for _ in range(n)]
    with _global_rng_preserved():
        try:
            advantages(cfg.estimator, rewards, group=group, **opts)
        except (TypeError, ValueError) as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ValueError(
                f"estimator_options of {cfg.estimator!r} {cfg.estimator_options!r} rejected by "
                f"the estimator: {first}"
            ) from None
