"""Run directories you can trust: one writer (a lock), verified checkpoints with fallback,
validation before work, one-line OS errors, re-run = resume and the resume policy, cleaned
temporaries, files that respect the umask."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from bestk.train.run.directory import (
    check_resume,
    read_metrics,
    read_run_config,
)
from bestk.train.run.lock import RunDirectoryBusy, RunLock
from bestk.train.runtime.files import (
    checksum_path,
    latest_valid_checkpoint,
    list_checkpoints,
    save_checkpoint,
    verify_checkpoint,
)
from bestk.train.trainer import Trainer
from tests.conftest import TINY, invoke, is_timing, one_line_error, set_args, tiny_config

#: The finished run every test copies: 4 RL steps, checkpoints at 0, 2, 4, evaluations at 0, 2, 4.
RUN = ["checkpoint_every=2", "keep_checkpoints=3"]


pytestmark = pytest.mark.usefixtures("restore_torch_threads")


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("finished") / "run"
    Trainer(tiny_config(out, "max_steps=4", *RUN)).run(progress=False)
    return out


@pytest.fixture
def run(finished, tmp_path) -> Path:
    """A private copy of the finished run."""
    dst = tmp_path / "run"
    shutil.copytree(finished, dst)
    return dst


def cli_args(out: Path, *extra: str, max_steps: int = 4) -> list[str]:
    """``bestk train`` arguments of the finished run's config (the same command again)."""
    args = ["train", "--out", str(out), "--quiet", "--max-steps", str(max_steps)]
    args += set_args(*TINY, *RUN, *extra)
    return args


def train_rows(out: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not is_timing(k)}
            for r in read_metrics(out / "metrics.jsonl") if r["phase"] == "train"]


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(out / "final" / "model.safetensors")


def assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = final_weights(a), final_weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=0)


def subprocess_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bestk", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


# -- 1. one writer ------------------------------------------------------------------------------
def test_lock_refuses_a_second_holder_naming_the_pid(tmp_path):
    first = RunLock(tmp_path).acquire()
    assert (tmp_path / ".lock").read_text().strip() == str(os.getpid())
    with pytest.raises(RunDirectoryBusy, match=f"in use by another bestk process \\(pid "
                       f"{os.getpid()}\\)"):
        RunLock(tmp_path).acquire()
    first.release()
    RunLock(tmp_path).acquire().release()


def test_lock_is_released_when_its_holder_is_killed(tmp_path):
    code = ("import sys, time; from bestk.train.run.lock import RunLock; "
            "lock = RunLock(sys.argv[1]).acquire(); print('locked', flush=True); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"locked\n"
        with pytest.raises(RunDirectoryBusy, match=f"pid {proc.pid}"):
            RunLock(tmp_path).acquire()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    RunLock(tmp_path).acquire().release()  # the kernel dropped the dead holder's lock


def test_two_concurrent_writers_the_second_is_refused(tmp_path):
    """Two real ``bestk train --out DIR`` processes: the second exits 2 naming the first's
    pid; the first's log holds each step once."""
    out = tmp_path / "dual"
    args = [sys.executable, "-m", "bestk", *cli_args(out, "eval.every=1000", "checkpoint_every=1",
                                                     max_steps=400)]
    first = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and first.poll() is None:
            lock = out / ".lock"
            if lock.is_file() and lock.read_text().strip() == str(first.pid):
                break
            time.sleep(0.05)
        assert first.poll() is None, first.stderr.read().decode()
        second = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2, second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), second.stderr
        assert f"in use by another bestk process (pid {first.pid})" in lines[0]
        assert first.poll() is None  # the first is still training, undisturbed
        while time.time() < deadline and len(train_rows(out)) < 2:
            time.sleep(0.05)
        os.kill(first.pid, signal.SIGINT)
        assert first.wait(timeout=120) == 130
    finally:
        first.kill()
        first.wait()
    steps = [r["step"] for r in train_rows(out)]
    assert steps == list(range(1, len(steps) + 1)) and steps  # each step once, in order
    assert read_run_config(out).max_steps == 400


# -- 2. config.yaml -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "content, match",
    [
        ("", "is empty"),
        ("estimator: [grpo\n", "is not valid YAML: .* at line"),
        ("- 1\n- 2\n", "must hold a mapping"),
        ("rollout: {nn: 3}\n", "unknown config key 'rollout.nn'"),
    ],
)
def test_a_bad_config_yaml_is_a_one_line_error(run, content, match):
    (run / "config.yaml").write_text(content)
    for args in (["train", "--resume", run, "--quiet"], cli_args(run)):
        line = one_line_error(invoke(*args))
        assert str(run / "config.yaml") in line
        assert __import__("re").search(match, line), line
    assert (run / "config.yaml").read_text() == content  # never overwritten with defaults


