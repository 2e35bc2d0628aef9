"""Live logging of ``bestk train`` to TensorBoard and Weights & Biases (``report_to``).

``metrics.jsonl`` is always written; ``report_to`` adds live dashboards, with the semantics
of TRL / transformers' ``TrainingArguments.report_to``: ``"none"`` (the default, as in TRL
1.16), ``"all"`` (every supported integration that is installed), one name, or a list of
names (:data:`INTEGRATIONS`: ``tensorboard``, ``wandb``).

Names follow TRL's ``GRPOTrainer`` as its ``Trainer`` logs them (``train/<name>``,
``eval/<name>``) wherever the quantity is the same (:data:`TRL_NAMES`: ``train/reward``,
``train/reward_std``, ``train/entropy``, ``train/kl``, ``train/clip_ratio/region_mean``,
``train/completions/mean_length``, ...); every other value of a record keeps its bestk name
(``train/success_rate``, ``train/time/generate_s``, ...). Held-out evaluation adds
``eval/pass@k`` and ``eval/best@k`` for k = 1..n (their CI bounds stay in ``metrics.jsonl``);
the SFT warm-up logs ``sft/loss`` and ``sft/learning_rate``.

* **TensorBoard** (``tensorboard --logdir DIR/tensorboard``): one scalar per value at the RL
  step in ``DIR/tensorboard``; the SFT warm-up in ``DIR/tensorboard/sft`` (a second
  TensorBoard run, at the SFT step). A resumed run writes a ``purge_step`` at the step after
  its checkpoint, so TensorBoard drops what the interrupted run logged past it: each step
  shows once, as in ``metrics.jsonl``.
* **Weights & Biases** (files under ``DIR/wandb/``; project ``$WANDB_PROJECT`` or
  ``bestk``; name ``run_name`` or the run directory's name; the config as the run config).
  Offline mode (``WANDB_MODE=offline``) needs no network or account; ``wandb sync`` uploads
  later. The run id is kept in ``DIR/wandb/bestk-run-id``, so a resumed ``bestk train``
  continues the same W&B run. Train and eval values are plotted against
  ``train/global_step`` (the RL step), SFT values against ``sft/step``.

The trainer opens the backends when it starts or resumes a run (:meth:`Reporters.open`; a
complete run reopened opens none) and closes them with :meth:`Reporters.close`.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from bestk._atomic import write_text_atomic
from bestk._optional import available, require
from bestk.train.rollout.sample_log import samples_table, table_columns_rows

if TYPE_CHECKING:  # pragma: no cover - annotations only (tensorboard is optional)
    from torch.utils.tensorboard import SummaryWriter

__all__ = [
    "INTEGRATIONS",
    "TRL_NAMES",
    "Reporters",
    "resolve_report_to",
    "scalars",
]

#: ``report_to`` name -> (module it needs, extra that installs it)
INTEGRATIONS: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboard", "train"),
    "wandb": ("wandb", "wandb"),
}

#: bestk's key in a ``metrics.jsonl`` record -> TRL ``GRPOTrainer``'s name of the same
#: quantity (before the ``train/`` / ``eval/`` prefix).
TRL_NAMES: dict[str, str] = {
    "reward_mean": "reward",
    "reward_std": "reward_std",
    "frac_reward_zero_std": "frac_reward_zero_std",
    "entropy": "entropy",
    "kl_ref": "kl",
    "clipfrac": "clip_ratio/region_mean",
    "response_len": "completions/mean_length",
    "response_len_min": "completions/min_length",
    "response_len_max": "completions/max_length",
    "truncated_rate": "completions/clipped_ratio",
    "pg_loss": "policy_loss",
    "loss": "loss",
    "grad_norm": "grad_norm",
    "lr": "learning_rate",
}

#: Keys of a record that are bookkeeping, not curves.
_SKIP = {"phase", "step", "sft_step", "n", "num_prompts"}
_PREFIX = {"train": "train/", "eval": "eval/", "sft": "sft/"}


def resolve_report_to(value: object) -> list[str]:
    """The integrations ``report_to`` asks for, TRL-style: ``None`` / ``"none"`` / ``[]`` ->
    ``[]``; ``"all"`` -> every one of :data:`INTEGRATIONS` whose package is installed; a name
    or a list of names (duplicates dropped). Raises ``ValueError`` naming an unknown one."""
    if value is None:
        return []
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise ValueError(
            f"config key 'report_to' must be none, all, a name or a list of names, got {value!r}"
        )
    if list(names) in (["none"], []):
        return []
    if list(names) == ["all"]:
        return [n for n, (module, _) in INTEGRATIONS.items() if available(module)]
    bad = [n for n in names if n not in INTEGRATIONS]
    if bad:
        raise ValueError(
            f"config key 'report_to' names unknown integration(s) {', '.join(map(repr, bad))}; "
            f"valid: none, all, {', '.join(INTEGRATIONS)} (or a list of them)"
        )
    return list(dict.fromkeys(names))


def scalars(record: Mapping[str, Any]) -> tuple[str, int, dict[str, float]]:
    """``(axis, step, {tag: value})`` of a ``metrics.jsonl`` record for the dashboards.

    ``axis`` is ``"train"`` (train and eval records, at the RL step) or ``"sft"``. Tags are
    ``train/<name>``, ``eval/<name>`` or ``sft/<name>`` with TRL's name where
    :data:`TRL_NAMES` has one; CI bounds (``*_lo`` / ``*_hi``), ``n``, ``num_prompts`` and
    non-numbers are left out.
    """
    phase = record["phase"]
    prefix = _PREFIX[phase]
    values = {}
    for key, v in record.items():
        if key in _SKIP or key.endswith(("_lo", "_hi")):
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        values[prefix + TRL_NAMES.get(key, key)] = float(v)
    if phase == "sft":
        return "sft", int(record["sft_step"]), values
    return "train", int(record["step"]), values


class _TensorBoard:
    """RL and evaluation scalars in ``DIR/tensorboard``, SFT scalars in ``DIR/tensorboard/sft``
    (a second TensorBoard run: a resume's ``purge_step`` applies to all tags of a run, and the
    SFT steps must survive it)."""

    def __init__(self, out: Path, resume_step: int | None, config_text: str):
        require("tensorboard", extra="train")
        from torch.utils.tensorboard import SummaryWriter

        self._writer_cls = SummaryWriter
        self.log_dir = out / "tensorboard"
        if resume_step is None and self.log_dir.exists():
            shutil.rmtree(self.log_dir)  # a new (or restarted) run starts new curves
        self.resume_step = resume_step
        self.config_text = config_text
        self.writers: dict[str, SummaryWriter] = {}

    def _writer(self, axis: str) -> SummaryWriter:
        if axis not in self.writers:
            if axis == "sft":
                self.writers[axis] = self._writer_cls(str(self.log_dir / "sft"), flush_secs=10)
            else:
                purge = None if self.resume_step is None else self.resume_step + 1
                w = self._writer_cls(str(self.log_dir), purge_step=purge, flush_secs=10)
                if self.resume_step is None:
                    w.add_text("config", f"```\n{self.config_text}\n```", 0)
                self.writers[axis] = w
        return self.writers[axis]

    def log(self, axis: str, step: int, values: dict[str, float]) -> None:
        writer = self._writer(axis)
        for tag, v in values.items():
            writer.add_scalar(tag, v, step)

    def log_samples(self, step: int, records: Sequence[Mapping[str, Any]]) -> None:
        self._writer("train").add_text("eval/samples", samples_table(records), step)

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()


class _Wandb:
    def __init__(self, out: Path, resume_step: int | None, config: Mapping[str, object],
                 run_name: str | None):
        wandb = require("wandb", extra="wandb")
        wdir = out / "wandb"
        wdir.mkdir(parents=True, exist_ok=True)
        id_file = wdir / "bestk-run-id"
        run_id = id_file.read_text().strip() if id_file.is_file() else ""
        if resume_step is None or not run_id:
            run_id = uuid.uuid4().hex[:12]
            write_text_atomic(id_file, run_id + "\n")
        try:
            self.run = wandb.init(
                project=os.environ.get("WANDB_PROJECT") or "bestk",
                dir=str(out), id=run_id, name=run_name or out.resolve().name,
                config=config, resume="allow", reinit="create_new",
                settings=wandb.Settings(console="off", silent=True),
            )
        except Exception as e:  # wandb.errors.UsageError/CommError: no login, no network
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ValueError(
                f"W&B could not start a run: {first}; run `wandb login`, or log offline with "
                "WANDB_MODE=offline (upload later with `wandb sync`)"
            ) from None
        self.run.define_metric("train/global_step")
        self.run.define_metric("train/*", step_metric="train/global_step")
        self.run.define_metric("eval/*", step_metric="train/global_step")
        self.run.define_metric("sft/step")
        self.run.define_metric("sft/*", step_metric="sft/step")

    def log(self, axis: str, step: int, values: dict[str, float]) -> None:
        self.run.log({**values, f"{axis}/{'global_step' if axis == 'train' else 'step'}": step})

    def log_samples(self, step: int, records: Sequence[Mapping[str, Any]]) -> None:
        import wandb

        columns, rows = table_columns_rows(records)
        names: list[Any] = list(columns)
        self.run.log({"eval/samples": wandb.Table(columns=names, data=rows),
                      "train/global_step": step})

    def close(self) -> None:
        self.run.finish()


class Reporters:
    """The live backends of one run: :meth:`log` fans a ``metrics.jsonl`` record out to each.

    ``names``: resolved integrations (:func:`resolve_report_to`); ``resume_step``: the step of
    the checkpoint a resumed run continues (``None`` for a new or restarted run); ``config``:
    the run's config as a dict (W&B run config, TensorBoard text).
    """

    def __init__(self, names: Iterable[str], out: str | os.PathLike[str], *,
                 resume_step: int | None = None, config: Mapping[str, object] | None = None,
                 run_name: str | None = None):
        self.names = list(names)
        self.out = Path(out)
        self.resume_step = resume_step
        self.config = config or {}
        self.run_name = run_name
        self._backends: list[_TensorBoard | _Wandb] | None = None

    def open(self) -> None:
        """Start every backend now (else on the first record); idempotent. Raises
        ``ValueError`` when W&B cannot start a run."""
        if self._backends is None:
            self._backends = self._open()

    def _open(self) -> list[_TensorBoard | _Wandb]:
        backends: list[_TensorBoard | _Wandb] = []
        try:
            for name in self.names:
                if name == "tensorboard":
                    text = yaml.safe_dump(self.config, sort_keys=False)
                    backends.append(_TensorBoard(self.out, self.resume_step, text))
                elif name == "wandb":
                    backends.append(_Wandb(self.out, self.resume_step, self.config,
                                           self.run_name))
        except BaseException:
            for b in backends:
                b.close()
            raise
        return backends

    def log(self, record: Mapping[str, Any]) -> None:
        """Send one record (a ``metrics.jsonl`` line) to every backend."""
        if not self.names:
            return
        self.open()
        axis, step, values = scalars(record)
        for backend in self._backends or []:
            backend.log(axis, step, values)

    def log_samples(self, step: int, records: Sequence[Mapping[str, Any]]) -> None:
        """Show an evaluation's samples (:mod:`bestk.train.rollout.sample_log` records): a Markdown
        table in TensorBoard's text tab (``eval/samples``), a W&B table (``eval/samples``)."""
        if not self.names or not records:
            return
        self.open()
        for backend in self._backends or []:
            backend.log_samples(step, list(records))

    def close(self) -> None:
        """Flush and close every backend (idempotent)."""
        backends, self._backends = self._backends or [], []
        for backend in backends:
            backend.close()
