"""``bestk.train.optim``: the optimizer factory (``optim.implementation``) and float32 master
weights of bfloat16 parameters."""

from __future__ import annotations

import pytest
import torch

from bestk.train.config import TrainConfig
from bestk.train.config.io import apply_overrides
from bestk.train.optim import PolicyOptimizer, make_optimizer


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


# -- float32 masters of bfloat16 parameters ---------------------------------------------------
def _bf16_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(),
                               torch.nn.Linear(5, 3)).to(torch.bfloat16)


def _loss(model: torch.nn.Module, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 6, generator=g).to(torch.bfloat16)
    return model(x).float().pow(2).mean()


def _cfg(*items: str):
    return apply_overrides(TrainConfig(), list(items))


def test_a_bfloat16_model_keeps_float32_masters_and_adamw_state():
    model = _bf16_model()
    opt = PolicyOptimizer(model, _cfg("optim.lr=1e-2"))
    assert opt.adamw.active and set(opt.masters()) == {0, 1, 2, 3}
    for _ in range(2):
        opt.step(_loss(model, 0), rl_step=1, rewards=None)
    assert all(p.dtype == torch.bfloat16 and p.grad is None for p in model.parameters())
    for i, p in enumerate(model.parameters()):
        master = opt.masters()[i]
        assert master.dtype == torch.float32 and torch.equal(master.to(torch.bfloat16), p)
        state = opt.optimizer.state[master]
        assert state["exp_avg"].dtype == torch.float32
        assert state["exp_avg_sq"].dtype == torch.float32


def test_a_float32_model_has_no_masters_and_steps_as_plain_adamw():
    torch.manual_seed(0)
    a = torch.nn.Linear(6, 3)
    b = torch.nn.Linear(6, 3)
    b.load_state_dict(a.state_dict())
    cfg = _cfg("optim.lr=1e-2", "optim.grad_clip=0.5")
    opt = PolicyOptimizer(a, cfg)
    plain = make_optimizer(b, cfg, 1e-2)
    assert not opt.adamw.active and opt.masters() == {}
    assert opt.optimizer.param_groups[0]["params"] == list(a.parameters())
    x = torch.randn(8, 6, generator=torch.Generator().manual_seed(1))
    for _ in range(3):
        opt.step(a(x).pow(2).mean(), rl_step=1, rewards=None)
        plain.zero_grad()
        b(x).pow(2).mean().backward()
        torch.nn.utils.clip_grad_norm_(b.parameters(), 0.5)
        plain.step()
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)


def test_a_bfloat16_step_is_adamw_on_the_float32_masters_by_hand_then_rounded():
    """Three steps with clipping, weight decay and bias correction: the masters follow AdamW
    computed by hand in float64 on the upcast bfloat16 gradients (to float32 rounding), and
    each bfloat16 parameter is its master rounded to nearest even."""
    lr, b1, b2, eps, wd, clip = 1e-2, 0.9, 0.99, 1e-8, 0.1, 0.05
    model = _bf16_model()
    twin = _bf16_model()  # the same weights: the gradients the optimizer sees, by hand
    opt = PolicyOptimizer(model, _cfg(f"optim.lr={lr}", "optim.beta1=0.9", "optim.beta2=0.99",
                                      f"optim.weight_decay={wd}", f"optim.grad_clip={clip}"))
    assert opt.optimizer.defaults["eps"] == eps
    w = [p.detach().double() for p in model.parameters()]
    m = [torch.zeros_like(x) for x in w]
    v = [torch.zeros_like(x) for x in w]
    for t in range(1, 4):
        twin.zero_grad()
        _loss(twin, t).backward()
        g = [p.grad.double() for p in twin.parameters()]  # bfloat16 gradients, upcast
        norm = torch.sqrt(sum((x * x).sum() for x in g))
        g = [x * min(1.0, clip / (float(norm) + 1e-6)) for x in g]
        gnorm, _ = opt.step(_loss(model, t), rl_step=t, rewards=None)
        assert gnorm == pytest.approx(float(norm), rel=1e-6)
        for i in range(len(w)):
            w[i] = w[i] * (1 - lr * wd)
            m[i] = b1 * m[i] + (1 - b1) * g[i]
            v[i] = b2 * v[i] + (1 - b2) * g[i] ** 2
            step = lr / (1 - b1 ** t) * m[i] / ((v[i] / (1 - b2 ** t)).sqrt() + eps)
            w[i] = w[i] - step
        for i, p in enumerate(model.parameters()):
            master = opt.masters()[i]
            torch.testing.assert_close(master.double(), w[i], rtol=1e-6, atol=1e-7)
            assert torch.equal(p.detach(), master.to(torch.bfloat16))
            twin_p = list(twin.parameters())[i]
            with torch.no_grad():
                twin_p.copy_(p)
    # the masters hold more than their bfloat16 rounding: the point of keeping them
    assert any(not torch.equal(mw, mw.to(torch.bfloat16).float())
               for mw in opt.masters().values())


