"""The data a run trains on, recorded in its checkpoints: a resume on other data is refused.

A task read from files (``task.name: dataset``, :mod:`bestk.tasks.dataset`) is only named by
the run's config (``task.options.path``, ``eval_path``): the files can be replaced between a
stop and the resume, and the run would continue, silently, on other prompts. Its checkpoints
therefore record :func:`data_digest` (``"data"`` in their state), a digest of every field of
the task's training and held-out examples as the run read them, and a resume recomputes it and
refuses other data (:func:`check_run_data`). A built-in or registered task is made by code from
the config, which the run's identity already records: no digest, and its checkpoints are as
before. A checkpoint written before checkpoints recorded their data is not checked.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from bestk.tasks import Task
from bestk.train.config import TrainConfig
from bestk.train.runtime.files import checkpoint_state

__all__ = ["DATA_TASKS", "data_digest", "check_run_data"]

#: The tasks read from files, whose checkpoints record their data's digest.
DATA_TASKS = ("dataset",)


def data_digest(cfg: TrainConfig, task: Task) -> str | None:
    """16 hex digits of the examples (every field, training then held-out) of ``task`` when
    it is read from files (:data:`DATA_TASKS`), else ``None``."""
    if cfg.task.name not in DATA_TASKS:
        return None
    h = hashlib.sha256()
    for split in (task.train, task.eval):
        for ex in split:
            text = json.dumps(ex, sort_keys=True, ensure_ascii=False, default=repr)
            h.update(text.encode("utf-8", "surrogatepass") + b"\n")
        h.update(b"\x00")
    return h.hexdigest()[:16]


def check_run_data(checkpoint: Path, digest: str | None, cfg: TrainConfig) -> None:
    """Refuse (a one-line ``ValueError`` naming the files and what to do) resuming from
    ``checkpoint`` when it records the digest of other data than ``digest``, the data the
    task reads now (:func:`data_digest`)."""
    if digest is None:
        return
    theirs = checkpoint_state(checkpoint).get("data")
    if theirs is None or theirs == digest:  # None: written before checkpoints recorded it
        return
    opts = cfg.task.options or {}
    files = " and ".join(f"task.options.{k} {str(opts[k])!r}" for k in ("path", "eval_path")
                         if opts.get(k))
    raise ValueError(
        f"the data of run {str(cfg.out)!r} changed since its checkpoint {checkpoint.name} was "
        f"written: {files or 'the task files'} now "
        f"{'hold' if ' and ' in files or not files else 'holds'} other rows (data digest {theirs} "
        f"there, {digest} now); restore the file(s) as they were, or start a new run with "
        "another --out"
    )
