"""bestk compare keeps bestk train's run-directory promises (bestk.compare.directory): one
writer, no file it did not write touched, no finished run lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bestk.cli import app
from bestk.compare import run_compare
from bestk.compare.directory import check_compare_directory, set_run_aside
from bestk.train.run.directory import CONFIG_HEADER
from bestk.train.run.lock import RunLock
from tests import conftest

pytestmark = pytest.mark.usefixtures("restore_torch_threads")

TINY = [*conftest.TINY, "checkpoint_every=1"]
GRID = dict(seeds=1, max_steps=1, progress=False)


def _tree(d: Path) -> dict[Path, bytes | None]:
    return {p.relative_to(d): p.read_bytes() if p.is_file() else None for p in d.rglob("*")}


def _train_run(d: Path) -> None:
    """The files of a bestk train run that got to a checkpoint."""
    (d / "checkpoints").mkdir(parents=True)
    (d / "config.yaml").write_text(CONFIG_HEADER + "max_steps: 4\n")
    (d / "metrics.jsonl").write_text('{"phase": "eval", "step": 0}\n')
    (d / "checkpoints" / "step_0000000.safetensors").write_bytes(b"weights")


@pytest.mark.parametrize(("make", "named"), [
    (lambda d: (d / "grpo" / "seed0").mkdir(parents=True) or
     (d / "grpo" / "seed0" / "precious.txt").write_text("mine"), "grpo/seed0/precious.txt"),
    (lambda d: (d / "compare.md").write_text("# my notes"), "compare.md"),
    (lambda d: (d / "results.json").write_text("{}"), "results.json"),
    (lambda d: _train_run(d / "grpo" / "seed0"),
     "grpo/seed0/ (a bestk train run, not one of a comparison's)"),
    (lambda d: _train_run(d), "a bestk train run (checkpoints, config.yaml, metrics.jsonl)"),
    (lambda d: (d / "grpo").mkdir() or (d / "grpo" / "notes.txt").write_text("x"),
     "grpo/notes.txt"),
])
def test_files_a_comparison_did_not_write_are_refused_untouched(tmp_path, make, named):
    """A user's file anywhere in the grid's layout, their own compare.md / results.json, a
    bestk train run where a seed's run (or the grid) would go: refused in one line before any
    work, naming it (they were deleted or overwritten, rc 0)."""
    out = tmp_path / "cu"
    out.mkdir()
    make(out)
    before = _tree(out)
    with pytest.raises(ValueError, match="holds files that are not a bestk comparison's") as e:
        run_compare(["grpo"], out=out, overrides=TINY, **GRID)
    assert named in str(e.value) and "\n" not in str(e.value)
    assert _tree(out) == before


def test_a_grids_own_layout_is_accepted(tmp_path):
    out = tmp_path / "cmp"
    for d in ("_sft", "_start", "_bank", "_calibration", "sweep/lr0.1/grpo/seed0",
              "lr0.01/grpo/seed0", "previous-attempt", "grpo/seed1.previous-attempt"):
        (out / d).mkdir(parents=True)
    seed = out / "grpo" / "seed0"
    _train_run(seed)
    (seed / "run.key").write_text("k")
    (seed / "result.json").write_text("{}")
    (out / "compare.json").write_text(json.dumps({"methods": []}))
    (out / "compare.md").write_text("table")
    (out / "spec.json").write_text("{}")
    check_compare_directory(out, also=("spec.json",))
    with pytest.raises(ValueError, match="spec.json"):
        check_compare_directory(out)


def test_a_comparison_is_refused_while_another_writer_holds_its_out(tmp_path):
    """Two compares on one --out both exited 0 with one metrics.jsonl mixing both; a compare
    into a running train's --out wrote _sft/, _start/ inside the live run."""
    out = tmp_path / "cmp"
    out.mkdir()
    with RunLock(out):
        with pytest.raises(ValueError, match="is in use by another bestk process"):
            run_compare(["grpo"], out=out, overrides=TINY, **GRID)
    assert list(out.iterdir()) == []  # the holder removed its own lock; nothing else made


def test_a_run_redone_under_another_key_is_kept_beside_itself(tmp_path):
    run = tmp_path / "grpo" / "seed0"
    run.mkdir(parents=True)
    (run / "result.json").write_text("{}")
    assert set_run_aside(run) == tmp_path / "grpo" / "seed0.previous-attempt"
    run.mkdir()
    assert set_run_aside(run).name == "seed0.previous-attempt-2"
    assert (tmp_path / "grpo" / "seed0.previous-attempt" / "result.json").read_text() == "{}"