# -- 3. verified checkpoints ----------------------------------------------------------------------
def _damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    if how == "truncated":
        path.write_bytes(bytes(data[: len(data) // 3]))
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "random_middle":
        gen = torch.Generator().manual_seed(0)
        noise = torch.randint(0, 256, (8192,), generator=gen, dtype=torch.uint8).numpy()
        data[mid : mid + 8192] = noise.tobytes()
        path.write_bytes(bytes(data))
    elif how == "zeroed_middle":
        data[mid : mid + 8192] = bytes(8192)
        path.write_bytes(bytes(data))
    elif how == "no_checksum":
        checksum_path(path).unlink()
    else:  # pragma: no cover
        raise AssertionError(how)


@pytest.mark.parametrize("how", ["truncated", "empty", "random_middle", "zeroed_middle",
                                 "no_checksum"])
def test_a_damaged_latest_checkpoint_falls_back_to_the_newest_valid_one(
    finished, run, how
):
    newest = run / "checkpoints" / "step_0000004.safetensors"
    _damage(newest, how)
    assert verify_checkpoint(newest) is not None
    assert latest_valid_checkpoint(run / "checkpoints")[0].name == "step_0000002.safetensors"
    r = invoke(*cli_args(run))  # the same command again: resumes from step 2, says so
    assert r.exit_code == 0, r.output
    err = r.output
    assert "checkpoint step_0000004.safetensors is damaged" in err
    assert "resuming from the newest valid checkpoint, step_0000002.safetensors" in err
    assert (run / "checkpoints" / "step_0000004.safetensors.damaged").exists() or how == "empty"
    # ...and the continuation is the uninterrupted run, bit for bit
    assert train_rows(run) == train_rows(finished)
    assert_same_weights(run, finished)
    assert verify_checkpoint(newest) is None  # step 4 rewritten, with a checksum


def test_no_valid_checkpoint_is_a_one_line_error(run):
    for ck in list_checkpoints(run / "checkpoints"):
        _damage(ck, "truncated")
    line = one_line_error(invoke("train", "--resume", run, "--quiet"))
    assert "no valid checkpoint in" in line
    for step in (0, 2, 4):
        assert f"step_{step:07d}.safetensors: sha256 mismatch" in line


def test_checkpoints_carry_a_sha256sum_compatible_checksum(tmp_path):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    path = save_checkpoint(tmp_path, 5, model, opt, {})
    import hashlib

    digest, name = checksum_path(path).read_text().split()
    assert name == path.name and digest == hashlib.sha256(path.read_bytes()).hexdigest()
    from bestk.train.runtime.files import load_checkpoint

    _damage(path, "zeroed_middle")
    with pytest.raises(ValueError, match="step_0000005.safetensors' is damaged: sha256 mismatch"):
        load_checkpoint(path, torch.nn.Linear(3, 2))



def _rewrite_checkpoint(path: Path, edit) -> None:
    """Rewrite checkpoint ``path`` with its run state passed through ``edit`` (the tensors kept)
    and its checksum recomputed to match: a well-formed, verifying file."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from bestk.train.runtime.files import file_sha256

    with safe_open(str(path), framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        state = json.loads(f.metadata()["state"])
    save_file(tensors, str(path), metadata={"state": json.dumps(edit(state))})
    checksum_path(path).write_text(f"{file_sha256(path)}  {path.name}\n")
    assert verify_checkpoint(path) is None


def test_a_checkpoint_renamed_to_another_step_is_refused_naming_both(run):
    """``step_0000002`` renamed to ``step_0000004`` with its checksum recomputed verifies, but
    it holds step 2: refused in one line naming the file and both steps, nothing touched."""
    from bestk.train.runtime.files import file_sha256

    ck = run / "checkpoints"
    two, four = ck / "step_0000002.safetensors", ck / "step_0000004.safetensors"
    four.unlink()
    checksum_path(two).unlink()
    os.replace(two, four)
    checksum_path(four).write_text(f"{file_sha256(four)}  {four.name}\n")
    assert verify_checkpoint(four) is None
    before = _files(run)
    line = one_line_error(invoke(*cli_args(run, max_steps=6)))
    assert "step_0000004.safetensors" in line and "holds step 2" in line, line
    assert _files(run) == before


def test_a_checkpoint_copied_from_another_run_is_refused_naming_both(run, tmp_path):
    """The newest checkpoint replaced by (and checksummed as) the step-4 checkpoint of a run
    with another seed: same model shapes, so it would load; refused in one line naming both
    runs' config digests and the differing key, nothing touched."""
    other = tmp_path / "other"
    Trainer(tiny_config(other, "max_steps=4", *RUN, "seed=7")).run(progress=False)
    for name in ("step_0000004.safetensors", "step_0000004.sha256"):
        shutil.copy(other / "checkpoints" / name, run / "checkpoints" / name)
    assert verify_checkpoint(run / "checkpoints" / "step_0000004.safetensors") is None
    before = _files(run)
    line = one_line_error(invoke(*cli_args(run, max_steps=6)))
    assert "step_0000004.safetensors" in line and "another run" in line, line
    digests = __import__("re").findall(r"config digest ([0-9a-f]{16})", line)
    assert len(digests) == 2 and digests[0] != digests[1], line
    assert "seed (7 there, 0 here)" in line, line
    assert _files(run) == before


def test_a_checkpoint_without_a_run_identity_still_resumes(finished, run):
    """A checkpoint of the format before run identities (no ``run`` in its state) is read as
    before: its step is checked, its config cannot be, and a note says so."""
    newest = run / "checkpoints" / "step_0000004.safetensors"
    _rewrite_checkpoint(newest, lambda st: {k: v for k, v in st.items() if k != "run"})
    (run / ".finished").unlink()
    r = invoke(*cli_args(run))
    assert r.exit_code == 0, r.output
    assert "step_0000004.safetensors records no run identity" in r.output
    assert train_rows(run) == train_rows(finished)
    assert_same_weights(run, finished)


# -- 4. validation before work -----------------------------------------------------------------
@pytest.mark.parametrize(
    "extra, match",
    [
        (["--set", "optim.lr=1e999"], "config key 'optim.lr' must be a finite number, got inf"),
        (["--set", "optim.lr=.inf"], "config key 'optim.lr' must be a finite number, got inf"),
        (["--set", "rollout.temperature=.nan"], "'rollout.temperature' must be a finite number"),
        (["--estimator", "softmax_grpo", "--set", "estimator_options.tau=abc"],
         "softmax_grpo option tau must be a real number, got str 'abc'"),
        (["--estimator", "pkpo", "--set", "estimator_options.k=9"], "pkpo option k=9"),
        (["--estimator", "kappo_grpo", "--set", "estimator_options.calibration=nope.json"],
         "cannot load calibration 'nope.json'"),
        (["--set", "device=nope"], "config key 'device' must be a torch device"),
        (["--set", "device=cuda:7"], "config key 'device' is 'cuda:7'"),
        (["--set", "threads=-1"], "config key 'threads' must be an integer >= 1"),
        (["--set", "seed=-1"], "config key 'seed' must be an integer in"),
        (["--set", "model.hidden_size=30"], "'model.hidden_size' \\(30\\) must be divisible"),
        (["--set", "model.path=."], "holds no Hugging Face model \\(no config.json\\)"),
        (["--set", "task.options={num_train: 64}", "--set", "rollout.prompts_per_step=100"],
         "prompts_per_step \\(100\\) exceeds the 64 training prompts"),
        (["--set", "task.options={max_len: -3}"], "max_len"),
        (["--set", "algorithm=ppo"], "unknown algorithm 'ppo'; valid: pg, apo, dpo"),
        (["--set", "algorithm=apo", "--set", "kappo.k=0"],
         "config key 'kappo.k' must be an integer >= 1, got 0"),
        (["--set", "algorithm=apo", "--set", "kappo.beta=0"],
         "config key 'kappo.beta' must be a number >= 1e-30, got 0"),
        (["--set", "algorithm=apo", "--set", "kappo.bank_size=1"],
         "'kappo.bank_size' must be an integer >= 2"),
        (["--set", "algorithm=apo", "--set", "kappo.kind=exact"],
         "'kappo.kind' must be auto, binary or winrate, got 'exact'"),
        (["--set", "algorithm=dpo", "--set", "kappo.dpo_labels=soft"],
         "'kappo.dpo_labels' must be bradley_terry or hard"),
        (["--set", "algorithm=dpo", "--set", "kappo.kind=winrate"],
         "algorithm 'dpo' needs a binary calibration"),
        (["--set", "algorithm=dpo", "--set", "rollout.n=4"],
         "'rollout.n' \\(4\\) is not used by algorithm 'dpo'"),
        (["--set", "algorithm=apo", "--set", "loss.kl_coef=0.1"],
         "'loss.kl_coef' is a pg option; algorithm 'apo' is regularised by kappo.beta"),
        (["--set", "algorithm=apo", "--set", "estimator_options={tau: 0.3}"],
         "'estimator_options' is a pg option"),
        (["--set", "algorithm=apo", "--set", "kappo.calibration=nope.json"],
         "cannot load kappo.calibration 'nope.json'"),
        (["--set", "kappo.calibration=nope.json"],
         "'kappo.calibration' is set, but algorithm 'pg' with estimator 'argmaxrl' uses no"),
        (["--set", "algorithm=apo", "--set", "kappo.bank_prompts=8"],
         "prompts_per_step \\(64\\) exceeds the 8 calibrated prompts .*kappo.bank_prompts"),
        (["--estimator", "kappo_grpo", "--set", "kappo.k=1.5"],
         "config key 'kappo.k' must be an integer"),
        # each of these used to fail only after SFT (or crash): refused before any work
        (["--estimator", "maxrl", "--set", "advantage_reward=raw"],
         "estimator 'maxrl' needs 0/1 rewards, but task 'strings/reverse' is graded"),
        (["--set", "task.reward=os:system"],
         "reward function 'os:system' has the signature \\(command\\), but a reward is "
         "called as fn\\(prompt, completion, \\*\\*fields\\)"),
        (["--set", "threads=100000"],
         "config key 'threads' is 100000, more than this machine's \\d+ CPUs"),
        (["--set", "model.hidden_size=65536", "--set", "model.num_layers=64",
          "--set", "model.intermediate_size=262144"],
         "has about 4.4e\\+12 parameters: training it needs at least 64.0 TiB, more than the "
         ".* of memory of device 'cpu'; make it smaller"),
    ],
)
def test_bad_values_stop_before_any_work(tmp_path, extra, match):
    out = tmp_path / "run"
    line = one_line_error(invoke("train", "--out", out, "--quiet", *extra))
    assert __import__("re").search(match, line), line
    assert not out.exists()  # nothing written, no model built, no SFT step taken


@pytest.mark.parametrize("name, why", [
    ("", "is empty"),
    (os.fsdecode(b"run-\xff\xfe"), "holds bytes that are not UTF-8 \\(b'.*run-\\\\xff"),
    ("r" * 300, "has a name of 300 bytes, over this system's limit of \\d+ \\(NAME_MAX\\)"),
    ("/".join(["d" * 200] * 25), "exceeds this system's limit of \\d+ \\(PATH_MAX\\)"),
])
def test_an_out_that_cannot_be_written_or_recorded_is_refused_before_any_work(
        tmp_path, monkeypatch, name, why):
    monkeypatch.chdir(tmp_path)
    line = one_line_error(invoke("train", "--out", name, "--quiet", "--set", "threads=1"))
    assert __import__("re").search(f"--out .* {why}.*; choose another path", line), line
    assert list(tmp_path.iterdir()) == []  # nothing written (an empty --out is not the cwd)


def test_a_tilde_in_out_and_config_is_the_home_directory(tmp_path, monkeypatch):
    from bestk.train.config import TrainConfig
    from bestk.train.config.io import apply_overrides
    from bestk.train.validation import resolve_defaults

    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    (home / "c.yaml").write_text("max_steps: 1\nsft:\n  steps: 0\n")
    r = invoke(*cli_args("~/run", "sft.steps=0")[:-2], "--config", "~/c.yaml", "--max-steps",
               "1")
    assert r.exit_code == 0, r.output
    assert (home / "run" / "final" / "config.json").is_file() and list(work.iterdir()) == []
    cfg = resolve_defaults(apply_overrides(TrainConfig(), ["model.path=~/m", "out=~/x"]))
    assert cfg.model.path == str(home / "m") and cfg.out == str(home / "x")


def test_a_model_that_fails_to_load_leaves_no_run_directory(tmp_path):
    bad = tmp_path / "model"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    (bad / "tokenizer.json").write_text("{}")
    out = tmp_path / "run"
    line = one_line_error(invoke(*cli_args(out, f"model.path={bad}")))
    assert f"cannot load a causal LM from '{bad}'" in line
    assert not out.exists()  # created for the run, removed with its lock when it never started


# -- 5. OS errors -------------------------------------------------------------------------------
def test_out_naming_a_file_is_a_one_line_error(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    line = one_line_error(invoke("train", "--out", f, "--quiet"))
    assert f"--out '{f}' is a file, not a directory" in line


def test_read_only_directory_is_a_one_line_error(tmp_path, monkeypatch):
    """EROFS injected where the run directory is first written (its lock file)."""
    real_open = os.open

    def read_only(path, flags, *a, **kw):
        if str(path).endswith(".lock") and flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *a, **kw)

    monkeypatch.setattr(os, "open", read_only)
    line = one_line_error(invoke(*cli_args(tmp_path / "ro")))
    assert f"{tmp_path / 'ro' / '.lock'}: Read-only file system" in line


def _enospc_on_call(n: int):
    """A ``safetensors.torch.save_file`` whose ``n``-th call half-writes and fails like a full
    disk (the error safetensors raises)."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    calls = {"n": 0}

    def save(tensors, filename, metadata=None):
        calls["n"] += 1
        if calls["n"] == n:
            Path(filename).write_bytes(b"\0" * 1000)
            raise SafetensorError(
                "Error while serializing: I/O error: No space left on device (os error 28) at "
                f'path "{filename}"'
            )
        return save_file(tensors, filename, metadata=metadata)

    return save


def test_full_disk_keeps_the_last_good_checkpoint_and_the_rerun_is_exact(
    finished, tmp_path, monkeypatch
):
    import safetensors.torch

    out = tmp_path / "full"
    monkeypatch.setattr(safetensors.torch, "save_file", _enospc_on_call(2))  # step 2's save
    line = one_line_error(invoke(*cli_args(out)))
    assert f"{out / 'checkpoints' / 'step_0000002.safetensors'}: No space left on device" in line
    assert "the last good checkpoint, step_0000000.safetensors, is intact" in line
    names = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert names == ["step_0000000.safetensors", "step_0000000.sha256"]  # no temporaries
    assert verify_checkpoint(out / "checkpoints" / "step_0000000.safetensors") is None
    monkeypatch.undo()
    r = invoke(*cli_args(out))  # space freed: the same command continues the run
    assert r.exit_code == 0, r.output
    assert train_rows(out) == train_rows(finished)
    assert_same_weights(out, finished)


def test_full_disk_in_the_metrics_log_names_the_file(tmp_path, monkeypatch):
    tr = Trainer(tiny_config(tmp_path / "m", "max_steps=1", "sft.steps=0"))
    real_fsync = os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as e:
        tr.log.record({"phase": "train", "step": 1})
    monkeypatch.setattr(os, "fsync", real_fsync)
    tr.close()
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(tmp_path / "m/metrics.jsonl")


_INJECT = """
import errno, os, sys
from pathlib import Path
kind = sys.argv.pop(1)
if kind == "enospc":
    import safetensors.torch as st
    from safetensors import SafetensorError
    def save(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"partial")
        raise SafetensorError("Error while serializing: I/O error: No space left on device "
                              f'(os error 28) at path "{filename}"')
    st.save_file = save
else:
    real_open = os.open
    def open_ro(path, flags, *a, **kw):
        if str(path).endswith(".lock") and flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *a, **kw)
    os.open = open_ro
from bestk.cli import main
sys.argv = ["bestk", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize("kind, expected", [
    ("enospc", "step_0000000.safetensors: No space left on device"),
    ("erofs", ".lock: Read-only file system"),
])
def test_os_errors_in_a_real_cli_process(tmp_path, kind, expected):
    out = tmp_path / "run"
    p = subprocess.run([sys.executable, "-c", _INJECT, kind, *cli_args(out)],
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], p.stderr
    if kind == "enospc":  # the step-0 checkpoint failed: none to claim intact
        assert "no checkpoint was written yet" in lines[0] and "intact" not in lines[0]


# -- 6. bestk eval on a damaged / empty model directory ---------------------------------------
def test_eval_on_damaged_weights_or_an_empty_directory(run, tmp_path):
    weights = run / "final" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])
    line = one_line_error(invoke("eval", "--model", run / "final", "-n", "2"))
    assert f"cannot load a causal LM from '{run / 'final'}'" in line
    empty = tmp_path / "empty"
    empty.mkdir()
    line = one_line_error(invoke("eval", "--model", empty, "-n", "2"))
    assert "holds no Hugging Face model (no config.json)" in line
    assert "sentencepiece" not in line


# -- 7. malformed metrics.jsonl ------------------------------------------------------------------
@pytest.mark.parametrize(
    "tail, match",
    [
        (b"\x8f\xa7 random \xff\x00 bytes\n\x12\x34", "line 9 is not a JSON record"),
        (b"null\n", "line 9: expected a JSON object, got null"),
        (b'{"phase": "train", "step": "five"}\n', "line 9: 'step' must be an integer >= 0"),
        (b'{"phase": "eval", "step": 5, "pass@1": "x"}\n', "line 9: 'pass@1' must be a number"),
        (b'{"phase": "train", "step": 5, "loss": NaN}\n', "line 9 holds NaN, which is not JSON"),
        (b'{"phase": "eval", "step": 5, "pass@1": -Infinity}', "line 9 holds -Infinity"),
    ],
)
def test_a_malformed_metrics_line_is_an_error_naming_the_file(run, tail, match):
    log = run / "metrics.jsonl"
    assert len(log.read_text().splitlines()) == 8  # 1 sft + 4 train + 3 eval
    with open(log, "ab") as f:
        f.write(tail)
    line = one_line_error(invoke("train", "--resume", run, "--quiet"))
    assert str(log) in line and __import__("re").search(match, line), line


def test_a_torn_last_metrics_line_is_skipped(tmp_path):
    log = tmp_path / "metrics.jsonl"
    log.write_text('{"phase": "eval", "step": 0, "pass@1": 0.5}\n{"phase": "tra')
    assert read_metrics(log) == [{"phase": "eval", "step": 0, "pass@1": 0.5}]


# -- 8. resume policy and re-run = resume --------------------------------------------------------
def test_rerunning_a_finished_run_says_it_is_complete(run, monkeypatch):
    """... at once: no model is loaded and no rollout engine (vLLM) started first."""
    import bestk.train.trainer as trainer_module

    def never(*a, **kw):
        raise AssertionError("a complete run loaded its model / opened its engines")

    monkeypatch.setattr(trainer_module, "load_run_policy", never)
    monkeypatch.setattr(trainer_module, "open_engines", never)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    r = invoke(*cli_args(run))
    assert r.exit_code == 0, r.output
    assert "is already complete (step 4 of 4); nothing to do" in r.output
    assert "done: held-out pass@1=" in r.output
    after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before  # nothing rewritten


def _files(d: Path) -> dict[Path, bytes]:
    return {p.relative_to(d): p.read_bytes() for p in d.rglob("*")
            if p.is_file() and p.name != ".lock"}


def test_a_finished_run_without_checkpoints_is_complete_and_nothing_is_retrained(run):
    """Checkpoints deleted after the end: ``rm -rf RUN/checkpoints`` (to save disk), then the same
    command: final/ and the completion marker make the run complete; nothing is retrained or
    rewritten."""
    shutil.rmtree(run / "checkpoints")
    before = _files(run)
    r = invoke(*cli_args(run))
    assert r.exit_code == 0, r.output
    assert "is already complete (step 4 of 4); nothing to do" in r.output
    assert "starting it over" not in r.output and "SFT" not in r.output
    assert "done: held-out pass@1=" in r.output
    assert _files(run) == before  # metrics.jsonl, final/, report.md untouched
    line = one_line_error(invoke(*cli_args(run, max_steps=6)))  # cannot continue: refused
    assert "finished at step 4 and its checkpoints are gone" in line
    assert _files(run) == before


def test_checkpoints_as_a_plain_file_is_refused_before_any_work(run):
    shutil.rmtree(run / "checkpoints")
    (run / "checkpoints").write_text("not a directory")
    before = _files(run)
    line = one_line_error(invoke(*cli_args(run)))
    assert "checkpoints' is a file, not the run's checkpoint directory" in line
    assert _files(run) == before


def test_starting_over_keeps_the_previous_attempt(run):
    """A run with no checkpoint and no completion marker starts over, but the files of the
    attempt it replaces (log, final/, report) move to previous-attempt/, not truncated."""
    shutil.rmtree(run / "checkpoints")
    (run / ".finished").unlink()
    old = _files(run)
    r = invoke(*cli_args(run))
    assert r.exit_code == 0, r.output
    assert "starting it over" in r.output
    assert "the files of the attempt started over are kept in" in r.output
    kept = _files(run / "previous-attempt")
    assert kept == {p: b for p, b in old.items() if p.name != "config.yaml"}
    assert len(read_metrics(run / "metrics.jsonl")) == len(read_metrics(
        run / "previous-attempt" / "metrics.jsonl"))  # the same run again, in full



def _tree(d: Path) -> dict[Path, bytes | None]:
    """Every path under ``d`` (hidden files, the lock and folders included) with its bytes."""
    return {p.relative_to(d): p.read_bytes() if p.is_file() else None for p in d.rglob("*")}


def test_a_non_empty_out_that_is_not_a_bestk_run_is_refused_untouched(tmp_path):
    """``--out`` naming a directory with someone's files and no bestk run (no config.yaml) is
    refused in one line naming what is there; nothing in it is moved, deleted or added (no
    ``.lock`` either). An empty directory, or one with only a run's lock, is a new run."""
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    (d / "precious.txt").write_text("x\n")
    (d / "sub" / "notes.md").write_text("y\n")
    (d / ".hidden").write_text("z\n")
    before = _tree(d)
    line = one_line_error(invoke(*cli_args(d)))
    assert f"--out {str(d)!r}" in line and "is not a bestk run" in line, line
    assert "precious.txt" in line and "sub" in line
    assert _tree(d) == before
    with pytest.raises(ValueError, match="is not a bestk run"):
        Trainer(tiny_config(d, "max_steps=1"))
    assert _tree(d) == before
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / ".lock").write_text("")  # a run killed before it wrote its config
    Trainer(tiny_config(empty, "max_steps=1")).close()
    assert (empty / "config.yaml").is_file()


