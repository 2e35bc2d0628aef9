"""The :class:`Task` record and the task registry.

A task is a fixed list of training prompts and a disjoint list of held-out prompts, each an
``example`` dict with at least ``prompt`` (text fed to the model), ``answer`` (reference
completion, used for the SFT warm-up) and ``id`` (a stable integer, the prompt id that groups
samples and keys a KAPPO calibration bank), plus whatever fields its reward function needs,
and a reward: one function ``(prompt, completion, **example) -> float``, or several with
weights (:class:`~bestk.tasks.rewards.WeightedRewards`, TRL's ``reward_funcs`` /
``reward_weights``). A ``prompt`` is text, or a list of chat messages
(``[{"role": "system", "content": ...}, {"role": "user", "content": ...}]``, TRL's
conversational format) that the trainer renders through the tokenizer's chat template
(:func:`bestk.train.model.chat.render_task_prompts`, which also adds the task's ``system_prompt``).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np

from bestk._optional import MissingDependency, require
from bestk._options import check_option_names
from bestk.tasks.guard import user_code
from bestk.tasks.rewards import (
    RewardSpec,
    WeightedRewards,
    get_rewards,
    reward_number,
    reward_parts,
)

__all__ = ["Task", "RewardScores", "TASKS", "register_task", "load_task", "task_options",
           "read_messages", "MESSAGES_FORMAT", "Example", "Message", "Row"]

#: One prompt of a task: ``prompt`` (text, or a list of :data:`Message` s), ``answer`` (the
#: reference completion), ``id`` (a stable integer) and whatever fields its reward function
#: reads (values of any type, as the dataset or the task builder gives them).
Example: TypeAlias = dict[str, Any]
#: A row of a dataset (a JSON-lines object, a parquet or ``datasets`` row): field -> value.
#: :func:`bestk.tasks.builtin.rows_to_examples` makes it an :data:`Example`.
Row: TypeAlias = dict[str, object]
#: A chat message: a text ``role`` and a text ``content``, and any other keys the chat
#: template reads (TRL's conversational format).
Message: TypeAlias = dict[str, object]

#: How a list of chat messages looks, for error messages.
MESSAGES_FORMAT = ("a list of chat messages [{'role': ..., 'content': text}, ...] (TRL's "
                   "conversational format)")


def read_messages(value: object) -> list[Message] | None:
    """``value`` as a list of chat messages, or ``None`` when it is not a list (text).

    A list of chat messages (TRL's conversational format) is a non-empty list of dicts, each
    with a text ``role`` and a text ``content`` (keys whose value is ``None`` are dropped: a
    parquet column of structs fills missing keys with nulls). Returns fresh dicts. A list or
    dict of any other shape raises ``ValueError`` saying what is wrong with it.
    """
    if isinstance(value, dict):
        raise ValueError("a dict")
    if not isinstance(value, (list, tuple)):
        return None
    if not value:
        raise ValueError("an empty list")
    out = []
    for j, m in enumerate(value):
        if not isinstance(m, dict):
            raise ValueError(f"a list whose item {j + 1} is {type(m).__name__}, not a message dict")
        m = {k: v for k, v in m.items() if v is not None}
        if not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ValueError(f"a list whose message {j + 1} lacks a text 'role' or 'content' "
                             f"(it has {', '.join(map(repr, m)) or 'no keys'})")
        out.append(m)
    return out


@dataclass(frozen=True)
class RewardScores:
    """The scores of a batch of completions.

    ``total``: the reward of each completion (float64), what the estimator sees: one plain
    function's value as it is, or the weighted sum over the functions that did not return
    ``None`` (:class:`~bestk.tasks.rewards.WeightedRewards`). ``columns``: each function's
    own values by its name, ``NaN`` where it returned ``None``.
    """

    total: np.ndarray
    columns: dict[str, np.ndarray]

    def means(self) -> dict[str, float]:
        """Each function's mean over the completions it scored (TRL's ``nanmean``); a function
        that scored none of them is left out (no ``NaN`` in a log)."""
        return {name: float(np.nanmean(col)) for name, col in self.columns.items()
                if not np.isnan(col).all()}


@dataclass
class Task:
    """Prompts, held-out prompts and the reward of one task.

    Attributes
    ----------
    name: task name.
    train, eval: lists of example dicts (``prompt``, ``answer``, ``id``, reward fields).
    reward: the :class:`~bestk.tasks.rewards.RewardSpec` scoring completions, or a
        :class:`~bestk.tasks.rewards.WeightedRewards` of several.
    alphabet: characters the prompts and answers use (the default tiny model's char
        tokenizer is built from it), or ``None`` for free text (printable ASCII).
    max_answer_chars: a bound on the length of a correct completion (sizes the default
        ``max_new_tokens``).
    success_threshold: a completion succeeds (pass@k) when ``reward >= success_threshold``.
    system_prompt: a system message put before each prompt that has none when the prompts
        are rendered through a chat template (``None``: no system message).
    """

    name: str
    train: list[Example]
    eval: list[Example]
    reward: RewardSpec | WeightedRewards
    alphabet: str | None = None
    max_answer_chars: int = 32
    success_threshold: float = 1.0
    system_prompt: str | None = None

    @property
    def graded(self) -> bool:
        """True when rewards are not only 0/1 (best@k is then reported next to pass@k)."""
        return self.reward.graded

    @property
    def reward_names(self) -> tuple[str, ...]:
        """The names of the reward functions, in order (one for a plain reward)."""
        return tuple(spec.name for spec in reward_parts(self.reward)[0])

    def score(self, examples: Sequence[Example], completions: Sequence[str]) -> np.ndarray:
        """Rewards of ``completions[i]`` for ``examples[i]`` as a float64 array
        (:meth:`score_detailed`'s ``total``).

        Raises ``ValueError`` when a reward function returns something that is not a finite
        number (or ``None`` for one of several functions), naming the prompt.
        """
        return self.score_detailed(examples, completions).total

    def score_detailed(self, examples: Sequence[Example],
                       completions: Sequence[str]) -> RewardScores:
        """The rewards of ``completions[i]`` for ``examples[i]`` and each function's own values.

        A function gets ``(example["prompt"], completion, **other fields of example)``. With
        one plain function the total is its value. With several
        (:class:`~bestk.tasks.rewards.WeightedRewards`) a function may return ``None``, which
        is skipped as TRL skips it: ``total = sum_j w_j r_j`` over the functions that returned
        a number (TRL's ``nansum``); a completion that no function scored is a ``ValueError``
        (there is no reward to give the estimator). Every other non-number, and ``NaN`` or
        infinity, is a ``ValueError`` naming the function and the prompt.
        """
        if len(examples) != len(completions):
            raise ValueError(
                f"{len(examples)} examples but {len(completions)} completions to score"
            )
        specs, weights = reward_parts(self.reward)
        plain = weights is None
        columns: dict[str, np.ndarray] = {}
        for spec in specs:
            out = np.empty(len(completions), dtype=np.float64)
            for i, (ex, comp) in enumerate(zip(examples, completions, strict=True)):
                r = self._call(spec, ex, comp)
                if r is None and not plain:
                    out[i] = np.nan  # "does not apply": skipped in the sum, as TRL does
                    continue
                out[i] = self._number(spec, r, ex)
            columns[spec.name] = out
        if plain:
            return RewardScores(columns[specs[0].name], columns)
        stacked = np.stack([columns[s.name] for s in specs], axis=1)
        unscored = np.isnan(stacked).all(axis=1)
        if unscored.any():
            i = int(np.flatnonzero(unscored)[0])
            raise ValueError(
                f"every reward function of task {self.name!r} ({', '.join(self.reward_names)}) "
                f"returned None for prompt {examples[i]['prompt']!r}; at least one must score "
                f"each completion"
            )
        total = np.nansum(stacked * np.asarray(weights, dtype=np.float64), axis=1)
        return RewardScores(total, columns)

    def _call(self, spec: RewardSpec, ex: Example, completion: str, probe: bool = False
              ) -> Any:
        """``spec.fn(prompt, completion, **fields)`` of example ``ex``, behind the guard of
        user code (:func:`~bestk.tasks.guard.user_code`): an exception it raises -- any
        ``BaseException`` (``SystemExit`` too) but a missing optional package and a real
        Ctrl-C / SIGTERM -- is a one-line ``ValueError`` naming the function, the exception,
        the prompt and the completion; a change of the working directory is undone."""
        fields = {k: v for k, v in ex.items() if k != "prompt"}
        context = (f" for prompt {_short(ex['prompt'])} and completion {_short(completion)}"
                   + (" (a probe call before any work)" if probe else ""))
        with user_code(self._reward_label(spec), context, passthrough=(MissingDependency,)):
            return spec.fn(ex["prompt"], completion, **fields)

    def probe_rewards(self) -> None:
        """Call each reward function on the first training example with its reference answer,
        then with an empty completion (a model may well stop at once), as training will: a
        function that raises (a keyword the data lacks, ``completion.split()[-1]``) is a
        one-line ``ValueError`` naming it now, before any work, not after the SFT warm-up.
        What the functions return is not checked here (``None`` may mean "does not apply")."""
        if not self.train:
            return
        ex = self.train[0]
        for spec in reward_parts(self.reward)[0]:
            for completion in (str(ex.get("answer", "")), ""):
                self._call(spec, ex, completion, probe=True)

    def _number(self, spec: RewardSpec, value: object, ex: Example) -> float:
        """The float of what ``spec`` returned for ``ex`` (:func:`~bestk.tasks.rewards.
        reward_number`); a non-number (text such as ``"0.5"`` included), ``NaN`` or infinity
        is a one-line ``ValueError`` naming the function, the value, its type and the prompt."""
        try:
            r = reward_number(value)
        except TypeError as e:
            raise ValueError(f"{self._reward_label(spec)} returned {_short(value)} for prompt "
                             f"{_short(ex['prompt'])}: {e}") from None
        if not math.isfinite(r):
            raise ValueError(f"{self._reward_label(spec)} returned {r} for prompt "
                             f"{_short(ex['prompt'])}")
        return r

    def _reward_label(self, spec: RewardSpec) -> str:
        return f"reward function {spec.name!r} of task {self.name!r}"

    def success(self, rewards: np.ndarray) -> np.ndarray:
        """Boolean success of each reward (``reward >= success_threshold``)."""
        return np.asarray(rewards) >= self.success_threshold


def _short(value: object, width: int = 80) -> str:
    """``repr(value)``, cut to ``width`` characters (a prompt in a one-line message)."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 4] + "...'"


TaskBuilder = Callable[..., Task]
#: name -> builder ``fn(*, seed, reward, **options) -> Task``.
TASKS: dict[str, TaskBuilder] = {}


def register_task(name: str) -> Callable[[TaskBuilder], TaskBuilder]:
    """Decorator registering a task builder ``fn(*, seed, reward=None, **options) -> Task``."""

    def deco(fn: TaskBuilder) -> TaskBuilder:
        TASKS[name] = fn
        return fn

    return deco


def task_options(name: str) -> dict[str, object]:
    """Options of task ``name`` with their defaults (``inspect.Parameter.empty`` if required)."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid: {', '.join(sorted(TASKS))}")
    return {
        p.name: p.default
        for p in inspect.signature(TASKS[name]).parameters.values()
        if p.kind == p.KEYWORD_ONLY and p.name not in ("seed", "reward")
    }


def load_task(
    name: str,
    options: Mapping[str, object] | None = None,
    *,
    seed: int = 0,
    reward: str | Sequence[str] | None = None,
    reward_weights: Sequence[float] | None = None,
    system_prompt: str | None = None,
) -> Task:
    """Build task ``name`` with ``options``.

    ``reward`` replaces the task's default reward: a reward (a registered name,
    ``module:function`` or ``path/to/file.py:function``) or a list of them, combined with
    ``reward_weights`` (:func:`~bestk.tasks.rewards.get_rewards`; weights need a ``reward``).
    ``system_prompt`` becomes the task's system message (used when prompts are rendered
    through a chat template). Unknown tasks/options raise ``ValueError``; a missing package
    of the task or its reward raises :class:`bestk._optional.MissingDependency`."""
    options = dict(options or {})
    check_option_names("task", name, options, task_options(name))
    if reward_weights is not None and not reward:
        raise ValueError("task.reward_weights needs task.reward (the functions they weigh)")
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise ValueError(f"task.system_prompt must be text, got {system_prompt!r}")
    spec = get_rewards(reward, reward_weights) if reward else None
    task = TASKS[name](seed=seed, reward=spec, **options)
    if system_prompt:
        task.system_prompt = system_prompt
    for module in task.reward.requires:  # before any work, not at the first score
        require(module)
    if not task.train:
        raise ValueError(f"task {name!r} has no training prompts")
    if not task.eval:
        raise ValueError(f"task {name!r} has no held-out prompts")
    return task
