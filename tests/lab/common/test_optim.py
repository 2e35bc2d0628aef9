"""SlotAdam equals torch.optim.Adam run separately on each model."""

from __future__ import annotations

import pytest
import torch

from bestk.lab.common.optim import SlotAdam, torch_threads


def test_slot_adam_equals_one_torch_adam_per_model():
    g = torch.Generator().manual_seed(0)
    w0 = torch.randn(3, 4, 5, generator=g, dtype=torch.float64)
    lrs = [1e-3, 3e-2, 0.1]
    w = w0.clone().requires_grad_(True)
    opt = SlotAdam([w], torch.tensor(lrs, dtype=torch.float64)[:, None, None],
                   betas=(0.8, 0.95), eps=1e-6)
    refs = [w0[i].clone().requires_grad_(True) for i in range(3)]
    ref_opts = [torch.optim.Adam([r], lr=lr, betas=(0.8, 0.95), eps=1e-6)
                for r, lr in zip(refs, lrs, strict=True)]
    for step in range(6):
        grad = torch.randn(3, 4, 5, generator=g, dtype=torch.float64) * (step + 1)
        opt.zero_grad()
        w.grad = grad.clone()
        opt.step()
        for i in range(3):
            ref_opts[i].zero_grad()
            refs[i].grad = grad[i].clone()
            ref_opts[i].step()
    for i in range(3):
        torch.testing.assert_close(w.detach()[i], refs[i].detach(), rtol=1e-12, atol=1e-12)


def test_slot_adam_validates_learning_rates():
    w = torch.zeros(2, 3, requires_grad=True)
    with pytest.raises(ValueError, match="positive and finite"):
        SlotAdam([w], torch.tensor([[1e-3], [0.0]]))
    with pytest.raises(RuntimeError):
        SlotAdam([w], torch.ones(3, 2))  # does not broadcast against (2, 3)


def test_torch_threads_sets_and_restores():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with torch_threads(0):  # 0 keeps the current count
        assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError, match="boom"), torch_threads(1):
        raise RuntimeError("boom")
    assert torch.get_num_threads() == before