def test_a_project_folder_with_the_users_own_config_yaml_is_not_taken_for_a_run(tmp_path,
                                                                              monkeypatch):
    """``--out .`` in a project folder holding the user's own (commented, valid) config.yaml,
    a report.md and data: not a run stopped early (its files were moved into previous-attempt/
    and config.yaml overwritten) -- refused in one line, nothing touched. A run's config.yaml
    starts with bestk's header; ``--resume`` of such a folder is refused the same way."""
    d = tmp_path / "project"
    (d / "data").mkdir(parents=True)
    (d / "config.yaml").write_text("# my experiment\nmax_steps: 2\nrollout:\n  n: 4\n")
    (d / "report.md").write_text("# my notes\n")
    (d / "data" / "train.jsonl").write_text('{"q": 1}\n')
    before = _tree(d)
    monkeypatch.chdir(d)
    line = one_line_error(invoke(*cli_args(Path("."))))
    assert "is not a bestk run (its config.yaml is not a run's)" in line, line
    assert "config.yaml" in line and "report.md" in line
    line = one_line_error(invoke("train", "--resume", "."))
    assert "its config.yaml is not a bestk run's" in line, line
    assert _tree(d) == before


def test_a_run_of_a_bestk_that_wrote_no_config_header_still_resumes(run):
    """Runs written before config.yaml had its header are known by their log and checkpoints."""
    text = (run / "config.yaml").read_text()
    assert text.startswith("# bestk run config")
    (run / "config.yaml").write_text(text.split("\n", 1)[1])
    r = invoke(*cli_args(run, max_steps=5))
    assert r.exit_code == 0, r.output
    assert (run / "config.yaml").read_text().startswith("# bestk run config")


