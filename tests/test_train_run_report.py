"""``bestk.train.run.report``: ``report.md`` gives rates with the digits they need."""

from __future__ import annotations

import json

import pytest

from bestk.train.run.report import write_report
from bestk.train.trainer import Trainer
from tests.conftest import tiny_config

pytestmark = pytest.mark.usefixtures("restore_torch_threads")


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
