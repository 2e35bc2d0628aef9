"""The log of a run: ``metrics.jsonl``, ``samples.jsonl`` and the live reporters, in one place.

* ``metrics.jsonl`` -- one strict-JSON line per record (``phase``: ``sft``, ``train``,
  ``eval``), flushed and fsync'ed as it is written (:func:`append_record`); a resumed run drops
  the records after its checkpoint's step (they are redone);
* ``samples.jsonl`` -- a few evaluated prompts with their completions and rewards per
  evaluation (:mod:`bestk.train.rollout.sample_log`);
* the live reporters of ``report_to`` (TensorBoard, W&B: :mod:`bestk.train.run.reporters`),
  each record sent to them after it is on disk.

:class:`RunLog` holds the three for a :class:`~bestk.train.trainer.Trainer`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

from bestk._atomic import write_text_atomic
from bestk.tasks import Task
from bestk.train.config import ResolvedTrainConfig
from bestk.train.config.io import config_to_dict
from bestk.train.rollout.evaluate import EvalResult
from bestk.train.rollout.sample_log import (
    SAMPLES_FILE,
    SampleRecord,
    append_samples,
    drop_samples_after,
    eval_samples,
)
from bestk.train.run.directory import drop_metrics_after, read_metrics
from bestk.train.run.reporters import Reporters, resolve_report_to

__all__ = ["RunLog", "Record", "append_record", "METRICS_FILE"]

#: The run's log of records, one JSON object per line.
METRICS_FILE = "metrics.jsonl"

#: One record of ``metrics.jsonl``: its ``phase`` (``sft``, ``train`` or ``eval``), its step
#: (``sft_step`` or ``step``) and numbers (``None``, read back, where one was not finite).
Record: TypeAlias = dict[str, float | str | None]


def append_record(path: Path, record: Mapping[str, object]) -> None:
    """Append ``record`` as one JSON line to ``path``, flushed and fsync'ed (an ``OSError``
    names the file). The line is strict JSON: a value that is not a finite number (``nan``,
    ``inf``) is written as ``null``, never as the bare ``NaN`` / ``Infinity`` strict readers
    reject."""
    line = json.dumps({k: None if isinstance(v, float) and not math.isfinite(v) else v
                       for k, v in record.items()}, allow_nan=False)
    try:
        with open(path, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        if e.filename is None and e.errno is not None:  # write() errors name no file
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise


class RunLog:
    """The log of the run in ``out`` (module docstring), sending every record to
    ``reporters`` too."""

    def __init__(self, out: Path, reporters: Reporters):
        self.metrics_file = out / METRICS_FILE
        self.samples_file = out / SAMPLES_FILE
        self.reporters = reporters

    @classmethod
    def of_run(cls, out: Path, cfg: ResolvedTrainConfig) -> RunLog:
        """The log of the run of ``cfg`` in ``out``, with the reporters of its ``report_to``
        (not opened yet; a resumed run sets their ``resume_step`` before they open)."""
        return cls(out, Reporters(resolve_report_to(cfg.report_to), out,
                                  config=config_to_dict(cfg), run_name=cfg.run_name))

    def start(self) -> None:
        """An empty ``metrics.jsonl`` for a run that starts (or starts over)."""
        write_text_atomic(self.metrics_file, "")

    def truncate(self, step: int) -> None:
        """Drop the records and samples of the steps after ``step`` (a resumed run redoes
        them)."""
        drop_metrics_after(self.metrics_file, step)
        drop_samples_after(self.samples_file, step)

    def reopen_evaluation(self, step: int) -> bool:
        """Whether ``metrics.jsonl`` lacks the evaluation of ``step`` (its record lost with the
        run stopped after the step's checkpoint, or ``max_steps`` lowered to a step without
        one), so that it is to be (re)done; then its samples, if any were logged, are dropped,
        so that the evaluation is logged once."""
        if any(r["phase"] == "eval" and r["step"] == step
               for r in read_metrics(self.metrics_file)):
            return False
        drop_samples_after(self.samples_file, step - 1)
        return True

    def record(self, record: Mapping[str, Any]) -> None:
        """Append one record to ``metrics.jsonl`` (flushed and fsync'ed), then send it to
        the live reporters."""
        append_record(self.metrics_file, record)
        self.reporters.log(dict(record))

    def samples(self, step: int, samples: Sequence[SampleRecord]) -> None:
        """Append an evaluation's samples to ``samples.jsonl`` and show them live."""
        append_samples(self.samples_file, samples)
        self.reporters.log_samples(step, [dict(s) for s in samples])

    def evaluation(self, step: int, res: EvalResult, task: Task) -> Record:
        """Log an evaluation at ``step``: its ``phase: eval`` record and a few of its samples
        (what the model saw and said, :func:`~bestk.train.rollout.sample_log.eval_samples`);
        returns the record."""
        rec: Record = {"phase": "eval", "step": step, **res.metrics}
        self.record(rec)
        self.samples(step, eval_samples(step, res, task))
        return rec

    def last_evaluation(self) -> Record:
        """The newest ``phase: eval`` record of ``metrics.jsonl`` (``{}`` if none)."""
        evals = [r for r in read_metrics(self.metrics_file) if r["phase"] == "eval"]
        return evals[-1] if evals else {}

    def close(self) -> None:
        """Close the live reporters (idempotent)."""
        self.reporters.close()