@pytest.mark.parametrize("name", ["final", "checkpoints"])
def test_a_run_file_made_a_symbolic_link_is_refused_before_any_step(run, tmp_path, name):
    """``final/`` linked to a publish folder: two more steps ran, then "Cannot call rmtree on a
    symbolic link" with no path and no .finished. Now refused at once, naming the link; the
    linked folder is untouched."""
    publish = tmp_path / "publish"
    shutil.move(run / name, publish)
    (run / name).symlink_to(publish, target_is_directory=True)
    before, log = _tree(publish), (run / "metrics.jsonl").read_bytes()
    line = one_line_error(invoke(*cli_args(run, max_steps=6)))
    assert f"{str(run / name)!r} is a symbolic link (to {str(publish)!r})" in line, line
    assert _tree(publish) == before and (run / "metrics.jsonl").read_bytes() == log


def test_a_run_writes_where_it_started_when_user_code_changes_directory(tmp_path, monkeypatch):
    """--out is made absolute before any user code runs: a callback (or a reward) that calls
    os.chdir cannot move config, metrics, checkpoints, final/ and report away from the lock."""
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(home)
    tr = Trainer(tiny_config(Path("rwx"), "max_steps=2"),
                 on_step=lambda step, metrics: os.chdir(elsewhere))
    tr.run(progress=False)
    assert sorted(os.listdir(elsewhere)) == []
    names = set(os.listdir(home / "rwx"))
    assert {".lock", "config.yaml", "metrics.jsonl", "checkpoints", "final", "report.md",
            ".finished"} <= names, names


