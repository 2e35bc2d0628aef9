"""How a run stops: Ctrl-C / SIGTERM while it runs (:class:`StopRequest`) and the exception a
long phase raises at its next safe point once a stop was requested (:class:`Stopped`)."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from bestk.tasks.guard import SignalInterrupt, raises_signal_interrupt, running_user_code

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from types import FrameType
    from typing import TypeAlias

    #: What ``signal.getsignal`` returns: a handler, ``SIG_DFL`` / ``SIG_IGN``, or ``None``.
    _Handler: TypeAlias = Callable[[int, FrameType | None], object] | int | signal.Handlers | None

__all__ = ["StopRequest", "Stopped", "STOP_SIGNALS"]


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
    :class:`~bestk.tasks.guard.SignalInterrupt` (a ``KeyboardInterrupt``) at once, and so
    does the first when it interrupts user code (a reward function:
    :func:`~bestk.tasks.guard.running_user_code`), which has no safe point and may never
    return. The previous handlers come back on exit."""

    def __init__(self) -> None:
        self.requested = False
        self.signum: int | None = None
        self._previous: dict[int, _Handler] = {}

    @raises_signal_interrupt
    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise SignalInterrupt
        self.requested, self.signum = True, signum
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        busy = running_user_code()
        if busy is not None:  # a reward that hangs would never reach a safe point
            os.write(2, (f"\nnote: {name} while {busy} was running: stopping at once, "
                         "without finishing the step in progress\n").encode())
            raise SignalInterrupt
        again = "Ctrl-C again" if signum == signal.SIGINT else "Ctrl-C"
        os.write(2, (f"\nnote: {name}: stopping at the next SFT step, bank or evaluation "
                     f"batch, or RL step (with a checkpoint once the run has one); {again} "
                     "aborts at once\n").encode())

    def request(self, signum: int | None = None) -> None:
        """Ask the run to stop at its next safe point, as a first signal ``signum`` does but
        without its note (``bestk compare`` passes its own stop on to a run; ``None``: exit
        status 130); a stop already requested is kept as it is."""
        if not self.requested:
            self.requested, self.signum = True, signum

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
