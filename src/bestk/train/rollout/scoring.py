"""Scoring a batch of completions with the task's reward(s).
"""

from __future__ import annotations

import numpy as np

from bestk.tasks import Example, Task

__all__ = ["score_batch"]


def score_batch(task: Task, examples: list[Example], texts: list[str],
                metrics: dict[str, float] | None = None) -> np.ndarray:
    """The task's rewards of ``texts`` (``examples[i]`` for ``texts[i]``), float64. With
    several reward functions each one's mean over the completions it scored is added to
    ``metrics`` as ``rewards/<name>/mean`` (TRL's name)."""
    if len(task.reward_names) < 2:
        return task.score(examples, texts)
    scores = task.score_detailed(examples, texts)
    if metrics is not None:
        metrics.update({f"rewards/{k}/mean": v for k, v in scores.means().items()})
    return scores.total
