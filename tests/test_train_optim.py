"""``bestk.train.optim``: the optimizer factory (``optim.implementation``)."""

from __future__ import annotations

import pytest
import torch

from bestk.train.config import TrainConfig
from bestk.train.config_io import apply_overrides
from bestk.train.optim import make_optimizer


def _steps(implementation: str) -> torch.Tensor:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(40, 30), torch.nn.Linear(30, 5))
    cfg = apply_overrides(TrainConfig(), [f"optim.implementation={implementation}",
                                          "optim.weight_decay=0.01"])
    opt = make_optimizer(model, cfg, 1e-2)
    g = torch.Generator().manual_seed(1)
    for _ in range(10):
        opt.zero_grad()
        model(torch.randn(8, 40, generator=g)).pow(2).mean().backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_each_adamw_kernel_is_the_one_asked_for_and_takes_the_same_steps():
    model = torch.nn.Linear(3, 2)
    kinds = {}
    for impl in ("auto", "foreach", "for-loop", "fused"):
        cfg = apply_overrides(TrainConfig(), [f"optim.implementation={impl}"])
        kinds[impl] = make_optimizer(model, cfg, 1e-3).defaults
    assert kinds["auto"]["foreach"] is None and not kinds["auto"]["fused"]
    assert kinds["foreach"]["foreach"] is True
    assert kinds["for-loop"]["foreach"] is False
    assert kinds["fused"]["fused"] is True
    auto, foreach, loop, fused = (_steps(i) for i in ("auto", "foreach", "for-loop", "fused"))
    assert torch.equal(auto, loop) and torch.equal(loop, foreach)  # CPU: auto is for-loop
    assert not torch.equal(fused, loop)
    torch.testing.assert_close(fused, loop, rtol=0, atol=1e-5)


def test_an_unknown_kernel_is_refused_by_name():
    with pytest.raises(ValueError, match="optim.implementation"):
        apply_overrides(TrainConfig(), ["optim.implementation=apex"])
