"""``loss.micro_batch_size``: the gradient accumulated over micro-batches is the one-pass
gradient (pg, apo, dpo; full fine-tune and LoRA), and a step's logged ``loss`` / ``grad_norm``
do not depend on it (``bestk.train.algorithms.update``)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from bestk.train.algorithms.update import micro_slices
from bestk.train.optim import backward
from tests.conftest import is_timing, kappo_config, tiny_config

pytestmark = pytest.mark.usefixtures("restore_torch_threads")


def test_micro_slices_cover_the_minibatch_in_order():
    assert list(micro_slices(slice(2, 9), None, 9)) == [slice(2, 9)]
    assert list(micro_slices(slice(2, 9), 3, 9)) == [slice(2, 5), slice(5, 8), slice(8, 9)]
    assert list(micro_slices(slice(4, 8), 3, 6)) == [slice(4, 6)]  # the last minibatch, cut
    with pytest.raises(ValueError, match="micro-batch size must be >= 1, got 0"):
        list(micro_slices(slice(0, 4), 0, 4))


def test_backward_of_micro_losses_sums_their_gradients():
    w = torch.tensor([1.0, -2.0], requires_grad=True)
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    (x @ w).pow(2).sum().backward()
    one_pass = w.grad.clone()
    w.grad = None
    computed = []

    def parts():
        for i in range(3):
            computed.append(i)
            assert w.grad is None if i == 0 else w.grad is not None  # backward before the next
            yield (x[i] @ w).pow(2)

    total = backward(parts())
    assert computed == [0, 1, 2]
    torch.testing.assert_close(w.grad, one_pass)
    assert float(total) == pytest.approx(float((x @ w).pow(2).sum().detach()))
    assert not total.requires_grad
    t = (x @ w).sum()
    assert backward(t) is t  # a tensor: exactly loss.backward()
    with pytest.raises(ValueError, match="no micro-batch losses"):
        backward(iter([]))


def _first_update(cfg: Any) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The gradient of the run's first RL optimizer step and the first step's metrics, with
    the policy in float64 (so that what is compared is the accumulation, not float32
    rounding: a batch's gradient is a sum of per-completion gradients that largely cancel)."""
    from bestk.train.trainer import Trainer

    tr = Trainer(cfg, on_step=lambda step, m: steps.append(m))
    tr.model.double()  # the same Parameter objects: the optimizer still holds them
    steps: list[dict[str, Any]] = []
    grads: list[dict[str, torch.Tensor]] = []
    in_rl = []
    optimize, step = tr.optimize, tr.optim.optimizer.step

    def capture_optimize(loss):
        in_rl.append(True)
        return optimize(loss)

    def capture_step(*a, **kw):
        if in_rl and not grads:
            grads.append({n: p.grad.detach().clone() for n, p in tr.model.named_parameters()
                          if p.grad is not None})
        return step(*a, **kw)

    tr.optimize = capture_optimize
    tr.optim.optimizer.step = capture_step
    tr.run(progress=False)
    assert grads and steps
    return grads[0], steps[0]


