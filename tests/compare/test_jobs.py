"""``bestk.compare.jobs``: Ctrl-C and SIGTERM stop a comparison at its jobs' next safe point,
with the exit status of the signal and a line saying to run the same ``bestk compare`` command,
which then continues it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bestk.cli import app
from bestk.train.run.directory import read_metrics
from bestk.train.runtime.files import latest_checkpoint
from tests import conftest
from tests.conftest import ROOT

pytestmark = pytest.mark.usefixtures("restore_torch_threads")


def _compare_args(out: Path, workers: int) -> list[str]:
    args = ["compare", "--estimators", "grpo,rloo", "--seeds", "1", "--max-steps", "30",
            "--workers", str(workers), "--out", str(out), "--quiet"]
    args += conftest.set_args(*conftest.TINY, "checkpoint_every=1000", "eval.every=1000")
    return args


def _trained(run: Path) -> bool:
    return any(r["phase"] == "train" for r in read_metrics(run / "metrics.jsonl"))


@pytest.mark.parametrize("signame, status, workers", [
    ("SIGTERM", 143, 1), ("SIGINT", 130, 1), ("SIGTERM", 143, 2),
])
def test_a_signal_stops_the_comparison_with_its_status_and_the_same_command_continues(
        tmp_path, signame, status, workers):
    """A signal during the first RL run: that run stops after its step with a checkpoint, no
    other run starts, the command exits 130 (Ctrl-C) or 143 (SIGTERM) saying to run the same
    ``bestk compare`` command -- not ``bestk train --resume`` -- which then finishes the grid,
    the interrupted run continued from its checkpoint."""
    out = tmp_path / "c"
    first = out / "grpo" / "seed0"
    proc = subprocess.Popen([sys.executable, "-m", "bestk", *_compare_args(out, workers)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 180
        while time.time() < deadline and proc.poll() is None and not _trained(first):
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read().decode()
        os.kill(proc.pid, getattr(signal, signame))
        rc = proc.wait(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    err = proc.stderr.read().decode()
    assert rc == status, err
    assert "bestk train --resume" not in err and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (
        "interrupted: the finished runs are kept, an interrupted run continues from its last "
        "checkpoint; run the same `bestk compare` command to continue")
    steps = [r["step"] for r in read_metrics(first / "metrics.jsonl") if r["phase"] == "train"]
    assert 1 <= len(steps) < 30
    if workers == 1:
        assert latest_checkpoint(first / "checkpoints").name == f"step_{steps[-1]:07d}.safetensors"
        assert "Continue with the same `bestk compare` command" in err
        assert not (out / "rloo").exists()  # no run started after the stop
    again = CliRunner().invoke(app, _compare_args(out, 1))
    assert again.exit_code == 0, again.output
    for method in ("grpo", "rloo"):
        assert (out / method / "seed0" / "result.json").is_file()
    done = [r["step"] for r in read_metrics(first / "metrics.jsonl") if r["phase"] == "train"]
    assert done == list(range(1, 31))  # each step once: continued, not started over


def test_a_damaged_cached_sft_file_is_recomputed_saying_so(tmp_path, capsys):
    """``_sft/seed0.pt`` truncated (a disk filled, a copy cut short) once gave a torch
    traceback on the next ``bestk compare``; it is bestk's own cache entry, under its own key,
    so it is recomputed, with one line naming it; reading it is a one-line error too."""
    from bestk.compare.jobs import sft_job
    from bestk.compare.keys import weights_digest
    from bestk.train.config.io import config_to_dict
    from bestk.train.validation import resolve_defaults

    cfg = config_to_dict(resolve_defaults(conftest.tiny_config(tmp_path / "_sft" / "work0")))
    path = tmp_path / "_sft" / "seed0.pt"
    sft_job(cfg, str(path), None, None)
    digest = weights_digest(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"seed0\.pt' is damaged \(truncated or overwritten\?\)"):
        weights_digest(path)
    capsys.readouterr()
    sft_job(cfg, str(path), None, None)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"note: weights file '{path}' is damaged"), err
    assert err[0].endswith("; recomputing the cached SFT weights")
    assert weights_digest(path) == digest  # the same weights again
    stamp = path.stat().st_mtime_ns
    sft_job(cfg, str(path), None, None)  # intact: reused, nothing said
    assert path.stat().st_mtime_ns == stamp and not capsys.readouterr().err


def wait_for_stop(folder: str) -> None:
    """A worker's job (imported by name in the workers): says it started, polls the stop
    as a grid's jobs do, and says it stopped."""
    from bestk.compare.jobs import stop_requested

    Path(folder, f"started-{os.getpid()}").touch()
    while not stop_requested():
        time.sleep(0.05)
    Path(folder, f"stopped-{os.getpid()}").touch()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in \
        Path(f"/proc/{pid}/status").read_text().lower()


@pytest.mark.skipif(sys.platform != "linux", reason="watches /proc")
def test_workers_stop_when_the_main_process_is_killed(tmp_path):
    """``kill -9`` (or the OOM killer) on a comparison with --workers 2 left its worker
    processes waiting on the dead pool forever, each holding its model's memory; now each
    stops its job at the next safe point (as after Ctrl-C) and ends."""
    code = ("import sys\nfrom bestk.compare.jobs import execute\n"
            "from tests.compare.test_jobs import wait_for_stop\n"
            "execute([(wait_for_stop, sys.argv[1])] * 2, 2, False, 'jobs')\n")
    root = ROOT
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], cwd=root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pids: list[int] = []
    try:
        deadline = time.time() + 120
        while time.time() < deadline and len(pids) < 2:
            pids = [int(p.name.split("-")[1]) for p in tmp_path.glob("started-*")]
            time.sleep(0.1)
        assert len(pids) == 2, "the workers never started their jobs"
        proc.kill()
        proc.wait()
        deadline = time.time() + 30
        while time.time() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids), "a worker outlived its main process"
        assert sorted(p.name for p in tmp_path.glob("stopped-*")) == \
            sorted(f"stopped-{p}" for p in pids)
    finally:
        proc.kill()
        for p in pids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
