"""What a run shows: the progress bar, the start line, the per-step line of a log and the
line of a run stopped by Ctrl-C / SIGTERM (the stop itself is
:mod:`bestk.train.runtime.stop`'s)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from bestk.train.config import ResolvedTrainConfig
from bestk.train.run.directory import attempt_folder

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from types import FrameType
    from typing import TypeAlias

    #: What ``signal.getsignal`` returns: a handler, ``SIG_DFL`` / ``SIG_IGN``, or ``None``.
    _Handler: TypeAlias = Callable[[int, FrameType | None], object] | int | signal.Handlers | None

__all__ = ["progress_bar", "RunProgress",
           "start_line", "interrupted_line", "step_line", "phase_line",
           "clock", "rate", "LINE_EVERY_S"]


class RunProgress(Progress):
    """The run's progress bar (:func:`progress_bar`). Where its console is not a terminal
    (``nohup``, a log file) the bar is not drawn at all -- neither redrawn nor left as a last
    truncated row -- and complete lines stand in for it: :meth:`step` prints one per RL step
    (:func:`step_line`), and every other phase (the SFT warm-up, the reference bank, an
    evaluation) one at each quarter of its work and at least every :data:`LINE_EVERY_S`
    seconds (:func:`phase_line`)."""

    def __init__(self, *columns: str | ProgressColumn, **kwargs: Any) -> None:
        super().__init__(*columns, **kwargs)
        self._first: dict[TaskID, float] = {}  # a task's steps done before its first step()
        self._lines: dict[TaskID, tuple[float, float]] = {}  # (time, done) of its last line
        self._evaluations: list[tuple[float, float]] = []  # (end, seconds) of each one done

    @property
    def _prints_lines(self) -> bool:
        return not self.disable and not self.console.is_terminal

    def start(self) -> None:
        """Start the live bar -- in a terminal only: elsewhere nothing is drawn."""
        if not self._prints_lines:
            super().start()

    def stop(self) -> None:
        """Stop the live bar (in a terminal; elsewhere none was started)."""
        if not self._prints_lines:
            super().stop()

    def _print(self, line: str) -> None:
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def _task(self, task_id: TaskID) -> Task:
        return next(t for t in self.tasks if t.id == task_id)

    def update(self, task_id: TaskID, **kwargs: Any) -> None:
        """:meth:`rich.progress.Progress.update`; off a terminal, a phase's line when due."""
        super().update(task_id, **kwargs)
        if not self._prints_lines or task_id in self._first:
            return
        task = self._task(task_id)
        now, total = self.get_time(), task.total or 0.0
        last_time, last_done = self._lines.setdefault(
            task_id, (now if task.start_time is None else task.start_time, 0.0))
        quarter = total > 0 and int(4 * task.completed / total) > int(4 * last_done / total)
        if task.completed > last_done and (quarter or now - last_time >= LINE_EVERY_S):
            self._lines[task_id] = (now, task.completed)
            self._print(phase_line(task.description, task.completed, total,
                                   task.elapsed or 0.0))

    def remove_task(self, task_id: TaskID) -> None:
        """:meth:`rich.progress.Progress.remove_task`; the time of an evaluation (a task added
        with ``phase="evaluation"``) is kept for the RL steps' ETA."""
        task = self._task(task_id)
        if task.fields.get("phase") == "evaluation":
            self._evaluations.append((self.get_time(), task.elapsed or 0.0))
        super().remove_task(task_id)

    def step(self, task_id: TaskID, step: int, description: str, *, evaluation: str = "",
             evaluations_left: int = 0) -> None:
        """``task_id`` (of steps) is at ``step``, described by ``description`` and, on a step
        with one, its ``evaluation`` (the bar keeps showing the last one; a log line has it
        only where it ran). ``evaluations_left`` (still to come) enter the ETA at the mean
        time of this session's evaluations."""
        task = self._task(task_id)
        first = self._first.setdefault(task_id, task.completed)
        if evaluation:
            task.fields["last_evaluation"] = evaluation
        shown = task.fields.get("last_evaluation", "")
        self.update(task_id, completed=step,
                    description=f"{description} | eval {shown}" if shown else description)
        if not self._prints_lines:
            return
        seconds = [s for _, s in self._evaluations]
        during = sum(s for end, s in self._evaluations if end >= (task.start_time or 0.0))
        summary = f"{description} | eval {evaluation}" if evaluation else description
        self._print(step_line(step, int(task.total or step), summary, task.elapsed or 0.0,
                              int(step - first), extra=evaluations_left * (
                                  sum(seconds) / len(seconds) if seconds else 0.0),
                              excluded=during))


