"""The :class:`Task` record and the task registry.

A task is a fixed list of training prompts and a disjoint list of held-out prompts, each an
``example`` dict with at least ``prompt`` (text fed to the model), ``answer`` (reference
completion, used for the SFT warm-up) and ``id`` (a stable integer, the prompt id that groups
samples and keys a KAPPO calibration bank), plus whatever fields its reward function needs,
and a reward function ``(prompt, completion, **example) -> float``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bestk._optional import require
from bestk._options import check_option_names
from bestk.tasks.rewards import RewardSpec, get_reward

__all__ = ["Task", "TASKS", "register_task", "load_task", "task_options"]


@dataclass
class Task:
    """Prompts, held-out prompts and the reward of one task.

    Attributes
    ----------
    name: task name.
    train, eval: lists of example dicts (``prompt``, ``answer``, ``id``, reward fields).
    reward: the :class:`~bestk.tasks.rewards.RewardSpec` scoring completions.
    alphabet: characters the prompts and answers use (the default tiny model's char
        tokenizer is built from it), or ``None`` for free text (printable ASCII).
    max_answer_chars: a bound on the length of a correct completion (sizes the default
        ``max_new_tokens``).
    success_threshold: a completion succeeds (pass@k) when ``reward >= success_threshold``.
    """

    name: str
    train: list[dict[str, Any]]
    eval: list[dict[str, Any]]
    reward: RewardSpec
    alphabet: str | None = None
    max_answer_chars: int = 32
    success_threshold: float = 1.0

    @property
    def graded(self) -> bool:
        """True when rewards are not only 0/1 (best@k is then reported next to pass@k)."""
        return self.reward.graded

    def score(self, examples: Sequence[dict[str, Any]], completions: Sequence[str]) -> np.ndarray:
        """Rewards of ``completions[i]`` for ``examples[i]`` as a float64 array.

        Raises ``ValueError`` when the reward function returns something that is not a finite
        number (naming the prompt).
        """
        if len(examples) != len(completions):
            raise ValueError(
                f"{len(examples)} examples but {len(completions)} completions to score"
            )
        fn = self.reward.fn
        out = np.empty(len(completions), dtype=np.float64)
        for i, (ex, comp) in enumerate(zip(examples, completions, strict=True)):
            fields = {k: v for k, v in ex.items() if k != "prompt"}
            r = fn(ex["prompt"], comp, **fields)
            try:
                r = float(r)
            except (TypeError, ValueError):
                raise ValueError(
                    f"reward of task {self.name!r} returned {r!r} for prompt {ex['prompt']!r}"
                ) from None
            if not math.isfinite(r):
                raise ValueError(
                    f"reward of task {self.name!r} returned {r} for prompt {ex['prompt']!r}"
                )
            out[i] = r
        return out

    def success(self, rewards: np.ndarray) -> np.ndarray:
        """Boolean success of each reward (``reward >= success_threshold``)."""
        return np.asarray(rewards) >= self.success_threshold


TaskBuilder = Callable[..., Task]
#: name -> builder ``fn(*, seed, reward, **options) -> Task``.
TASKS: dict[str, TaskBuilder] = {}


def register_task(name: str) -> Callable[[TaskBuilder], TaskBuilder]:
    """Decorator registering a task builder ``fn(*, seed, reward=None, **options) -> Task``."""

    def deco(fn: TaskBuilder) -> TaskBuilder:
        TASKS[name] = fn
        return fn

    return deco


def task_options(name: str) -> dict[str, Any]:
    """Options of task ``name`` with their defaults (``inspect.Parameter.empty`` if required)."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid: {', '.join(sorted(TASKS))}")
    return {
        p.name: p.default
        for p in inspect.signature(TASKS[name]).parameters.values()
        if p.kind == p.KEYWORD_ONLY and p.name not in ("seed", "reward")
    }


def load_task(
    name: str, options: dict[str, Any] | None = None, *, seed: int = 0, reward: str | None = None
) -> Task:
    """Build task ``name`` with ``options``; ``reward`` (a name or ``module:function``)
    replaces the task's default reward. Unknown tasks/options raise ``ValueError``; a missing
    package of the task or its reward raises :class:`bestk._optional.MissingDependency`."""
    options = dict(options or {})
    check_option_names("task", name, options, task_options(name))
    spec = get_reward(reward) if reward else None
    task = TASKS[name](seed=seed, reward=spec, **options)
    for module in task.reward.requires:  # before any work, not at the first score
        require(module)
    if not task.train:
        raise ValueError(f"task {name!r} has no training prompts")
    if not task.eval:
        raise ValueError(f"task {name!r} has no held-out prompts")
    return task