def test_every_start_over_keeps_its_attempt_and_moves_no_other_file(run):
    """Started over twice (no checkpoint, no completion marker): each attempt's files go to a
    folder of their own (previous-attempt/, then previous-attempt-2/), so no attempt is ever
    deleted; a file the user put in the run directory stays where it is."""
    (run / "my-notes.txt").write_text("mine\n")
    attempts = []
    for _ in range(2):
        shutil.rmtree(run / "checkpoints")
        (run / ".finished").unlink()
        attempts.append({p: b for p, b in _files(run).items()
                         if p.parts[0] not in ("config.yaml", "my-notes.txt")
                         and not p.parts[0].startswith("previous-attempt")})
        r = invoke(*cli_args(run))
        assert r.exit_code == 0, r.output
        assert "starting it over" in r.output
    assert f"the files of the attempt started over are kept in {run / 'previous-attempt-2'}" \
        in r.output
    assert _files(run / "previous-attempt") == attempts[0]
    assert _files(run / "previous-attempt-2") == attempts[1]
    assert (run / "my-notes.txt").read_text() == "mine\n"


def test_a_different_config_is_refused_naming_the_keys(run):
    config = (run / "config.yaml").read_bytes()
    line = one_line_error(invoke(*cli_args(run, "seed=7", "rollout.n=2", "optim.lr=1e-3")))
    assert "holds a run with another config: seed (0 -> 7), rollout.n (4 -> 2), optim.lr " \
           "(0.0003 -> 0.001)" in line
    line = one_line_error(invoke("train", "--resume", run, "--set", "seed=7", "--quiet"))
    assert "seed (0 -> 7)" in line and "may change: max_steps, eval.every" in line
    line = one_line_error(invoke("train", "--resume", run, "--estimator", "grpo", "--quiet"))
    assert "estimator ('argmaxrl' -> 'grpo')" in line
    line = one_line_error(invoke("train", "--resume", run, "--max-steps", "3", "--quiet"))
    assert "max_steps 3 is below the 4 steps" in line
    line = one_line_error(invoke("train", "--resume", run, "--out", run.parent / "x"))
    assert "continues that run in place" in line
    assert (run / "config.yaml").read_bytes() == config  # nothing rewritten


def test_deleting_metrics_before_resume_is_refused(run):
    (run / "metrics.jsonl").unlink()
    line = one_line_error(invoke("train", "--resume", run, "--quiet"))
    assert "metrics.jsonl is missing, but the run's checkpoint (step 4) continues it" in line


def test_a_truncated_metrics_log_is_refused(run):
    log = run / "metrics.jsonl"
    rows = read_metrics(log)
    log.write_text("".join(json.dumps(r) + "\n" for r in rows if r.get("step") != 3))
    line = one_line_error(invoke("train", "--resume", run, "--quiet"))
    assert "lacks the training records of 1 of the steps 1..4" in line


