"""bestk.tasks.guard: user code runs behind one guard -- whatever it raises (``SystemExit``,
``KeyboardInterrupt`` of its own, ``GeneratorExit``, any ``BaseException``) is a one-line
``ValueError`` naming it, a real Ctrl-C still interrupts, and a change of the working directory
is undone (with one warning per code)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from bestk.tasks.guard import (
    SignalInterrupt,
    UserCodeError,
    raises_signal_interrupt,
    running_user_code,
    user_code,
)


class Custom(BaseException):
    pass


@pytest.mark.parametrize("exc, shown", [
    (SystemExit(0), "SystemExit(0)"),
    (SystemExit("bye"), "SystemExit('bye')"),
    (KeyboardInterrupt(), "KeyboardInterrupt()"),
    (GeneratorExit(), "GeneratorExit()"),
    (Custom("two\nlines"), "Custom('two\\nlines')"),
    (ZeroDivisionError("float division by zero"), "ZeroDivisionError: float division by zero"),
])
def test_whatever_user_code_raises_is_one_line_naming_it(exc, shown):
    with pytest.raises(UserCodeError) as e:
        with user_code("reward function 'f'", " for prompt 'p'"):
            raise exc
    assert str(e.value) == f"reward function 'f' raised {shown} for prompt 'p'"
    assert isinstance(e.value, ValueError) and e.value.__cause__ is exc
    assert running_user_code() is None


def test_passthrough_and_nothing_raised():
    with user_code("x"):
        assert running_user_code() == "x"
    with pytest.raises(LookupError), user_code("x", passthrough=(LookupError,)):
        raise KeyError("k")


def test_a_real_ctrl_c_still_interrupts_user_code():
    """Under Python's own SIGINT handler a Ctrl-C while user code runs is a KeyboardInterrupt
    (a :class:`SignalInterrupt`), not an error of the code; the handler is Python's again
    afterwards."""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(SignalInterrupt), user_code("reward function 'slow'"):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_under_a_marked_handler_a_plain_keyboard_interrupt_is_the_codes(monkeypatch):
    """bestk's stop handler raises SignalInterrupt itself: a plain KeyboardInterrupt under it
    comes from the code; under someone else's handler it may be a real Ctrl-C and is let
    through."""
    seen = []
    marked = raises_signal_interrupt(lambda signum, frame: seen.append(signum))
    previous = signal.signal(signal.SIGINT, marked)
    try:
        with pytest.raises(UserCodeError, match="raised KeyboardInterrupt"), user_code("f"):
            raise KeyboardInterrupt
        signal.signal(signal.SIGINT, lambda signum, frame: None)
        with pytest.raises(KeyboardInterrupt) as e, user_code("f"):
            raise KeyboardInterrupt
        assert type(e.value) is KeyboardInterrupt
    finally:
        signal.signal(signal.SIGINT, previous)


def test_off_the_main_thread_a_keyboard_interrupt_is_the_codes():
    got: list[BaseException] = []

    def run() -> None:
        try:
            with user_code("f"):
                raise KeyboardInterrupt
        except BaseException as e:  # noqa: BLE001 - what the guard made of it
            got.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert type(got[0]) is UserCodeError


def test_a_change_of_the_working_directory_is_undone_with_one_warning(tmp_path, monkeypatch,
                                                                      capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    for _ in range(3):
        with user_code("reward function 'wander'"):
            os.chdir(tmp_path / "elsewhere")
        assert os.getcwd() == str(tmp_path)
    with pytest.raises(UserCodeError), user_code("reward function 'wander'"):
        os.chdir("/")
        raise SystemExit(1)
    assert os.getcwd() == str(tmp_path)
    err = capsys.readouterr().err.splitlines()
    assert err == [f"warning: reward function 'wander' changed the working directory to "
                   f"'{tmp_path / 'elsewhere'}'; bestk changed it back to '{tmp_path}' (and "
                   "does after every call)"]