def progress_bar(console: Console, enabled: bool) -> RunProgress:
    """The run's progress bar on ``console`` (phase, bar, steps done, elapsed, remaining);
    off a terminal it draws nothing and prints lines instead (:class:`RunProgress`)."""
    return RunProgress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TimeRemainingColumn(), console=console, disable=not enabled,
    )


#: Off a terminal, a phase prints a line at least this often (and at each quarter).
LINE_EVERY_S = 60.0


def phase_line(description: str, done: float, total: float, elapsed: float) -> str:
    """A phase's line off a terminal: ``evaluation: 128 prompts x 8: 64/128 (50%), elapsed
    0:01:10, ETA 0:01:10`` (the time left at the pace so far)."""
    left = elapsed / done * (total - done) if done and total else 0.0
    share = f" ({done / total:.0%})" if total else ""
    return (f"{description}: {done:g}/{total:g}{share}, elapsed {clock(elapsed)}, "
            f"ETA {clock(left)}")


def clock(seconds: float) -> str:
    """``H:MM:SS`` (the progress bar's format) of a duration in seconds."""
    s = max(0, round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def rate(per_second: float) -> str:
    """A rate with the digits it needs: three significant ones below 100 (``0.25``,
    ``0.0123``, ``12.3``), whole numbers above (``846``)."""
    return f"{per_second:.0f}" if abs(per_second) >= 100 else f"{per_second:.3g}"


def step_line(step: int, total: int, summary: str, elapsed: float, steps: int, *,
              extra: float = 0.0, excluded: float = 0.0) -> str:
    """The line an RL step prints when the run's console is not a terminal (``nohup``, a log
    file), where the progress bar does not redraw: the step of ``total``, its ``summary``
    (reward, success, the evaluation of a step that had one), the time per step (``elapsed``
    seconds less the ``excluded`` seconds of evaluations, over the ``steps`` steps taken since
    the run started or resumed), the time elapsed and the time left: the steps left at that
    pace plus ``extra`` seconds (the evaluations still to come)."""
    per = max(elapsed - excluded, 0.0) / max(steps, 1)
    return (f"step {step}/{total} {summary} | {rate(per)} s/step, elapsed {clock(elapsed)}, "
            f"ETA {clock(per * (total - step) + extra)}")


def interrupted_line(where: str, out: Path, step: int | None,
                     continue_with: str | None = None) -> str:
    """What a run stopped by Ctrl-C / SIGTERM says: after ``step`` (checkpointed: continue
    with ``--resume``), or, ``step`` ``None``, during ``where`` before its first checkpoint
    (the same command starts it over, keeping the attempt's files in ``previous-attempt/``, or
    the first free ``previous-attempt-N/``). ``continue_with``: the command that continues the
    run instead (``bestk compare`` says "the same `bestk compare` command"), which also starts
    it over."""
    if step is None:
        again = (f"{continue_with} starts it over" if continue_with is not None else
                 "the same command starts the run over (keeping this attempt's files in "
                 f"{attempt_folder(out)})")
        return (f"interrupted during {where or 'start-up'}, before the run's first checkpoint: "
                f"nothing to continue from; {again}")
    return (f"interrupted after step {step}; checkpoint saved. Continue with "
            + (continue_with if continue_with is not None else f"`bestk train --resume {out}`"))


def start_line(cfg: ResolvedTrainConfig, *, task: str, uses_estimator: bool, params: int,
               trainable: int | None, out: Path, resuming_at: int | None) -> str:
    """The line a run starts with: task, estimator (``uses_estimator``: the algorithm's
    updates come from one) or algorithm and KAPPO k, beta, size (``trainable``: the LoRA
    adapters' parameters, ``None`` without adapters), run directory and the step a resumed run
    continues from."""
    what = (f"estimator={cfg.estimator}" if uses_estimator else
            f"algorithm={cfg.algorithm} k={cfg.kappo.k} beta={cfg.kappo.beta}")
    return (
        f"[bold]bestk train[/] task={task} {what} params={params:,}"
        + (f" (LoRA: {trainable:,} train)" if trainable is not None else "")
        + f" out={out}"
        + (f" (resuming at step {resuming_at})" if resuming_at is not None else "")
    )
