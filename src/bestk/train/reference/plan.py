"""What a run's KAPPO reference calibration will be, decided before any work: the plan.

:func:`plan_reference` reads the config, the algorithm's properties and the task once, before
the run directory is touched, and returns a :class:`ReferencePlan`:

* a ``kappo.calibration`` file is loaded, checked against the ``kappo`` section and the task's
  training prompts, and RL draws only its prompts; otherwise the calibration's kind follows
  ``kappo.kind``, the algorithm (``binary_only``) and the task (:func:`resolve_kind`);
* a run that samples a bank of its own (:meth:`AlgorithmSpec.samples_bank`) takes its bank
  prompts as a seeded subset of those (:func:`bank_examples`, stream ``BANK_PROMPTS``), and RL
  draws only them.

The plan then makes the bank and the calibration from the reference policy (after SFT:
:meth:`ReferencePlan.reference_bank`, :meth:`ReferencePlan.calibrate`), or checks the copy a
resumed run holds (:meth:`ReferencePlan.stored`). The :class:`~bestk.train.trainer.Trainer` and
``bestk compare`` (which samples one bank per seed for several runs) both ask it.
(:mod:`bestk.train.reference.bank` holds the bank and calibration functions and files; this module
is apart from it because it reads the config, which itself imports that module.)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from bestk._seeds import BANK_PROMPTS, BANK_SAMPLING
from bestk.kappo import Calibration
from bestk.kappo.calibration import load_calibration
from bestk.tasks import Example, Task
from bestk.train.config import ResolvedTrainConfig
from bestk.train.reference.bank import (
    CALIBRATION_FILE,
    ReferenceBank,
    bank_examples,
    calibrate_bank,
    calibration_prompt_ids,
    check_prompt_ids,
    load_bank,
    load_reference,
    resolve_kind,
    sample_bank,
)
from bestk.train.rollout.settings import sampling_options

if TYPE_CHECKING:  # pragma: no cover - annotations only (transformers is optional)
    from rich.progress import Progress
    from transformers import PreTrainedTokenizerBase

    from bestk.train.model.policy import Policy

__all__ = ["ReferencePlan", "plan_reference", "restrict_prompts", "CalibratingAlgorithm",
           "load_kappo_file"]


class CalibratingAlgorithm(Protocol):
    """What :func:`plan_reference` asks of an algorithm (an
    :class:`~bestk.train.algorithms.AlgorithmSpec` is one; a protocol here, so the reference
    room does not look up to the algorithms above it)."""

    @property
    def binary_only(self) -> bool:
        """Whether only a binary calibration will do."""

    @property
    def bank_completions(self) -> bool:
        """Whether the reference bank keeps its completions (@k-DPO)."""

    def samples_bank(self, cfg: ResolvedTrainConfig) -> bool:
        """Whether a run of ``cfg`` samples a reference bank of its own."""


def load_kappo_file(cfg: ResolvedTrainConfig, *, binary_only: bool = False) -> Calibration:
    """The :class:`~bestk.kappo.Calibration` of ``kappo.calibration``, checked against the
    ``kappo`` section, and binary when the algorithm needs it (``binary_only``: its
    :class:`~bestk.train.algorithms.AlgorithmSpec`'s); ``ValueError`` naming the mismatch."""
    path = cfg.kappo.calibration
    try:
        cal = load_calibration(path)
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot load kappo.calibration {str(path)!r}: {e}") from None
    k, beta, kind = cfg.kappo.k, cfg.kappo.beta, cfg.kappo.kind
    if cal.k != k or not math.isclose(cal.beta, beta, rel_tol=1e-12, abs_tol=0.0):
        raise ValueError(
            f"kappo.calibration {str(path)!r} was made for k={cal.k}, beta={cal.beta}, but the "
            f"run has kappo.k={k}, kappo.beta={beta}; set them to the file's values or "
            "recalibrate (`bestk calibrate BANK --k K --beta B`)"
        )
    if kind != "auto" and cal.kind != kind:
        raise ValueError(
            f"kappo.calibration {str(path)!r} is a {cal.kind} calibration, but kappo.kind is "
            f"{kind!r}"
        )
    if binary_only and not cal.kind_spec.binary:
        raise ValueError(
            f"algorithm {cfg.algorithm!r} needs a binary calibration; kappo.calibration "
            f"{str(path)!r} is a {cal.kind} one"
        )
    return cal


def restrict_prompts(prompts: list[Example], ids: set[int | str], source: str,
                     task: Task) -> list[Example]:
    """The prompts of ``prompts`` whose id is in ``ids`` (a calibration's), in order;
    ``ValueError`` naming ``source`` when there are none."""
    kept = [e for e in prompts if e["id"] in ids]
    if not kept:
        raise ValueError(
            f"{source} shares no prompt id with the training prompts of task "
            f"{task.name!r} (make the bank with `bestk eval --bank`)"
        )
    return kept


@dataclass
class ReferencePlan:
    """A run's KAPPO calibration, planned (module docstring).

    ``kind``: the calibration's kind; ``file_calibration``: the ``kappo.calibration`` file's
    calibration (``None`` without one); ``bank_examples``: the prompts of the bank the run
    samples (``None``: it samples none); ``prompts``: the training prompts RL draws from.
    """

    cfg: ResolvedTrainConfig
    bank_completions: bool
    kind: str
    file_calibration: Calibration | None
    bank_examples: list[Example] | None
    prompts: list[Example]

    @property
    def bank_samples(self) -> int:
        """Reference samples of the run's bank (0 without one): part of its rollout budget."""
        return 0 if self.bank_examples is None else len(self.bank_examples) * \
            self.cfg.kappo.bank_size

    def given_bank(self) -> ReferenceBank:
        """The ``kappo.bank`` bank, checked to cover exactly the run's bank prompts (in
        order) with ``kappo.bank_size`` samples each."""
        k = self.cfg.kappo
        assert k.bank is not None, "given_bank: the run has no kappo.bank"
        bank = load_bank(k.bank, completions=self.bank_completions)
        want = [int(e["id"]) for e in self.bank_examples or []]
        if bank.prompt_ids.tolist() != want or bank.size != k.bank_size:
            raise ValueError(
                f"kappo.bank {k.bank!r} holds {bank.size} samples for each of "
                f"{bank.num_prompts} prompts, not the run's bank ({k.bank_size} samples for each "
                f"of its {len(want)} bank prompts, kappo.bank_prompts and seed {self.cfg.seed}); "
                "it was made for another run"
            )
        return bank

    def reference_bank(self, model: Policy, tokenizer: PreTrainedTokenizerBase, task: Task,
                       max_new_tokens: int, progress: Progress | None = None,
                       given: ReferenceBank | None = None,
                       should_stop: Callable[[], bool] | None = None) -> ReferenceBank | None:
        """The run's reference bank (``None`` when it needs none): ``kappo.bank``'s (``given``
        when already loaded), or ``kappo.bank_size`` samples of ``model`` (the reference:
        after SFT) for each bank prompt, with the completions when the algorithm keeps them.
        A function of the weights, the seed and the ``kappo`` / ``rollout`` settings only."""
        cfg, k = self.cfg, self.cfg.kappo
        if self.bank_examples is None:
            return None
        if k.bank is not None:
            return given if given is not None else self.given_bank()
        return sample_bank(
            model, tokenizer, task, self.bank_examples, size=k.bank_size,
            max_new_tokens=max_new_tokens, seed=BANK_SAMPLING.seed(cfg.seed),
            completions=self.bank_completions, progress=progress, should_stop=should_stop,
            **sampling_options(cfg),
        )

    def calibrate(self, bank: ReferenceBank | None, task: Task) -> Calibration:
        """The run's calibration: the ``kappo.calibration`` file's as it is, else ``bank``'s
        (:func:`~bestk.train.reference.bank.calibrate_bank` with the run's kind, k and beta)."""
        if self.file_calibration is not None:
            return self.file_calibration
        if bank is None:
            raise ValueError("a run without a kappo.calibration file needs a reference bank")
        k = self.cfg.kappo
        return calibrate_bank(bank, task, self.kind, k.k, k.beta)

    def note(self, cal: Calibration, out: Path) -> str:
        """The one-line note on the calibration made for the run in ``out``."""
        k = self.cfg.kappo
        source = (f"from {k.calibration}" if self.file_calibration is not None else
                  f"in-run, bank of {k.bank_size} samples per prompt"
                  + (f" from {k.bank}" if k.bank is not None else ""))
        return (f"KAPPO {cal.kind} calibration ({source}): k={cal.k}, beta={cal.beta}, "
                f"{cal.num_prompts} prompts -> {out / CALIBRATION_FILE}")

    def stored(self, out: Path, warn: Callable[[str], None]
               ) -> tuple[Calibration, ReferenceBank | None]:
        """The calibration and bank a resumed run in ``out`` holds, checked against the plan
        (``ValueError`` for another k, beta or kind; ``warn`` when the ``kappo.calibration``
        file changed since)."""
        cal, bank = load_reference(out, completions=self.bank_completions)
        k = self.cfg.kappo
        if cal.k != k.k or cal.beta != k.beta or cal.kind != self.kind:
            raise ValueError(
                f"{out / CALIBRATION_FILE} is a {cal.kind} calibration for k={cal.k}, "
                f"beta={cal.beta}, not the run's ({self.kind}, k={k.k}, beta={k.beta}); "
                "restore it, or start a new run with another --out"
            )
        if self.file_calibration is not None and self.file_calibration.checksum != cal.checksum:
            warn(f"kappo.calibration {k.calibration!r} changed since the run started; "
                 f"continuing with the run's own copy {CALIBRATION_FILE}")
        return cal, bank


def plan_reference(cfg: ResolvedTrainConfig, spec: CalibratingAlgorithm, task: Task
                   ) -> ReferencePlan:
    """The :class:`ReferencePlan` of a run of ``cfg`` (an algorithm ``spec`` that calibrates,
    :class:`~bestk.train.algorithms.AlgorithmSpec`) on ``task``, before any work: a
    ``kappo.calibration`` file is loaded and checked against the task; otherwise the bank's
    prompts are a seeded subset of the training prompts."""
    prompts = list(task.train)
    file_cal = None
    if cfg.kappo.calibration is not None:
        file_cal = load_kappo_file(cfg, binary_only=spec.binary_only)
        source = f"kappo.calibration {cfg.kappo.calibration!r}"
        check_prompt_ids(file_cal, [e["id"] for e in task.train], source)
        prompts = restrict_prompts(prompts, set(calibration_prompt_ids(file_cal)), source, task)
        kind = file_cal.kind
    else:
        kind = resolve_kind(cfg.kappo.kind, binary_only=spec.binary_only, graded=task.graded)
    examples = None
    if spec.samples_bank(cfg):
        examples = bank_examples(prompts, cfg.kappo.bank_prompts, BANK_PROMPTS.seed(cfg.seed))
        prompts = list(examples)  # RL draws calibrated prompts only
    return ReferencePlan(cfg, spec.bank_completions, kind, file_cal, examples, prompts)