def test_rerun_extends_with_max_steps_and_eval_every_exactly(run, tmp_path):
    """Allowed changes keep the trajectory: a 4-step run re-run with --max-steps 6 and
    eval.every=1 trains exactly as an uninterrupted 6-step run with eval.every=2."""
    ref = tmp_path / "ref"
    Trainer(tiny_config(ref, "max_steps=6", "checkpoint_every=2")).run(progress=False)
    r = invoke(*cli_args(run, "eval.every=1", max_steps=6))
    assert r.exit_code == 0, r.output
    err = r.output
    assert "note: max_steps: 4 -> 6" in err and "note: eval.every: 2 -> 1" in err
    assert train_rows(run) == train_rows(ref)
    assert_same_weights(run, ref)
    evals = [x["step"] for x in read_metrics(run / "metrics.jsonl") if x["phase"] == "eval"]
    assert evals == [0, 2, 4, 5, 6]
    cfg = read_run_config(run)
    assert cfg.max_steps == 6 and cfg.eval.every == 1  # config.yaml records the change


def test_resume_policy_classifies_every_key():
    from bestk.train.config import TrainConfig
    from bestk.train.config.io import apply_overrides

    old = TrainConfig()
    new = apply_overrides(TrainConfig(), ["threads=4", "checkpoint_every=5", "max_steps=200"])
    notes = check_resume(old, new, 10, "R")
    assert any(n.startswith("threads: 1 -> 4 (the continuation is bit-identical") for n in notes)
    for key in ("loss.kl_coef=0.1", "task.options.max_len=5", "eval.n=4", "sft.steps=3",
                "estimator_options.tau=0.3", "model.hidden_size=64", "eval.temperature=0.5",
                "algorithm=apo", "kappo.k=2", "kappo.beta=0.2", "kappo.bank_size=8",
                "kappo.bank_prompts=64", "kappo.kind=binary", "kappo.calibration=c.json",
                "kappo.dpo_pairs=2", "kappo.dpo_labels=hard"):
        changed = apply_overrides(TrainConfig(), [key])
        with pytest.raises(ValueError, match=key.split("=")[0].replace(".", "\\.")):
            check_resume(old, changed, 10, "R")


def kill_9_after_step_3(args: list[str], out: Path, timeout: float = 180) -> int:
    """Start ``bestk ARGS`` (a run of 400 steps checkpointing every step), ``kill -9`` it once
    its checkpoint of step 3 or later is there; returns the step of its newest valid one."""
    proc = subprocess.Popen([sys.executable, "-m", "bestk", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.time() + timeout
        while time.time() < deadline:
            ck = list_checkpoints(out / "checkpoints")
            if ck and ck[-1].name >= "step_0000003.safetensors":
                break
            if proc.poll() is not None:
                pytest.fail(proc.stderr.read().decode())
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    step = int(latest_valid_checkpoint(out / "checkpoints")[0].name[5:12])
    assert 3 <= step < 400 and not (out / "final").exists()
    return step


def test_kill_9_then_the_same_command_continues(tmp_path):
    """A real ``kill -9`` of ``bestk train`` mid-run; the same command again (a larger
    --max-steps) continues it: the lock died with the process, nothing lost or doubled."""
    out = tmp_path / "k"
    step = kill_9_after_step_3(cli_args(out, "checkpoint_every=1", "eval.every=1000",
                                        max_steps=400), out)
    again = subprocess_cli(*cli_args(out, "checkpoint_every=1", "eval.every=1000",
                                     max_steps=step + 2))
    assert again.returncode == 0, again.stderr
    assert "done: held-out" in again.stdout
    steps = [r["step"] for r in train_rows(out)]
    assert steps == list(range(1, step + 3))  # nothing lost, nothing doubled
    assert (out / "final" / "config.json").is_file()


@pytest.mark.parametrize("algorithm", ["apo", "dpo"])
def test_kill_9_of_a_kappo_run_then_the_same_command_continues(tmp_path, algorithm):
    """A real ``kill -9`` of an @k-A*PO / @k-DPO run mid-RL; the same command continues it from
    its checkpoint with the calibration (and bank) it made, which is neither redone nor
    changed."""
    from tests.conftest import KAPPO_TINY

    out = tmp_path / algorithm

    def args(max_steps: int) -> list[str]:
        a = ["train", "--out", str(out), "--quiet", "--max-steps", str(max_steps)]
        a += set_args(*KAPPO_TINY, f"algorithm={algorithm}", "kappo.k=2", "checkpoint_every=1",
                      "eval.every=1000")
        return a

    step = kill_9_after_step_3(args(400), out)
    kept = {p.name: p.read_bytes() for p in out.iterdir()
            if p.name in ("calibration.json", "bank.jsonl", "bank_tokens.safetensors")}
    assert "calibration.json" in kept and ("bank_tokens.safetensors" in kept) == (
        algorithm == "dpo")
    again = subprocess_cli(*args(step + 2))
    assert again.returncode == 0, again.stderr
    assert "done: held-out" in again.stdout and "KAPPO" not in again.stderr  # not recalibrated
    assert [r["step"] for r in train_rows(out)] == list(range(1, step + 3))
    assert {n: (out / n).read_bytes() for n in kept} == kept
    assert (out / "final" / "config.json").is_file()


# -- 9. temporaries, Ctrl-C during the final save ----------------------------------------------
def test_temporaries_of_killed_writes_are_removed_on_the_next_start(run, capsys):
    ck = run / "checkpoints"
    junk = [ck / ".bestk-tmp-step_0000006.safetensors.k2j3h4ab.bestk-tmp.safetensors",
            ck / "step_0000008.sha256", run / ".bestk-tmp-config.yaml.x1y2z3w4.bestk-tmp",
            run / ".bestk-tmp-report.md.z9z9z9z9.bestk-tmp",
            run / ".bestk-tmp-final.new.bestk-tmp" / "model.safetensors"]
    for p in junk:
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(b"partial")
    tr = Trainer.resume(run)
    tr.close()
    assert not any(p.exists() for p in junk)
    assert not (run / ".bestk-tmp-final.new.bestk-tmp").exists()
    assert "removed 5 temporary file(s) left by an interrupted write" in capsys.readouterr().err
    assert (ck / "step_0000004.safetensors").exists()  # real checkpoints untouched


def test_a_users_dot_files_in_a_run_are_never_taken_for_temporaries(run, capsys):
    """Only names bestk makes are cleaned up: an editor's swap file, a backup, notes kept in
    checkpoints/ -- each a dot-file named after a run file -- stay (they were all deleted as
    "temporary files left by an interrupted write")."""
    mine = [run / ".config.yaml.swp", run / ".metrics.jsonl.bak", run / ".report.md.x1y2.tmp",
            run / "checkpoints" / ".my-notes", run / "checkpoints" / ".tmpAbC123",
            run / "checkpoints" / ".step_0000006.safetensors.k2j3h4.safetensors",
            run / ".final-tmp" / "notes.txt"]
    for p in mine:
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(b"the user's")
    tr = Trainer.resume(run)
    tr.close()
    assert all(p.read_bytes() == b"the user's" for p in mine)
    assert "temporary" not in capsys.readouterr().err


def _sigint_during_final_save(monkeypatch, presses: int) -> None:
    import bestk.train.trainer as loop  # the trainer's write_report (imported from .report)

    real = loop.write_report

    def interrupted_save(out):
        for _ in range(presses):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)  # let the handler run
        return real(out)

    monkeypatch.setattr(loop, "write_report", interrupted_save)


def test_one_ctrl_c_during_the_final_save_lets_it_finish(tmp_path, monkeypatch):
    _sigint_during_final_save(monkeypatch, 1)
    out = tmp_path / "c"
    r = invoke(*cli_args(out, max_steps=1))
    assert r.exit_code == 0, r.output
    assert "Ctrl-C during the final save: it was completed first" in r.output
    assert (out / "final" / "config.json").is_file() and (out / "report.md").is_file()


def test_a_second_ctrl_c_during_the_final_save_exits_130_with_a_message(
    tmp_path, monkeypatch
):
    _sigint_during_final_save(monkeypatch, 2)
    out = tmp_path / "c"
    r = invoke(*cli_args(out, max_steps=1))
    assert r.exit_code == 130, r.output
    assert "interrupted; the last checkpoint in" in r.output and "Traceback" not in r.output
    monkeypatch.undo()
    r = invoke(*cli_args(out, max_steps=1))  # the same command finishes the save
    assert r.exit_code == 0, r.output
    assert (out / "report.md").is_file()


# -- 10. umask --------------------------------------------------------------------------------
@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600)])
def test_run_files_respect_the_umask(tmp_path, mask, mode):
    from bestk.kappo import calibrate

    old = os.umask(mask)
    try:
        out = tmp_path / "u"
        Trainer(tiny_config(out, "max_steps=1", "sft.steps=0")).run(progress=False)
        cal = calibrate({0: [0, 1], 1: [1, 1]}, k=2, beta=0.1).save(tmp_path / "cal.json")
    finally:
        os.umask(old)
    files = [out / "config.yaml", out / "report.md", out / "metrics.jsonl",
             out / "final" / "model.safetensors", out / "final" / "config.json", cal,
             *(out / "checkpoints").iterdir()]
    assert len(files) == 10  # ... and 2 checkpoints with their checksum files
    for f in files:
        assert f.stat().st_mode & 0o777 == mode, f