def test_updates_below_bfloat16_resolution_accumulate_in_the_masters():
    """Steps of about 1e-3 down from 1 (bfloat16's spacing just below 1: 2**-8): a bfloat16
    parameter stepped alone rounds back to 1 every time and never moves; with a float32
    master the steps add up, and the parameter is the float32 trajectory rounded."""
    def model_at_one() -> torch.nn.Linear:
        lin = torch.nn.Linear(4, 1, bias=False).to(torch.bfloat16)
        with torch.no_grad():
            lin.weight.fill_(1.0)
        return lin

    cfg = _cfg("optim.lr=1e-3", "optim.weight_decay=0", "optim.grad_clip=0")
    x = torch.ones(2, 4, dtype=torch.bfloat16)
    alone, mastered = model_at_one(), model_at_one()
    plain = make_optimizer(alone, cfg, 1e-3)  # AdamW on the bfloat16 weights themselves
    opt = PolicyOptimizer(mastered, cfg)
    reference = torch.ones(4, dtype=torch.float32)
    for _ in range(12):
        plain.zero_grad()
        alone(x).sum().backward()
        plain.step()
        opt.step(mastered(x).sum(), rl_step=1, rewards=None)
        reference -= 1e-3  # Adam's step on a constant gradient: lr, up to eps
    assert torch.equal(alone.weight, torch.ones(1, 4, dtype=torch.bfloat16))  # stuck
    master = opt.masters()[0]
    torch.testing.assert_close(master[0], reference, rtol=0, atol=2e-6)
    assert torch.equal(mastered.weight, master.to(torch.bfloat16))
    assert float(mastered.weight.detach()[0, 0]) == 1 - 3 * 2 ** -8  # 0.988 rounds to 0.98828125


def test_a_parameter_written_elsewhere_has_its_master_read_again():
    """A load_state_dict between steps (a warm start, an SFT warm-up) replaces the master; a
    write of the value the master already rounds to keeps the master's extra bits."""
    model = _bf16_model()
    opt = PolicyOptimizer(model, _cfg("optim.lr=1e-2"))
    opt.step(_loss(model, 0), rl_step=1, rewards=None)
    before = {i: t.clone() for i, t in opt.masters().items()}
    model.load_state_dict(model.state_dict())  # the same (rounded) values: masters kept
    assert all(torch.equal(before[i], t) for i, t in opt.masters().items())
    other = _bf16_model()
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(2)
    model.load_state_dict(other.state_dict())
    for (i, t), p in zip(opt.masters().items(), other.parameters(), strict=True):
        assert torch.equal(t, p.float()), i


def test_micro_batch_gradients_add_up_in_float32():
    """Micro-batch losses backpropagated one by one: each one's bfloat16 gradients are added
    into the masters' float32 gradients before the next, not summed in bfloat16."""
    model = _bf16_model()
    twin = _bf16_model()
    opt = PolicyOptimizer(model, _cfg("optim.lr=1e-2", "optim.grad_clip=0"))
    parts = []
    for seed in (1, 2, 3):
        twin.zero_grad()
        _loss(twin, seed).backward()
        parts.append([p.grad.clone() for p in twin.parameters()])
    captured = []
    real = opt.optimizer.step
    opt.optimizer.step = lambda: captured.append([t.grad.clone() for t in opt.adamw.tensors])
    opt.step((_loss(model, seed) for seed in (1, 2, 3)), rl_step=1, rewards=None)
    opt.optimizer.step = real
    (grads,) = captured
    for i, g in enumerate(grads):
        float32_sum = parts[0][i].float() + parts[1][i].float() + parts[2][i].float()
        assert g.dtype == torch.float32 and torch.equal(g, float32_sum)
    bf16_sums = [(a + b + c).float() for a, b, c in zip(*parts, strict=True)]
    assert any(not torch.equal(g, s) for g, s in zip(grads, bf16_sums, strict=True))