def _rel_error(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys() and a
    diff = sum(float((a[k].double() - b[k].double()).pow(2).sum()) for k in a) ** 0.5
    norm = sum(float(a[k].double().pow(2).sum()) for k in a) ** 0.5
    assert norm > 0
    return diff / norm


COMMON = ("max_steps=1", "optim.grad_clip=0", "eval.n=2", "eval.num_prompts=2",
          "loss.chunked_logprobs=true")  # float64 log-probs of float64 logits
LORA = ("model.lora.r=2",)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("algo", ["pg", "apo", "dpo"])
def test_the_accumulated_gradient_is_the_one_pass_gradient(tmp_path, algo, lora):
    extra = COMMON + (LORA if lora else ())
    if algo == "pg":
        make = tiny_config
        extra += ("sft.steps=0", "loss.kl_coef=0.05", "loss.entropy_coef=0.01")
        micro = "3"  # 8 completions: micro-batches of 3, 3, 2
    else:
        make = kappo_config
        extra += (f"algorithm={algo}", "kappo.k=2", "rollout.prompts_per_step=3")
        extra += ("kappo.dpo_pairs=2",) if algo == "dpo" else ("rollout.n=2",)
        if algo == "dpo" and lora:  # the tiny LoRA reference solves nothing: no pairs of
            bank = tmp_path / "bank"  # its own; a full fine-tune's bank gives them
            _first_update(make(bank, *COMMON, f"algorithm={algo}", "kappo.k=2",
                               "rollout.prompts_per_step=3"))
            extra += (f"kappo.bank={bank}",)
        micro = "2"  # apo: 6 completions in 3 micro-batches; dpo: 6 pairs, one per micro-batch
    g1, m1 = _first_update(make(tmp_path / "one", *extra))
    g2, m2 = _first_update(make(tmp_path / "micro", *extra, f"loss.micro_batch_size={micro}"))
    assert _rel_error(g1, g2) <= 1e-5
    assert m2["loss"] == pytest.approx(m1["loss"], rel=1e-5, abs=1e-7)
    assert m2["grad_norm"] == pytest.approx(m1["grad_norm"], rel=1e-5)
    for key in m1:
        if is_timing(key):
            continue
        if isinstance(m1[key], str):  # phase
            assert m2[key] == m1[key], key
        else:
            assert m2[key] == pytest.approx(m1[key], rel=1e-4, abs=1e-6), key


def test_minibatches_with_micro_batches_accumulate_each_minibatch(tmp_path):
    """Off-policy passes (two minibatches, two epochs): the no-grad pi_old and pi_ref passes
    are micro-batched too; the first update's gradient is unchanged."""
    extra = COMMON + ("sft.steps=0", "loss.minibatches=2", "loss.ppo_epochs=2",
                      "loss.kl_coef=0.1", "loss.agg=seq-mean-token-mean")
    g1, m1 = _first_update(tiny_config(tmp_path / "one", *extra))
    g2, m2 = _first_update(tiny_config(tmp_path / "micro", *extra, "loss.micro_batch_size=3"))
    assert _rel_error(g1, g2) <= 1e-5


def test_dpo_micro_batches_hold_whole_pairs(tmp_path):
    from bestk.train.validation import validate

    cfg = kappo_config(tmp_path / "x", "algorithm=dpo", "loss.micro_batch_size=3")
    with pytest.raises(ValueError, match="'loss.micro_batch_size' \\(3\\) must be even"):
        validate(cfg)
    with pytest.raises(ValueError, match="loss.micro_batch_size"):
        tiny_config(tmp_path / "y", "loss.micro_batch_size=0")


@pytest.mark.parametrize("extra", [(), ("loss.micro_batch_size=3", "loss.minibatches=2"),
                                   ("model.lora.r=4",)])
def test_a_step_without_advantages_skips_the_backward_and_matches_a_full_update(
        tmp_path, monkeypatch, extra):
    """Steps 2 and 3 of 4 get all-zero advantages (after a step that gave AdamW momentum):
    the run that skips their backward pass ends with bit-identical weights and the same logged
    metrics as one forced through the full update, and the skip really ran no model backward."""
    import bestk.train.algorithms.pg as pg
    from tests.conftest import assert_same_run

    real_adv, real_steps = pg.advantages, pg.optimizer_steps
    calls: list[int] = []

    def zero_some(*args, **kw):
        calls.append(1)
        a = real_adv(*args, **kw)
        return a * 0 if len(calls) % 4 in (2, 3) else a

    def forced(*args, zero_gradient=False):
        return real_steps(*args, zero_gradient=False)

    monkeypatch.setattr(pg, "advantages", zero_some)
    skipped: list[bool] = []
    monkeypatch.setattr(pg, "optimizer_steps", lambda *a, zero_gradient=False: (
        skipped.append(zero_gradient), real_steps(*a, zero_gradient=zero_gradient))[1])
    from bestk.train.trainer import Trainer

    a = Trainer(tiny_config(tmp_path / "skip", "max_steps=4", *extra))
    a.run(progress=False)
    assert skipped[:3] == [False, True, True]  # step 4: real advantages, 0 or not
    monkeypatch.setattr(pg, "optimizer_steps", forced)
    b = Trainer(tiny_config(tmp_path / "full", "max_steps=4", *extra))
    b.run(progress=False)
    assert_same_run(a, b)


def test_zero_loss_gives_every_trainable_parameter_an_exact_zero_gradient():
    from bestk.train.algorithms.update import zero_loss

    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    model[1].bias.requires_grad_(False)
    loss = zero_loss(model)
    assert loss.item() == 0.0
    loss.backward()
    for p in model.parameters():
        if p.requires_grad:
            assert p.grad is not None and torch.equal(p.grad, torch.zeros_like(p))
        else:
            assert p.grad is None
