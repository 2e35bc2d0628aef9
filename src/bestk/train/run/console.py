"""What a run shows and how it stops: the progress bar, the start line, Ctrl-C / SIGTERM
handling (:class:`StopRequest`, :class:`Stopped`) and transformers' own progress bars."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
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

__all__ = ["progress_bar", "RunProgress", "StopRequest", "Stopped", "STOP_SIGNALS",
           "transformers_progress", "start_line", "interrupted_line", "step_line", "clock",
           "rate"]


class RunProgress(Progress):
    """The run's progress bar (:func:`progress_bar`), whose :meth:`step` also prints one
    line per step (:func:`step_line`) when its console is not a terminal (``nohup``, a log
    file), where the bar is not redrawn."""

    def __init__(self, *columns: str | ProgressColumn, **kwargs: Any) -> None:
        super().__init__(*columns, **kwargs)
        self._first: dict[TaskID, float] = {}  # a task's steps done before its first step()

    def step(self, task_id: TaskID, step: int, description: str) -> None:
        """``task_id`` (of steps) is at ``step``, described by ``description``."""
        task = next(t for t in self.tasks if t.id == task_id)
        first = self._first.setdefault(task_id, task.completed)
        self.update(task_id, completed=step, description=description)
        if self.disable or self.console.is_terminal:
            return
        self.console.print(step_line(step, int(task.total or step), description,
                                     task.elapsed or 0.0, int(step - first)),
                           markup=False, highlight=False, soft_wrap=True)


def progress_bar(console: Console, enabled: bool) -> RunProgress:
    """The run's progress bar on ``console`` (phase, bar, steps done, elapsed, remaining)."""
    return RunProgress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TimeRemainingColumn(), console=console, disable=not enabled,
    )


def clock(seconds: float) -> str:
    """``H:MM:SS`` (the progress bar's format) of a duration in seconds."""
    s = max(0, round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def rate(per_second: float) -> str:
    """A rate with the digits it needs: three significant ones below 100 (``0.25``,
    ``0.0123``, ``12.3``), whole numbers above (``846``)."""
    return f"{per_second:.0f}" if abs(per_second) >= 100 else f"{per_second:.3g}"


def step_line(step: int, total: int, summary: str, elapsed: float, steps: int) -> str:
    """The line an RL step prints when the run's console is not a terminal (``nohup``, a log
    file), where the progress bar does not redraw: the step of ``total``, its ``summary``
    (the progress bar's description: reward, success, the last evaluation), the time per step
    (``elapsed`` seconds over the ``steps`` steps taken since the run started or resumed), the
    time elapsed and the time left at that pace."""
    per = elapsed / max(steps, 1)
    return (f"step {step}/{total} {summary} | {rate(per)} s/step, elapsed {clock(elapsed)}, "
            f"ETA {clock(per * (total - step))}")


class Stopped(Exception):  # noqa: N818 - a request honoured, not an error
    """Raised by a phase that takes a ``should_stop`` callable (the SFT warm-up, the KAPPO
    reference bank, the step-0 evaluation) at its next step or batch once a stop was requested;
    the message says where (``"SFT step 20 of 100"``)."""


#: The signals a run stops on: Ctrl-C, and SIGTERM (a cluster's preemption, ``kill``).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """Ctrl-C (SIGINT) or SIGTERM while installed (a ``with`` block, main thread only).

    The first sets :attr:`requested` and says so at once on stderr: the run stops at its next
    safe point (the end of the RL step; the next SFT step, reference-bank batch or step-0
    evaluation batch, which poll :meth:`should_stop`), checkpoints and exits with
    :attr:`exit_status` (130 for SIGINT, 143 for SIGTERM). The second raises
    ``KeyboardInterrupt`` at once. The previous handlers come back on exit."""

    def __init__(self) -> None:
        self.requested = False
        self.signum: int | None = None
        self._previous: dict[int, _Handler] = {}

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested, self.signum = True, signum
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        again = "Ctrl-C again" if signum == signal.SIGINT else "Ctrl-C"
        os.write(2, (f"\nnote: {name}: stopping at the next SFT step, bank or evaluation "
                     f"batch, or RL step (with a checkpoint once the run has one); {again} "
                     "aborts at once\n").encode())

    def should_stop(self) -> bool:
        """Whether a stop was requested (what long phases poll between steps / batches)."""
        return self.requested

    @property
    def exit_status(self) -> int:
        """The command's exit status after the stop: 128 + the signal (130 without one)."""
        return 128 + (self.signum or signal.SIGINT)

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.getsignal(sig)
                signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        self._previous = {}


@contextmanager
def transformers_progress(enabled: bool) -> Iterator[None]:
    """transformers' own progress bars (e.g. "Writing model shards") on or off meanwhile."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    (hf_logging.enable_progress_bar if enabled else hf_logging.disable_progress_bar)()
    try:
        yield
    finally:
        (hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar)()


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
