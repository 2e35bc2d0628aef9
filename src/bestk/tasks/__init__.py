"""Tasks for the embedded trainer: prompts, held-out prompts and reward functions.

A reward function is ``(prompt, completion, **example) -> float``, registered by name
(:func:`register_reward`) or given as ``"module:function"`` or ``"path/to/file.py:function"``;
several combine with weights (:func:`get_rewards`, TRL's ``reward_funcs`` / ``reward_weights``).
A prompt is text or a list of chat messages. Tasks are registered builders
(:func:`register_task`); :func:`load_task` builds one by name with options.
"""

from bestk.tasks import builtin as _builtin  # noqa: F401  (registers the built-in tasks)
from bestk.tasks import dataset as _dataset  # noqa: F401  (registers the dataset task)
from bestk.tasks.base import (
    TASKS,
    Example,
    RewardScores,
    Task,
    load_task,
    register_task,
    task_options,
)
from bestk.tasks.rewards import (
    REWARDS,
    RewardSpec,
    WeightedRewards,
    get_reward,
    get_rewards,
    register_reward,
)

__all__ = [
    "TASKS",
    "Task",
    "Example",
    "RewardScores",
    "load_task",
    "register_task",
    "task_options",
    "REWARDS",
    "RewardSpec",
    "WeightedRewards",
    "get_reward",
    "get_rewards",
    "register_reward",
]
