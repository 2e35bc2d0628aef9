"""What a run shows and how it stops: the progress bar, the start line, Ctrl-C handling and
transformers' own progress bars."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

__all__ = ["progress_bar", "StopRequest", "transformers_progress"]


def progress_bar(console: Console, enabled: bool) -> Progress:
    """The run's progress bar on ``console`` (phase, bar, steps done, elapsed, remaining)."""
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TimeRemainingColumn(), console=console, disable=not enabled,
    )


class StopRequest:
    """Ctrl-C while installed (a ``with`` block, main thread only): the first sets
    :attr:`requested` (the run finishes its step, checkpoints and stops), the second raises
    ``KeyboardInterrupt`` at once; the previous handler comes back on exit."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def _handler(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.getsignal(signal.SIGINT)
            signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None


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