# -- 11. the lock file, refused directories and commands, torn checkpoints ---------------------
def test_a_refused_out_in_an_existing_directory_leaves_no_lock_file(tmp_path, monkeypatch):
    """``bestk train --out .`` in a directory holding someone else's config.yaml is refused,
    and the directory is left as it was (no stray ``.lock``)."""
    mine = tmp_path / "project"
    mine.mkdir()
    (mine / "config.yaml").write_text("a: 1\n")
    monkeypatch.chdir(mine)
    line = one_line_error(invoke(*cli_args(Path("."))))
    assert "config.yaml" in line
    assert sorted(p.name for p in mine.iterdir()) == ["config.yaml"]


def test_a_lock_file_stays_once_the_run_wrote_and_a_foreign_one_is_never_removed(tmp_path):
    lock = RunLock(tmp_path).acquire()
    (tmp_path / "config.yaml").write_text("seed: 0\n")
    lock.release()
    assert (tmp_path / ".lock").exists()  # a run's pid file stays, as documented
    RunLock(tmp_path).acquire().release()  # did not create it: leaves it
    assert (tmp_path / ".lock").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    RunLock(empty).acquire().release()
    assert list(empty.iterdir()) == []


def test_a_lock_file_removed_by_its_holder_is_not_locked_twice(tmp_path, monkeypatch):
    """A writer that opened ``.lock`` just before its holder removed it locks the file now at
    the path instead of the removed one (else two writers would each hold "the" lock)."""
    import bestk.train.run.lock as rundir

    first = RunLock(tmp_path).acquire()
    real_lock, calls = rundir._lock_fd, []

    def lock_after_the_holder_left(fd):
        if not calls:  # between our open and our lock, the holder releases and removes it
            calls.append(fd)
            first.release()
        return real_lock(fd)

    monkeypatch.setattr(rundir, "_lock_fd", lock_after_the_holder_left)
    second = RunLock(tmp_path).acquire()
    monkeypatch.undo()
    assert calls and (tmp_path / ".lock").exists()
    with pytest.raises(RunDirectoryBusy):
        RunLock(tmp_path).acquire()  # the lock at the path is the one held
    second.release()


