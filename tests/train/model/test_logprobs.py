"""``bestk.train.model.logprobs``: the update's forward computes the logits it uses only
(``logits_to_keep``) where asked, with the values and gradients of the full computation."""

from __future__ import annotations

import pytest
import torch

from bestk.train.config import ModelConfig
from bestk.train.model.logprobs import sequence_logprobs
from bestk.train.model.policy import load_policy

pytestmark = pytest.mark.usefixtures("restore_torch_threads")

SMALL = ModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
P, T, N = 5, 4, 3  # prompt and completion lengths, completions per prompt


def _batch():
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, 14, (2, P), generator=g).repeat_interleave(N, 0)
    prompt_mask = torch.ones_like(prompts)
    prompt_mask[:N, :2] = 0  # the first prompt left-padded
    completions = torch.randint(3, 14, (2 * N, T), generator=g)
    completion_mask = torch.ones_like(completions)
    completion_mask[0, -1] = 0
    return prompts, prompt_mask, completions, completion_mask


def _run(model, group_size, trim):
    """(log-probs, entropies, gradients, logits_to_keep of each forward call)."""
    seen: list = []

    def keep(m, args, kw):  # the count kept: an index tensor of the last positions, or None
        k = kw.get("logits_to_keep")
        if k is not None:
            assert isinstance(k, torch.Tensor) and k.tolist() == list(range(-len(k), 0))
            k = len(k)
        seen.append(k)

    handle = model.register_forward_pre_hook(keep, with_kwargs=True)
    try:
        model.zero_grad(set_to_none=True)
        lp, ent = sequence_logprobs(model, *_batch(), temperature=0.9, with_entropy=True,
                                    group_size=group_size, trim_logits=trim)
        (lp.sum() + 0.1 * ent.sum()).backward()
    finally:
        handle.remove()
    grads = [p.grad.float().clone() for p in model.parameters()]
    return lp.detach(), ent.detach(), grads, seen


@pytest.fixture(scope="module")
def policies():
    torch.set_num_threads(1)
    f32, _ = load_policy(SMALL, "0123456789+=", seed=0)
    bf16, _ = load_policy(SMALL.model_copy(update={"dtype": "bfloat16"}), "0123456789+=", seed=0)
    return f32, bf16


@pytest.mark.parametrize("group_size", [1, N])
def test_trimmed_logits_give_the_full_values_and_gradients(policies, group_size):
    """One forward over prompt + completion keeps the last T + 1 positions' logits; the
    shared-prompt branch's prefill keeps the last one (its completion forward needs all)."""
    f32, _ = policies
    lp, ent, grads, keeps = _run(f32, group_size, trim=False)
    assert set(keeps) == {None}
    lp2, ent2, grads2, keeps = _run(f32, group_size, trim=True)
    assert keeps == ([T + 1] if group_size == 1 else [1, None])
    torch.testing.assert_close(lp2, lp, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ent2, ent, rtol=1e-6, atol=1e-6)
    for a, b in zip(grads2, grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("group_size", [1, N])
def test_float32_keeps_every_logit_and_bfloat16_trims_by_default(policies, group_size):
    f32, bf16 = policies
    assert set(_run(f32, group_size, trim=None)[3]) == {None}  # bit-identical to before
    lp, ent, grads, keeps = _run(bf16, group_size, trim=None)
    assert keeps == ([T + 1] if group_size == 1 else [1, None])
    lp2, ent2, grads2, _ = _run(bf16, group_size, trim=False)
    torch.testing.assert_close(lp, lp2, rtol=0, atol=2e-2)  # bfloat16 rounding at most
    torch.testing.assert_close(ent, ent2, rtol=0, atol=2e-2)
