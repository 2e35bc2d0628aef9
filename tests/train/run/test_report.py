"""``report.md`` of a run directory, rebuilt from its log."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bestk.train.run.directory import read_metrics
from bestk.train.run.report import write_report
from bestk.train.trainer import Trainer
from tests.conftest import tiny_config

pytestmark = pytest.mark.usefixtures("restore_torch_threads")


def test_a_report_without_an_end_evaluation_says_so(tmp_path):
    """A log whose last RL step has no evaluation (a run directory of an older bestk, resumed
    with ``max_steps`` lowered to its steps done) gets a report that says plainly that none was
    run at the end, and which evaluation its end column is; a run's own report has its end."""
    out = tmp_path / "run"
    Trainer(tiny_config(out, "max_steps=2")).run(progress=False)
    text = (out / "report.md").read_text()
    assert "end (step 2)" in text and "No evaluation was run" not in text
    old = tmp_path / "old"
    shutil.copytree(out, old)
    log = old / "metrics.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in read_metrics(log)
                           if not (r["phase"] == "eval" and r["step"] == 2)))
    text = write_report(Path(old)).read_text()
    assert "**No evaluation was run at the end of RL (step 2)**: the end column is the last " \
           "evaluation, of step 0." in text


def test_report_does_not_round_a_slow_model_rate_to_zero(tmp_path):
    """A real model on a CPU makes a fraction of a completion per second: 0.25 is reported as
    0.25 completions/s, not 0."""
    out = tmp_path / "a"
    Trainer(tiny_config(out, "max_steps=2")).run(progress=False)
    path = out / "metrics.jsonl"
    records = [json.loads(x) for x in path.read_text().splitlines()]
    for r in records:
        if r["phase"] == "train":
            r["completions_per_s"] = 0.25
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert "; 0.25 completions/s per RL step on average." in write_report(out).read_text()


def test_the_report_lists_every_evaluated_step(tmp_path):
    """Not only the start and the end: one row per evaluation (eval.every = 2 over 5 steps:
    steps 0, 2, 4 and the end, 5), its pass@1 and pass@n with their intervals as logged."""
    out = tmp_path / "run"
    Trainer(tiny_config(out, "max_steps=5")).run(progress=False)
    text = (out / "report.md").read_text()
    evals = [r for r in read_metrics(out / "metrics.jsonl") if r["phase"] == "eval"]
    assert [r["step"] for r in evals] == [0, 2, 4, 5]
    table = text.split("## Every evaluation")[1].split("\n## ")[0]
    rows = [x for x in table.splitlines() if x.startswith("| ") and not x.startswith("| step")]
    assert [int(x.split("|")[1]) for x in rows] == [0, 2, 4, 5]
    n = evals[0]["n"]
    assert f"| pass@1 | pass@{n} |" in table
    for row, r in zip(rows, evals, strict=True):
        assert f"{r['pass@1']:.3f} [{r['pass@1_lo']:.3f}, {r['pass@1_hi']:.3f}]" in row
        assert f"{r[f'pass@{n}']:.3f} [" in row


def test_a_full_disk_while_drawing_the_end_plots_names_the_plot(tmp_path, monkeypatch):
    """The end plots are written atomically like every other file: a full disk is an OSError
    naming the plot (once: "No space left on device", naming no path), the old plot intact and
    no temporary left behind."""
    import errno

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from bestk._atomic import os_error_line

    out = tmp_path / "run"
    Trainer(tiny_config(out, "max_steps=1")).run(progress=False)
    before = (out / "passk.png").read_bytes()

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(FigureCanvasAgg, "print_png", full)
    with pytest.raises(OSError) as e:
        write_report(out)
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(out / "passk.png")
    assert os_error_line(e.value) == f"{out / 'passk.png'}: No space left on device"
    assert (out / "passk.png").read_bytes() == before
    assert not [p for p in out.iterdir() if p.name.startswith(".bestk-tmp")]
