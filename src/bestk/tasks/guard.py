"""User code -- a reward function named by ``task.reward``, the module it is loaded from --
runs behind one guard, :func:`user_code`.

* **Whatever it raises is one line.** Any exception the code raises -- ``SystemExit`` (a
  ``sys.exit()`` would otherwise end ``bestk train`` with status 0, no message and no finished
  run), ``KeyboardInterrupt`` or ``GeneratorExit`` raised by the code itself, any other
  ``BaseException`` or ``Exception`` -- becomes a :class:`UserCodeError` (a ``ValueError``:
  ``error: ...`` and status 2 under the command line) naming the code and what it raised.
* **A real signal is not the code's.** Ctrl-C or SIGTERM arriving while the code runs raises
  :class:`SignalInterrupt` (a ``KeyboardInterrupt``), which the guard lets through: where
  Python's own SIGINT handler is in effect the guard puts one in its place that raises it
  (and puts Python's back afterwards); bestk's stop handler
  (:class:`bestk.train.runtime.stop.StopRequest`, marked with :func:`raises_signal_interrupt`)
  raises it itself, at the first signal, when it finds user code running
  (:func:`running_user_code`) -- a reward that hangs cannot hold a run past its SIGTERM. Under
  a SIGINT handler of someone else's a plain ``KeyboardInterrupt`` may be a real Ctrl-C, and
  is let through unchanged.
* **The working directory stays.** Code that changes it (``os.chdir``) has it changed back
  when it returns or raises, with a warning on stderr once per code, so relative paths
  (``--out``, data files) keep meaning what they meant.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import TypeVar

__all__ = ["UserCodeError", "SignalInterrupt", "user_code", "running_user_code",
           "raises_signal_interrupt", "describe_exception"]

F = TypeVar("F", bound=Callable[..., object])


class UserCodeError(ValueError):
    """User code raised (one line: what code, what it raised, where)."""


class SignalInterrupt(KeyboardInterrupt):  # noqa: N818 - a KeyboardInterrupt, named as one
    """A ``KeyboardInterrupt`` raised by a signal handler -- a real Ctrl-C or SIGTERM -- rather
    than by user code: :func:`user_code` lets it through."""


_MARK = "_bestk_raises_signal_interrupt"


def raises_signal_interrupt(handler: F) -> F:
    """Mark a signal handler (function or method) as one that raises :class:`SignalInterrupt`,
    never a plain ``KeyboardInterrupt``: under it a plain one comes from the code itself."""
    setattr(handler, _MARK, True)
    return handler


@raises_signal_interrupt
def _sigint(signum: int, frame: FrameType | None) -> None:
    """Python's default SIGINT handler, raising :class:`SignalInterrupt`."""
    raise SignalInterrupt


_local = threading.local()  # .running: the labels of the user code running in this thread
_warned: set[str] = set()  # labels whose change of the working directory was reported


def _running() -> list[str]:
    if not hasattr(_local, "running"):
        _local.running = []
    running: list[str] = _local.running
    return running


def running_user_code() -> str | None:
    """The label of the user code this thread is running inside (the innermost), or ``None``.
    A signal handler runs in the main thread: there it says whether the signal interrupted
    user code."""
    running = _running()
    return running[-1] if running else None


def describe_exception(e: BaseException) -> str:
    """One line for an exception: ``ZeroDivisionError: float division by zero`` (an
    ``Exception``), or its ``repr`` for the others (``SystemExit(0)``, ``KeyboardInterrupt()``,
    ``GeneratorExit()``), cut to 200 characters."""
    if isinstance(e, Exception):
        text = str(e).strip().splitlines()
        line = f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
    else:
        line = " ".join(repr(e).split())
    return line if len(line) <= 200 else line[:197] + "..."


def _is_signal(e: BaseException, handler: object) -> bool:
    """Whether ``e`` came from a signal rather than the user code: a :class:`SignalInterrupt`,
    or a plain ``KeyboardInterrupt`` in the main thread under a SIGINT handler that may raise
    one (``handler``: the one in effect, ``None`` off the main thread)."""
    if isinstance(e, SignalInterrupt):
        return True
    if not isinstance(e, KeyboardInterrupt) or handler is None:
        return False
    return callable(handler) and not getattr(handler, _MARK, False)


def _getcwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # already removed: nothing to keep
        return None


def _restore_cwd(label: str, cwd: str | None) -> None:
    """Change back to ``cwd`` if the code left another working directory (warn once)."""
    if cwd is None:
        return
    now = _getcwd()
    if now == cwd:
        return
    try:
        os.chdir(cwd)
    except OSError as e:
        raise UserCodeError(f"{label} changed the working directory to {now!r}, and bestk "
                            f"cannot change back to {cwd!r}: {e.strerror}") from None
    if label not in _warned:
        _warned.add(label)
        print(f"warning: {label} changed the working directory to {now!r}; bestk changed it "
              f"back to {cwd!r} (and does after every call)", file=sys.stderr, flush=True)


class user_code:  # noqa: N801 - used as a function: ``with user_code(label): ...``
    """Run the block -- user code, ``label`` (``"reward function 'fmt' of task 'gsm8k'"``) --
    behind the guard of the module docstring: an exception it raises, but a signal's and
    those of ``passthrough``, is a :class:`UserCodeError` ``"{label} raised
    {describe_exception(e)}{context}"`` (chained to it); the working directory is restored.

    While the block runs :func:`running_user_code` is ``label``. In the main thread, under
    Python's own SIGINT handler, a Ctrl-C raises :class:`SignalInterrupt` meanwhile."""

    __slots__ = ("label", "context", "passthrough", "_handler", "_ours", "_cwd")

    def __init__(self, label: str, context: str = "",
                 passthrough: tuple[type[BaseException], ...] = ()) -> None:
        self.label, self.context, self.passthrough = label, context, passthrough

    def __enter__(self) -> None:
        main = threading.current_thread() is threading.main_thread()
        self._handler = signal.getsignal(signal.SIGINT) if main else None
        self._ours = self._handler is signal.default_int_handler
        if self._ours:
            signal.signal(signal.SIGINT, _sigint)
        _running().append(self.label)
        self._cwd = _getcwd()

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if self._ours:
                signal.signal(signal.SIGINT, signal.default_int_handler)
        finally:
            _running().pop()
            _restore_cwd(self.label, self._cwd)
        if e is None or isinstance(e, self.passthrough) or \
                _is_signal(e, _sigint if self._ours else self._handler):
            return
        raise UserCodeError(f"{self.label} raised {describe_exception(e)}{self.context}") from e