@pytest.mark.parametrize("how", ["truncated", "cut_header", "padded"])
def test_a_truncated_checkpoint_with_a_recomputed_checksum_falls_back(finished, run, how):
    """The user 'repaired' the checksum of a damaged newest checkpoint (``sha256sum >``): the
    layout check still finds it incomplete, so the run resumes from the previous one."""
    from bestk.train.runtime.files import file_sha256

    newest = run / "checkpoints" / "step_0000004.safetensors"
    data = newest.read_bytes()
    newest.write_bytes({"truncated": data[: len(data) // 2], "cut_header": data[:100],
                        "padded": data + b"\0" * 64}[how])
    checksum_path(newest).write_text(f"{file_sha256(newest)}  {newest.name}\n")
    why = verify_checkpoint(newest)
    assert why is not None and ("truncated" in why or "padded" in why), why
    r = invoke(*cli_args(run))
    assert r.exit_code == 0, r.output
    assert "checkpoint step_0000004.safetensors is damaged (truncated" in r.output
    assert "resuming from the newest valid checkpoint, step_0000002.safetensors" in r.output
    assert "Traceback" not in r.output
    assert train_rows(run) == train_rows(finished)
    assert_same_weights(run, finished)


def test_out_and_set_out_naming_two_directories_are_refused(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    line = one_line_error(invoke("train", "--out", a, "--set", f"out={b}", "--quiet"))
    assert f"--out '{a}' and --set out='{b}' name two run directories" in line
    assert not a.exists() and not b.exists()
    line = one_line_error(invoke("train", "--resume", a, "--set", f"out={b}", "--quiet"))
    assert f"--set out='{b}' differs" in line


def test_config_naming_a_directory_says_so(tmp_path):
    line = one_line_error(invoke("train", "--config", tmp_path, "--quiet"))
    assert line == f"error: --config '{tmp_path}' is a directory; give a YAML config file"


def test_num_eval_zero_is_a_one_line_task_option_error(tmp_path):
    out = tmp_path / "run"
    r = invoke(*cli_args(out, "task.options={num_train: 64, num_eval: 0, max_len: 4}"))
    assert one_line_error(r) == "error: strings option num_eval must be an integer >= 1, got 0"
    assert not out.exists()


def test_train_help_points_to_the_config_reference():
    r = invoke("train", "--help")
    assert r.exit_code == 0
    text = " ".join(r.output.split())
    assert "docs/training.md, section Configuration" in text and "--set" in text


@pytest.mark.parametrize("value", ["-5", "0"])
def test_eval_bank_prompts_is_checked_before_any_model_loads(tmp_path, value):
    line = one_line_error(invoke("eval", "--model", tmp_path / "nowhere", "--bank",
                                 tmp_path / "bank.jsonl", "--bank-prompts", value))
    assert line == f"error: --bank-prompts must be an integer >= 1, got {value}"


def test_eval_refuses_train_only_keys(tmp_path):
    line = one_line_error(invoke("eval", "--model", tmp_path, "--set", "optim.lr=1e-3",
                                 "--set", "eval.n=4", "--set", "eval.temperature=0.5"))
    assert line.startswith("error: bestk eval does not use --set optim.lr (training-only); it "
                           "reads task.*, model.*, eval.n, eval.num_prompts")
    line = one_line_error(invoke("eval", "--model", tmp_path, "--set", "seed=3"))
    assert line.startswith("error: bestk eval does not use --set seed (use --seed for seed)")


def test_eval_warns_about_prompt_characters_the_tokenizer_does_not_know(run):
    """A model trained on ``strings`` (digits) evaluated on ``arithmetic`` ('+', '-', ...)."""
    r = invoke("eval", "--model", run / "final", "--task", "arithmetic", "-n", "2",
               "--set", "eval.num_prompts=3", "--set", "task.options={digits: 1, num_eval: 3}")
    assert r.exit_code == 0, r.output
    warnings = [ln for ln in r.output.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1, r.output
    assert "3 of 3 prompts hold characters the model's tokenizer does not know" in warnings[0]
    assert "trained on task 'arithmetic'?" in warnings[0]
    same = invoke("eval", "--model", run / "final", "-n", "2", "--set", "eval.num_prompts=2",
                  "--set", "task.options={num_train: 64, num_eval: 4, max_len: 4}")
    assert same.exit_code == 0 and "warning" not in same.output, same.output


def test_a_finished_marker_without_final_or_checkpoints_says_what_it_found(run):
    """``final/`` and ``checkpoints/`` deleted, ``.finished`` kept: the run is neither complete
    (no model to report) nor resumable, and it is not a run stopped before its first
    checkpoint either (which it was taken for, and started over): one line saying what is
    there, nothing moved or trained."""
    shutil.rmtree(run / "final")
    shutil.rmtree(run / "checkpoints")
    before = sorted(p.name for p in run.iterdir())
    line = one_line_error(invoke(*cli_args(run)))
    assert line == (
        f"error: run '{run}' finished at step 4 (its .finished marker says so), but its final/ "
        "model and its checkpoints/ are gone: there is nothing to report or continue from; "
        "restore final/ (or a checkpoint), or start a new run with another --out")
    assert sorted(p.name for p in run.iterdir()) == before


# -- issue 45 item 5: robustness of the run directory's files ------------------------------------
def test_a_bare_nan_in_metrics_names_the_file_and_line(tmp_path):
    """Python's json reads ``NaN`` / ``Infinity``, which bestk never writes (``null``): a log
    edited by hand once failed later, on rewrite, with "Out of range float values are not JSON
    compliant", naming no file."""
    log = tmp_path / "metrics.jsonl"
    log.write_text('{"phase": "eval", "step": 0, "pass@1": 0.5}\n'
                   '{"phase": "train", "step": 1, "loss": NaN}\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl line 2 holds NaN, .* write NaN as null$"):
        read_metrics(log)
    log.write_text('{"phase": "eval", "step": 0, "pass@1": Infinity}\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl line 1 holds Infinity"):
        read_metrics(log)


@pytest.mark.parametrize("how", ["chmod", "erofs"])
def test_a_complete_run_on_read_only_media_says_it_is_complete(run, monkeypatch, how):
    """Re-running a complete run needs no write, not even its lock file: on read-only media
    (``chmod a-w`` on every file, or, as root, whom permissions do not stop, a lock that fails
    with EROFS) it is reported complete, not refused with "Read-only file system"; a run that
    would have to write is still refused in one line."""
    if how == "chmod":
        if os.geteuid() == 0:
            pytest.skip("root ignores file permissions (the erofs case simulates them)")
        paths = [run, *run.rglob("*")]
        modes = {p: p.stat().st_mode for p in paths}
        for p in paths:
            p.chmod(modes[p] & ~0o222)
        undo = lambda: [p.chmod(m) for p, m in modes.items()]  # noqa: E731
    else:
        def read_only(self):
            raise OSError(errno.EROFS, "Read-only file system", str(self.path))

        monkeypatch.setattr(RunLock, "acquire", read_only)
        undo = lambda: None  # noqa: E731
    try:
        before = _files(run)
        r = invoke(*cli_args(run))
        assert r.exit_code == 0, r.output
        assert "is already complete (step 4 of 4); nothing to do" in r.output
        assert "done: held-out pass@1=" in r.output
        assert _files(run) == before
        line = one_line_error(invoke(*cli_args(run, max_steps=6)))  # continuing must write
        assert ("Read-only file system" in line or "Permission denied" in line) and \
            "choose a writable --out" in line, line
    finally:
        undo()


def _as_other_runs(src: Path, dst: Path, step: int) -> None:
    """``src`` rewritten as checkpoint ``step`` of a run with another config (seed 7), its
    checksum recomputed: a well-formed checkpoint of another run."""
    shutil.copy(src, dst)

    def edit(state):
        run = dict(state["run"])
        run["config"] = {**run["config"], "seed": 7}
        run["digest"] = "0123456789abcdef"
        return {**state, "step": step, "run": run}

    _rewrite_checkpoint(dst, edit)


def test_a_foreign_checkpoint_beyond_max_steps_is_not_counted_as_steps_done(run):
    """Another run's ``step_0000006`` copied into this 4-step run: refused as another run's
    checkpoint, naming it; once "max_steps 4 is below the 6 steps run ... has done"."""
    ck = run / "checkpoints"
    _as_other_runs(ck / "step_0000004.safetensors", ck / "step_0000006.safetensors", 6)
    before = _files(run)
    line = one_line_error(invoke(*cli_args(run)))
    assert "step_0000006.safetensors' belongs to another run" in line, line
    assert "6 steps" not in line and "seed (7 there, 0 here)" in line
    assert "move this one out of checkpoints/" in line
    assert _files(run) == before


def test_a_full_disk_names_the_runs_own_last_checkpoint_not_a_foreign_file(run):
    from bestk.train.commands import abort_line, os_error_message

    ck = run / "checkpoints"
    _as_other_runs(ck / "step_0000004.safetensors", ck / "step_0000006.safetensors", 6)
    (ck / "step_0000008.safetensors").write_bytes(b"not a checkpoint")
    text = os_error_message(OSError(errno.ENOSPC, "No space left on device", "x"), run)
    assert "the last good checkpoint, step_0000004.safetensors, is intact" in text, text
    assert "step_0000004.safetensors, is intact" in abort_line(run)

