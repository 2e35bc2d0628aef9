"""``bestk.train.run.console``: what a run shows. In a terminal the progress bar (with the time
left) covers the start and end evaluations too; where the console is not a terminal (``nohup``,
a log file) each RL step prints one line: step, summary (reward, ...), time per step, elapsed,
ETA."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from bestk.train.run.console import clock, progress_bar, rate, step_line
from bestk.train.trainer import Trainer
from tests.conftest import tiny_config

pytestmark = pytest.mark.usefixtures("restore_torch_threads")

#: One RL step's line in a log.
STEP_LINE = re.compile(r"^step (\d+)/(\d+) RL reward=\d\.\d{3} success=\d\.\d{3}"
                       r"( \| eval pass@1=\d\.\d{3} pass@4=\d\.\d{3})? \| [0-9.e+-]+ s/step, "
                       r"elapsed \d+:\d\d:\d\d, ETA \d+:\d\d:\d\d$")


def test_clock_rate_and_step_line():
    assert [clock(s) for s in (0, 59.4, 61, 3725.6, -1)] == [
        "0:00:00", "0:00:59", "0:01:01", "1:02:06", "0:00:00"]
    assert [rate(x) for x in (0.25, 0.0123, 12.345, 99.94, 846.3, 0)] == [
        "0.25", "0.0123", "12.3", "99.9", "846", "0"]
    assert step_line(3, 10, "RL reward=0.500", elapsed=6.0, steps=3) == (
        "step 3/10 RL reward=0.500 | 2 s/step, elapsed 0:00:06, ETA 0:00:14")


def _bar(terminal: bool, enabled: bool = True):
    out = io.StringIO()
    return progress_bar(Console(file=out, force_terminal=terminal, width=60), enabled), out


def test_a_step_prints_a_line_only_where_the_bar_is_not_redrawn():
    for terminal, enabled in ((False, True), (True, True), (False, False)):
        bar, out = _bar(terminal, enabled)
        with bar:
            task = bar.add_task("RL", total=5, completed=2)  # resumed at step 2
            bar.step(task, 3, "RL reward=0.123 success=0.000")
            bar.step(task, 4, "RL reward=0.456 success=0.250")
        lines = [x for x in out.getvalue().splitlines() if x.startswith("step ")]
        if terminal or not enabled:
            assert lines == []
        else:  # two steps of this session, 2 of 5 left after step 3, 1 after step 4
            assert [x.split(" | ")[0] for x in lines] == [
                "step 3/5 RL reward=0.123 success=0.000", "step 4/5 RL reward=0.456 success=0.250"]
            assert all(re.search(r"s/step, elapsed \d:\d\d:\d\d, ETA \d:\d\d:\d\d$", x)
                       for x in lines)


def test_under_nohup_each_rl_step_prints_one_line(tmp_path, capsys, monkeypatch):
    """stderr not a terminal (``nohup``, ``> log 2>&1``): one line per RL step, with the
    evaluation only on the steps that have one; each evaluation prints complete lines with its
    progress; no line is a truncated bar row ('…'); nothing of the kind with ``--quiet``."""
    monkeypatch.setenv("TTY_COMPATIBLE", "0")  # whatever the test runner's stderr is
    Trainer(tiny_config(tmp_path / "a", "max_steps=5")).run(progress=True)
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("step ")]
    assert len(lines) == 5, err
    matches = [STEP_LINE.match(x) for x in lines]
    assert all(matches), lines
    assert [(m.group(1), m.group(2), bool(m.group(3))) for m in matches] == [
        ("1", "5", False), ("2", "5", True), ("3", "5", False), ("4", "5", True),
        ("5", "5", True)]  # eval.every=2, and the end
    assert "…" not in err and "━" not in err, err
    evals = [x for x in err.splitlines() if x.startswith("evaluation: ")]
    # 4 evaluations (steps 0, 2, 4, 5), each ending with a line at 100%
    assert sum(x.endswith(", ETA 0:00:00") and "(100%)" in x for x in evals) == 4, evals
    Trainer(tiny_config(tmp_path / "b", "max_steps=2")).run(progress=False)
    assert "step " not in capsys.readouterr().err


def test_phase_lines_off_a_terminal_at_each_quarter_and_the_eta_counts_evaluations():
    clock_now = [0.0]
    bar, out = _bar(terminal=False)
    bar.get_time = lambda: clock_now[0]  # rich's clock for elapsed times
    with bar:
        rl = bar.add_task("RL", total=4)
        ev = bar.add_task("evaluation: 8 prompts x 2", total=8, phase="evaluation")
        for _ in range(8):  # 8 prompts, one a second: lines at 2, 4, 6, 8 (each quarter)
            clock_now[0] += 1.0
            bar.update(ev, advance=1)
        bar.remove_task(ev)
        clock_now[0] += 2.0
        bar.step(rl, 1, "RL reward=0.100", evaluation="pass@1=0.500")
        clock_now[0] += 2.0
        bar.step(rl, 2, "RL reward=0.200", evaluations_left=1)
    lines = out.getvalue().splitlines()
    assert lines[:4] == [f"evaluation: 8 prompts x 2: {d}/8 ({d * 100 // 8}%), elapsed "
                         f"0:00:0{d}, ETA 0:00:0{8 - d}" for d in (2, 4, 6, 8)]
    # the RL task's 12 s include the 8 s evaluation: 2 s a step; 2 steps + 1 evaluation left
    assert lines[4] == ("step 1/4 RL reward=0.100 | eval pass@1=0.500 | 2 s/step, elapsed "
                        "0:00:10, ETA 0:00:06")
    assert lines[5] == "step 2/4 RL reward=0.200 | 2 s/step, elapsed 0:00:12, ETA 0:00:12"
    assert len(lines) == 6  # no bar row at the end


def test_a_phase_prints_at_least_every_minute_between_quarters():
    clock_now = [0.0]
    bar, out = _bar(terminal=False)
    bar.get_time = lambda: clock_now[0]
    with bar:
        ev = bar.add_task("bank", total=100)
        for _ in range(10):  # 10 of 100 done, 70 s each: no quarter, a line a minute
            clock_now[0] += 70.0
            bar.update(ev, advance=1)
    assert len(out.getvalue().splitlines()) == 10


def test_the_start_and_end_evaluations_are_on_the_progress_bar(tmp_path, monkeypatch):
    """The evaluations at the start and the end of RL (and between) run on the run's progress
    bar, which shows the time left."""
    from rich.progress import TimeRemainingColumn

    import bestk.train.trainer as trainer_module

    seen = []
    real = trainer_module.evaluate

    def spy(*args, progress=None, **kw):
        seen.append(progress is not None and not progress.disable and any(
            isinstance(c, TimeRemainingColumn) for c in progress.columns))
        return real(*args, progress=progress, **kw)

    monkeypatch.setattr(trainer_module, "evaluate", spy)
    Trainer(tiny_config(tmp_path / "a", "max_steps=2")).run(progress=True)
    assert seen == [True, True]  # step 0 and step 2


def test_a_signal_while_user_code_runs_stops_at_once(capfd):
    """The first Ctrl-C / SIGTERM only asks the run to stop at its next safe point -- unless it
    interrupts user code (a reward function, which may never return): then it raises at once.
    A KeyboardInterrupt the code raises itself is the code's error, not a stop."""
    import os
    import signal
    import time

    from bestk.tasks.guard import SignalInterrupt, UserCodeError, user_code
    from bestk.train.runtime.stop import StopRequest

    before = signal.getsignal(signal.SIGTERM)
    with StopRequest() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)  # the handler runs: a request, no exception
        assert stop.requested and stop.signum == signal.SIGTERM
    with StopRequest() as stop:
        started = time.monotonic()
        with pytest.raises(SignalInterrupt), user_code("reward function 'hang' of task 't'"):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
        assert time.monotonic() - started < 10
        assert stop.requested and stop.exit_status == 143
        with pytest.raises(UserCodeError, match="raised KeyboardInterrupt"), user_code("f"):
            raise KeyboardInterrupt
    assert signal.getsignal(signal.SIGTERM) == before
    err = capfd.readouterr().err
    assert "note: SIGTERM while reward function 'hang' of task 't' was running: stopping at " \
        "once, without finishing the step in progress" in err
