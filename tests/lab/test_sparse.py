"""The sparse classification testbed: composite labels, the initial pass rate, the data."""

from __future__ import annotations

import json

import pytest
import torch

from bestk.lab.digits import BatchedMLP, evaluate_slots, make_problem
from bestk.lab.sparse import SparseConfig, run_sparse


def test_composite_labels_and_the_initial_pass_rate():
    p = make_problem("binary", split="test", test_fraction=0.3, val_fraction=0.2, seed=0,
                     parts=3, num_eval=500)
    assert p.n_classes == 1000 and p.x_eval.shape == (500, 3 * 64)
    assert int(p.y_eval.min()) >= 0 and int(p.y_eval.max()) < 1000
    x, y, ids = p.batch(torch.Generator().manual_seed(0), 2, 8)
    assert x.shape == (2, 8, 192) and y.shape == (2, 8) and bool((ids == -1).all())
    # the label is the 3-digit number of the three images: check one against single digits
    single = make_problem("binary", split="test", test_fraction=0.3, val_fraction=0.2, seed=0)
    xs, ys = single.x_train, single.y_train
    for j in range(3):
        part = x[0, 0, 64 * j:64 * (j + 1)]
        match = (xs == part).all(1).nonzero()[:, 0]
        digit = (int(y[0, 0]) // 10 ** (2 - j)) % 10
        assert bool((ys[match] == digit).all())
    g = torch.Generator().manual_seed(0)
    model = BatchedMLP([BatchedMLP.init(192, 128, 1000, g)])
    init_pass = float(evaluate_slots(model, p, [1])["pass"][0, 0])
    assert init_pass <= 0.01 and init_pass == pytest.approx(1e-3, rel=0.3)


def test_fast_run_writes_per_seed_data(tmp_path):
    cfg = SparseConfig.fast()
    run_sparse(cfg, tmp_path, progress=False)
    data = json.loads((tmp_path / "testbeds.json").read_text())
    assert set(data) == {"sparse-n4"}
    tb = data["sparse-n4"]
    assert set(tb["methods"]) == set(cfg.learners) and tb["classes"] == 100
    assert tb["methods"]["grpo (A/A)"]["config"]["lr"] == tb["methods"]["grpo"]["config"]["lr"]
    for name in ("results.md", "sparse.png", "config.json"):
        assert (tmp_path / name).stat().st_size > 0
    with pytest.raises(ValueError, match="parts"):
        SparseConfig(parts=7).validate()