def test_a_finished_grid_rerun_with_other_settings_is_refused_naming_the_keys(tmp_path):
    """``--set optim.lr=0.5`` on a finished grid: its run was rmtree'd and replaced, results
    overwritten, no refusal. Now refused naming the key; --no-resume keeps the earlier grid in
    previous-attempt/ and starts over."""
    out = tmp_path / "cmp"
    run_compare(["grpo"], out=out, overrides=TINY, **GRID)
    before = _tree(out)
    with pytest.raises(ValueError, match=r"holds a grid with other settings \(optim\.lr: "):
        run_compare(["grpo"], out=out, overrides=[*TINY, "optim.lr=0.5"], **GRID)
    assert _tree(out) == before
    # the same grid again: nothing redone; a method added: the grid grows
    run_compare(["grpo"], out=out, overrides=TINY, **GRID)
    assert (out / "grpo" / "seed0" / "result.json").read_bytes() == \
        before[Path("grpo/seed0/result.json")]
    run_compare(["grpo"], out=out, overrides=[*TINY, "optim.lr=0.5"], resume=False, **GRID)
    kept = out / "previous-attempt"
    assert (kept / "grpo" / "seed0" / "result.json").read_bytes() == \
        before[Path("grpo/seed0/result.json")]
    assert (kept / "results.json").read_bytes() == before[Path("results.json")]
    new = json.loads((out / "grpo" / "seed0" / "result.json").read_text())
    assert new["run"]["lr"] == 0.5


def test_compare_refuses_out_in_its_config_and_needs_scipy_before_any_work(tmp_path,
                                                                          hide_modules):
    res = CliRunner().invoke(app, ["compare", "--estimators", "grpo", "--seeds", "1",
                                   "--out", str(tmp_path / "cmp"), "--set", "out=elsewhere"])
    assert res.exit_code == 2 and "the base config sets out='elsewhere'" in res.output, \
        res.output
    with pytest.raises(ValueError, match="sets out='elsewhere'"):
        run_compare(["grpo"], out=tmp_path / "cmp", overrides=[*TINY, "out=elsewhere"], **GRID)
    hide_modules("scipy")
    with pytest.raises(ImportError, match="scipy"):
        run_compare(["grpo"], out=tmp_path / "cmp", overrides=TINY, **GRID)
    assert not (tmp_path / "cmp").exists() and not (tmp_path / "elsewhere").exists()


def test_base_estimator_options_for_an_estimator_not_compared_are_refused(tmp_path):
    """The base config's estimator_options belong to its estimator; with that estimator not
    compared they were dropped silently, or refused after the grid started, naming it."""
    for ests in (["maxrl"], ["grpo", "pkpo"]):
        with pytest.raises(ValueError, match=r"estimator_options \{'k': 4\} of the base config "
                           r"are options of its estimator '\w+', which is not compared"):
            run_compare(ests, out=tmp_path / "cmp", overrides=[*TINY, "estimator_options={k: 4}"],
                        **GRID)
    assert not (tmp_path / "cmp").exists()


def test_a_grid_that_never_started_a_run_does_not_hold_its_settings(tmp_path):
    """A grid recorded in compare.json that stopped before any run started (a failure after
    the record) leaves nothing that other settings would replace: another grid runs there."""
    from bestk.train.config import TrainConfig
    from bestk.train.config.io import config_to_dict

    out = tmp_path / "cmp"
    (out / "_sft").mkdir(parents=True)
    (out / "compare.json").write_text(json.dumps(
        {"base": config_to_dict(TrainConfig()), "methods": [{"label": "grpo"}]}))
    run_compare(["grpo"], out=out, overrides=TINY, **GRID)
    assert (out / "grpo" / "seed0" / "result.json").is_file()
    with pytest.raises(ValueError, match="holds a grid with other settings"):
        run_compare(["grpo"], out=out, overrides=[*TINY, "optim.lr=0.5"], **GRID)


def test_an_out_inside_a_grid_is_refused_for_compare_and_train(tmp_path):
    """``bestk compare --out cmp/sub`` (or ``bestk train --out cmp/sub``, ``--resume
    cmp/grpo/seed0``) ran inside a finished grid, rc 0; the grid then refused to continue,
    its new folder being files that are not the grid's. Now refused in one line, nothing
    written."""
    from tests.conftest import invoke, one_line_error

    out = tmp_path / "cmp"
    run_compare(["grpo"], out=out, overrides=TINY, **GRID)
    before = _tree(out)
    for inner in (out / "sub", out / "grpo" / "x"):
        with pytest.raises(ValueError, match=r"is inside the comparison '.*cmp'"):
            run_compare(["grpo"], out=inner, overrides=TINY, **GRID)
    sets = conftest.set_args(*TINY)
    for args in (["--out", str(out / "sub"), "--max-steps", "1", *sets],
                 ["--resume", str(out / "grpo" / "seed0")]):
        assert "is inside the comparison" in one_line_error(invoke("train", *args))
    assert _tree(out) == before
    run_compare(["grpo"], out=out, overrides=TINY, **GRID)  # the grid still continues
