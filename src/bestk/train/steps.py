"""The phases of a run as public steps, for what runs them outside a
:class:`~bestk.train.trainer.Trainer` (``bestk compare`` checks every run of its grid before
any work).

* :func:`check_run`: every check ``Trainer(cfg)`` makes before it touches the run directory
  (a :class:`~bestk.train.setup.RunSetup`).
"""

from __future__ import annotations

from bestk.tasks import Task
from bestk.train.config import TrainConfig
from bestk.train.setup import RunSetup

__all__ = ["RunSetup", "check_run"]


def check_run(cfg: TrainConfig, *, task: Task | None = None) -> RunSetup:
    """Every check ``Trainer(cfg)`` makes before it touches the run directory or builds a model
    -- the config's values, the task's options and sizes, the KAPPO plan, the estimator's
    options and reward domain, the prompt pool -- and nothing else: nothing is written.
    Returns the run's :class:`~bestk.train.setup.RunSetup` (its resolved config, task, plan
    and prompts). ``task``: the run's task, already loaded (``bestk compare`` checks every run
    of its grid this way before any work, loading each seed's task once: the first run's
    ``setup.task``)."""
    return RunSetup(cfg, task=task)
