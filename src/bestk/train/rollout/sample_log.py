"""What the model sees: a few evaluated prompts with their completions and rewards.

Each evaluation can keep a handful of samples -- the prompt exactly as the model saw it (after
the chat template and the system prompt), the completion, the reward and, with several reward
functions, each function's value -- so a user checks the template and the reward at a glance:

* :func:`sample_records` -- the records of one evaluation: the first ``num_prompts`` held-out
  prompts (the same ones at every evaluation, so they can be compared over training) with
  their first ``per_prompt`` completions; no random draw (no random stream changes);
* :func:`append_samples` -- appends them to ``samples.jsonl`` (one JSON object per line);
* :func:`samples_table` -- the same as a Markdown table (TensorBoard's ``add_text``) and
  :func:`table_columns_rows` as columns and rows (a W&B ``wandb.Table``);
* :func:`eval_samples` -- the records of an :class:`~bestk.train.rollout.evaluate.EvalResult` (what
  the trainer writes at each evaluation: ``DIR/samples.jsonl``), and
  :func:`drop_samples_after` -- a resumed run's ``samples.jsonl`` without the records of
  the steps it redoes (as ``metrics.jsonl``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from bestk._atomic import write_text_atomic
from bestk.tasks import Example, Task

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from bestk.train.rollout.evaluate import EvalResult

__all__ = ["sample_records", "append_samples", "samples_table", "table_columns_rows",
           "eval_samples", "drop_samples_after", "SAMPLES_FILE", "SampleRecord"]

#: The file of a run directory holding the evaluation samples.
SAMPLES_FILE = "samples.jsonl"


class _SampleKeys(TypedDict):
    step: int
    prompt_id: int | str | None
    prompt: str
    completion: str
    reward: float


class SampleRecord(_SampleKeys, total=False):
    """One line of ``samples.jsonl`` (:func:`sample_records`): ``success`` when known,
    ``rewards`` (each reward function's value, ``None`` where it gave none) with several."""

    success: bool
    rewards: dict[str, float | None]


def _number(x: float) -> float | None:
    v = float(x)
    return None if math.isnan(v) else v


def sample_records(
    step: int,
    examples: Sequence[Example],
    texts: Sequence[str],
    rewards: np.ndarray,
    *,
    success: np.ndarray | None = None,
    columns: Mapping[str, np.ndarray] | None = None,
    num_prompts: int = 4,
    per_prompt: int = 2,
) -> list[SampleRecord]:
    """Records ``{"step", "prompt_id", "prompt", "completion", "reward"[, "success"][,
    "rewards": {name: value}]}`` of the first ``num_prompts`` examples and the first
    ``per_prompt`` of their completions.

    ``texts`` are the completions prompt-major (``n`` per example, as
    :func:`~bestk.train.rollout.evaluate.evaluate` returns them), ``rewards`` and ``success``
    ``(P, n)``;
    ``columns`` each reward function's ``(P, n)`` values (``NaN`` where it returned ``None``,
    written as ``null``). Raises ``ValueError`` when the shapes disagree.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    if rewards.ndim != 2 or rewards.shape[0] != len(examples):
        raise ValueError(f"rewards must be (prompts, n) = ({len(examples)}, n), got shape "
                         f"{rewards.shape}")
    n = rewards.shape[1]
    if len(texts) != rewards.size:
        raise ValueError(f"{len(texts)} completions for {len(examples)} prompts x {n} samples")
    if num_prompts < 0 or per_prompt < 0:
        raise ValueError(f"num_prompts and per_prompt must be >= 0, got {num_prompts}, "
                         f"{per_prompt}")
    out = []
    for i in range(min(num_prompts, len(examples))):
        ex = examples[i]
        for j in range(min(per_prompt, n)):
            rec: SampleRecord = {"step": int(step), "prompt_id": ex.get("id"),
                                 "prompt": ex["prompt"], "completion": texts[i * n + j],
                                 "reward": float(rewards[i, j])}
            if success is not None:
                rec["success"] = bool(np.asarray(success)[i, j])
            if columns:
                rec["rewards"] = {name: _number(np.asarray(col)[i, j])
                                  for name, col in columns.items()}
            out.append(rec)
    return out


def append_samples(path: str | os.PathLike[str], records: Sequence[Mapping[str, object]]) -> None:
    """Append ``records`` to the JSON-lines file ``path`` (created if missing), one line each,
    flushed and fsync'ed (a crash leaves at most a torn last line)."""
    if not records:
        return
    text = "".join(json.dumps(dict(r), ensure_ascii=False) + "\n" for r in records)
    with Path(path).open("a", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def table_columns_rows(records: Sequence[Mapping[str, Any]]
                       ) -> tuple[list[str], list[list[object]]]:
    """``(columns, rows)`` of ``records``: step, prompt id, prompt, completion, reward, then
    success and each reward function's value when the records have them."""
    names: list[str] = []
    for r in records:
        names.extend(k for k in r.get("rewards", {}) if k not in names)
    columns = ["step", "prompt_id", "prompt", "completion", "reward"]
    has_success = any("success" in r for r in records)
    if has_success:
        columns.append("success")
    columns.extend(f"reward/{k}" for k in names)
    rows = []
    for r in records:
        row = [r["step"], r.get("prompt_id"), r["prompt"], r["completion"], r["reward"]]
        if has_success:
            row.append(r.get("success"))
        row.extend(r.get("rewards", {}).get(k) for k in names)
        rows.append(row)
    return columns, rows


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", "⏎")


def samples_table(records: Sequence[Mapping[str, Any]]) -> str:
    """A Markdown table of ``records`` (newlines shown as ``⏎`` and ``|`` escaped, so each
    sample stays on one row; TensorBoard renders it as a table)."""
    columns, rows = table_columns_rows(records)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines.extend("| " + " | ".join(_cell(v) for v in row) + " |" for row in rows)
    return "\n".join(lines)


def eval_samples(step: int, result: EvalResult, task: Task, *, num_prompts: int = 4,
                 per_prompt: int = 2) -> list[SampleRecord]:
    """:func:`sample_records` of an evaluation result (``result.examples``, ``.texts``,
    ``.rewards``, ``.columns``): success as ``task.success`` says, each reward function's
    value when the task has several."""
    return sample_records(step, result.examples, result.texts, result.rewards,
                          success=task.success(result.rewards),
                          columns=getattr(result, "columns", None) or None,
                          num_prompts=num_prompts, per_prompt=per_prompt)


def drop_samples_after(path: str | os.PathLike[str], step: int) -> None:
    """Rewrite the JSON-lines file ``path`` without the records of steps after ``step`` (and
    without a torn last line); nothing when it does not exist."""
    path = Path(path)
    if not path.exists():
        return
    keep = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a line torn by a crash
        if isinstance(rec, dict) and int(rec.get("step", 0)) <= step:
            keep.append(line + "\n")
    write_text_atomic(path, "".join(keep))
