"""bestk.losses against hand computation and independent (loop / autograd) derivations."""

from __future__ import annotations

import math

import pytest
import torch

from bestk.losses import (
    aggregate,
    chunked_token_logprobs,
    entropy_from_logits,
    kl_penalty,
    ppo_clip_loss,
    token_logprobs,
)


def test_aggregate_modes_by_hand():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    # token-mean: (1 + 2 + 4) / 3
    assert aggregate(loss, mask, "token-mean").item() == pytest.approx(7 / 3)
    # seq-mean-token-mean: ((1+2)/2 + 4/1) / 2
    assert aggregate(loss, mask, "seq-mean-token-mean").item() == pytest.approx((1.5 + 4) / 2)
    # seq-mean-token-sum: ((1+2) + 4) / 2
    assert aggregate(loss, mask, "seq-mean-token-sum").item() == pytest.approx(3.5)


def test_aggregate_errors():
    with pytest.raises(ValueError, match="unknown loss aggregation 'tok'"):
        aggregate(torch.zeros(1, 2), torch.ones(1, 2), "tok")
    with pytest.raises(ValueError, match="shape mismatch"):
        aggregate(torch.zeros(1, 2), torch.ones(1, 3))


def test_ppo_clip_by_hand():
    # Four tokens, one sequence each; ratios 1.5, 0.5, 1.1, 0.7; clip_low 0.2, clip_high 0.3.
    ratio = torch.tensor([[1.5], [0.5], [1.1], [0.7]], dtype=torch.float64)
    old = torch.zeros(4, 1, dtype=torch.float64)
    logp = ratio.log()
    adv = torch.tensor([1.0, -1.0, 2.0, 1.0], dtype=torch.float64)
    mask = torch.ones(4, 1)
    loss, stats = ppo_clip_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.3)
    # token 0: A>0, rho=1.5 > 1.3 -> clipped: -1.3
    # token 1: A<0, rho=0.5 < 0.8 -> max(0.5, 0.8) = 0.8 (clipped branch)
    # token 2: A>0, rho=1.1 inside -> -2.2
    # token 3: A>0, rho=0.7 below floor -> max(-0.7, -0.8) = -0.7 (unclipped, pessimistic)
    expected = (-1.3 + 0.8 - 2.2 - 0.7) / 4
    assert loss.item() == pytest.approx(expected)
    assert stats["clipfrac"] == pytest.approx(2 / 4)
    assert stats["approx_kl"] == pytest.approx(-float(logp.mean()))


def test_ppo_clip_on_policy_gradient_is_policy_gradient():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 7, dtype=torch.float64, requires_grad=True)
    tokens = torch.randint(0, 7, (3, 5))
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    adv = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    logp = token_logprobs(logits, tokens)
    loss, _ = ppo_clip_loss(logp, logp.detach(), adv, mask, agg="seq-mean-token-sum")
    (g,) = torch.autograd.grad(loss, logits)
    # Independent: REINFORCE surrogate -mean_b A_b sum_t logp_bt.
    logp2 = token_logprobs(logits, tokens)
    ref = -(adv[:, None] * logp2 * mask).sum(-1).mean()
    (g2,) = torch.autograd.grad(ref, logits)
    torch.testing.assert_close(g, g2)


def test_ppo_clip_token_weights_scale_each_tokens_policy_gradient():
    """Truncated importance weights ``w_t``: on-policy, the gradient is that of
    ``-mean_b sum_t w_t A_b logp_bt`` (REINFORCE with per-token weights)."""
    torch.manual_seed(1)
    logits = torch.randn(3, 5, 7, dtype=torch.float64, requires_grad=True)
    tokens = torch.randint(0, 7, (3, 5))
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    adv = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    sampler = torch.randn(3, 5, dtype=torch.float64) - 2.0  # the sampler's log-probs
    logp = token_logprobs(logits, tokens)
    w = torch.exp(logp.detach() - sampler).clamp(max=2.0)
    loss, _ = ppo_clip_loss(logp, logp.detach(), adv, mask, agg="seq-mean-token-sum", weights=w)
    (g,) = torch.autograd.grad(loss, logits)
    ref = -(w * adv[:, None] * token_logprobs(logits, tokens) * mask).sum(-1).mean()
    (g2,) = torch.autograd.grad(ref, logits)
    torch.testing.assert_close(g, g2)
    assert w.max() == 2.0 and w.min() < 2.0  # the cap binds on some tokens, not all
    ones, _ = ppo_clip_loss(logp, logp.detach(), adv, mask, weights=torch.ones_like(logp))
    none, _ = ppo_clip_loss(logp, logp.detach(), adv, mask)
    assert ones.item() == none.item()
    with pytest.raises(ValueError, match="weights"):
        ppo_clip_loss(logp, logp.detach(), adv, mask, weights=w[:, :2])


def test_ppo_clip_rejects_bad_clip():
    z = torch.zeros(1, 1)
    with pytest.raises(ValueError, match="clip_low"):
        ppo_clip_loss(z, z, z, z, clip_low=1.0)
    with pytest.raises(ValueError, match="clip_high"):
        ppo_clip_loss(z, z, z, z, clip_high=-0.1)


def test_kl_estimators_by_hand():
    logp = torch.tensor([[math.log(0.5), math.log(0.2)]], dtype=torch.float64)
    ref = torch.tensor([[math.log(0.25), math.log(0.4)]], dtype=torch.float64)
    # log r = log(ref/pi) = [log 0.5, log 2]
    k1 = kl_penalty(logp, ref, "k1")
    k2 = kl_penalty(logp, ref, "k2")
    k3 = kl_penalty(logp, ref, "k3")
    f64 = torch.float64
    torch.testing.assert_close(k1, torch.tensor([[math.log(2), -math.log(2)]], dtype=f64))
    torch.testing.assert_close(k2, torch.tensor([[0.5 * math.log(2) ** 2] * 2], dtype=f64))
    torch.testing.assert_close(
        k3, torch.tensor([[0.5 - 1 + math.log(2), 2 - 1 - math.log(2)]], dtype=torch.float64)
    )
    with pytest.raises(ValueError, match="unknown KL estimator 'k4'"):
        kl_penalty(logp, ref, "k4")


def test_kl_k1_k3_unbiased_by_exact_enumeration():
    # E_{y~pi}[k(y)] over a categorical equals the exact KL(pi || ref) for k1 and k3.
    pi = torch.tensor([0.1, 0.6, 0.3], dtype=torch.float64)
    ref = torch.tensor([0.3, 0.3, 0.4], dtype=torch.float64)
    exact = float((pi * (pi / ref).log()).sum())
    for est in ("k1", "k3"):
        vals = kl_penalty(pi.log()[None], ref.log()[None], est)[0]
        assert float((pi * vals).sum()) == pytest.approx(exact)


def test_entropy_and_logprobs_by_hand():
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [math.log(3), 0.0, -1e9, -1e9]]])
    h = entropy_from_logits(logits)
    p = torch.tensor([0.75, 0.25])
    assert h[0, 0].item() == pytest.approx(math.log(4))
    assert h[0, 1].item() == pytest.approx(float(-(p * p.log()).sum()), rel=1e-5)
    lp = token_logprobs(logits, torch.tensor([[2, 0]]))
    assert lp[0, 0].item() == pytest.approx(math.log(0.25))
    assert lp[0, 1].item() == pytest.approx(math.log(0.75), rel=1e-5)


def test_entropy_with_masked_vocabulary_is_finite_and_exact():
    inf = float("inf")
    logits = torch.tensor([[[0.0, -inf, 0.0, -inf], [math.log(3), 0.0, -inf, -inf]]])
    h = entropy_from_logits(logits)
    assert torch.isfinite(h).all()
    assert h[0, 0].item() == pytest.approx(math.log(2), rel=1e-6)
    assert h[0, 1].item() == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)),
                                           rel=1e-6)
    one_hot = torch.tensor([[5.0, -inf, -inf]])
    assert entropy_from_logits(one_hot).item() == 0.0
    half = entropy_from_logits(logits.half())
    assert half.dtype == torch.float32 and torch.isfinite(half).all()


@pytest.mark.parametrize(
    "row, msg",
    [
        ([-float("inf")] * 3, "all -inf"),
        ([0.0, float("inf"), 0.0], r"\+inf"),
        ([0.0, float("nan"), 0.0], "NaN"),
    ],
)
def test_entropy_rejects_rows_without_a_distribution(row, msg):
    logits = torch.tensor([[0.0, 1.0, 2.0], row])
    with pytest.raises(ValueError, match=msg):
        entropy_from_logits(logits)


# -- chunked token log-probs and entropies ---------------------------------------------------
def _naive(logits, tokens, temperature):
    z = logits.float() / temperature
    return token_logprobs(z, tokens), entropy_from_logits(z)


@pytest.mark.parametrize("chunk_tokens", [1, 3, 5, 7, 64])
@pytest.mark.parametrize("with_entropy", [False, True])
def test_chunked_logprobs_equal_the_naive_float32_values_and_gradients(chunk_tokens,
                                                                       with_entropy):
    """float32 logits: values and gradients of any chunking (whole rows, pieces of a row, one
    position at a time) equal the naive float32 computation to float32 rounding (<= 1e-6)."""
    g = torch.Generator().manual_seed(0)
    B, T, V, tau = 3, 5, 40, 0.7
    logits = (torch.randn(B, T, V, generator=g) * 4).requires_grad_(True)
    tokens = torch.randint(0, V, (B, T), generator=g)
    w_lp, w_ent = torch.randn(B, T, generator=g), torch.randn(B, T, generator=g)
    lp, ent = chunked_token_logprobs(logits, tokens, temperature=tau, with_entropy=with_entropy,
                                     chunk_tokens=chunk_tokens)
    assert (ent is None) == (not with_entropy)
    (lp * w_lp + (ent * w_ent if with_entropy else 0)).sum().backward()
    grad = logits.grad.clone()
    logits.grad = None
    lp0, ent0 = _naive(logits, tokens, tau)
    (lp0 * w_lp + (ent0 * w_ent if with_entropy else 0)).sum().backward()
    assert lp.dtype == torch.float32
    torch.testing.assert_close(lp, lp0, rtol=1e-6, atol=1e-6)
    if with_entropy:
        torch.testing.assert_close(ent, ent0, rtol=1e-6, atol=1e-6)
    assert float((grad - logits.grad).norm() / logits.grad.norm()) <= 1e-6


def test_chunked_logprobs_of_bfloat16_logits_and_the_stated_bound():
    """bfloat16 logits: equal to the naive float32 computation of the same logits (<= 1e-6),
    and within ``2 u max|z|`` (u = 2^-8) of the log-probs of the float32 logits they round;
    the gradient has the logits' dtype."""
    g = torch.Generator().manual_seed(1)
    B, T, V = 4, 6, 300
    z32 = torch.randn(B, T, V, generator=g) * 6
    tokens = torch.randint(0, V, (B, T), generator=g)
    z16 = z32.to(torch.bfloat16).requires_grad_(True)
    lp, ent = chunked_token_logprobs(z16, tokens, with_entropy=True, chunk_tokens=4)
    lp0, ent0 = _naive(z16.detach(), tokens, 1.0)
    torch.testing.assert_close(lp, lp0, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ent, ent0, rtol=1e-6, atol=1e-6)
    bound = 2 * 2.0**-8 * float(z32.abs().max())
    err = float((lp.detach() - token_logprobs(z32, tokens)).abs().max())
    assert 0 < err <= bound
    (lp.sum() + ent.sum()).backward()
    assert z16.grad.dtype == torch.bfloat16 and bool(torch.isfinite(z16.grad).all())


def test_chunked_logprobs_with_masked_vocabulary_and_float64():
    """-inf logits (a filtered vocabulary) add nothing to the entropy or its gradient, as in
    :func:`entropy_from_logits`; float64 logits are computed in float64 (gradcheck)."""
    g = torch.Generator().manual_seed(2)
    z = torch.randn(2, 3, 6, generator=g, dtype=torch.float64)
    z[..., 4:] = float("-inf")
    tokens = torch.randint(0, 4, (2, 3), generator=g)
    z.requires_grad_(True)
    lp, ent = chunked_token_logprobs(z, tokens, with_entropy=True, chunk_tokens=2)
    assert lp.dtype == torch.float64
    lp0, ent0 = token_logprobs(z, tokens), entropy_from_logits(z)
    torch.testing.assert_close(lp, lp0)
    torch.testing.assert_close(ent, ent0)
    (lp.sum() + ent.sum()).backward()
    assert bool(torch.isfinite(z.grad).all()) and bool((z.grad[..., 4:] == 0).all())

    zf = torch.randn(2, 3, 5, generator=g, dtype=torch.float64, requires_grad=True)
    tf = torch.randint(0, 5, (2, 3), generator=g)
    assert torch.autograd.gradcheck(
        lambda x: chunked_token_logprobs(x, tf, temperature=1.3, with_entropy=True,
                                         chunk_tokens=4), (zf,))


def test_chunked_logprobs_errors():
    z, t = torch.zeros(2, 3, 4), torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="must be .B, T, V."):
        chunked_token_logprobs(z, t[:, :2])
    with pytest.raises(ValueError, match="temperature"):
        chunked_token_logprobs(z, t, temperature=0.0)
    with pytest.raises(ValueError, match="chunk_tokens"):
        chunked_token_logprobs(z, t, chunk_tokens=0)
    with pytest.raises(ValueError, match="floating point"):
        chunked_token_logprobs(t[..., None].expand(2, 3, 4), t)


# -- micro-batches: the losses of a minibatch's micro-batches sum to its one-pass loss ---------
def _toy_policy(seed=0, B=6, T=5, V=7, H=4):
    """A differentiable ``(B, T)`` log-prob of sampled tokens: logits = X W (X fixed)."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(B, T, H, generator=g)
    W = torch.randn(H, V, generator=g, requires_grad=True)
    tokens = torch.randint(0, V, (B, T), generator=g)
    mask = (torch.rand(B, T, generator=g) < 0.8).long()
    mask[0] = 0  # a row without a response token
    mask[1, :] = 1

    def logp_ent(rows):
        lp, ent = chunked_token_logprobs(X[rows] @ W, tokens[rows], with_entropy=True)
        return lp, ent

    return W, mask, logp_ent, g


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_micro_batched_pg_loss_and_gradient_equal_one_pass(agg):
    """PPO-clip + k3 KL + entropy: micro-batches of 1, 2 and 4 rows, each aggregated with the
    minibatch's token count / number of sequences, give the one-pass loss, stats and gradient
    (relative error <= 1e-5)."""
    W, mask, logp_ent, g = _toy_policy()
    B = mask.shape[0]
    adv = torch.randn(B, generator=g)
    with torch.no_grad():
        old = logp_ent(slice(None))[0] + 0.3 * torch.randn(mask.shape, generator=g)
        ref = old + 0.2 * torch.randn(mask.shape, generator=g)

    def loss_of(rows, **counts):
        lp, ent = logp_ent(rows)
        m = mask[rows]
        loss, st = ppo_clip_loss(lp, old[rows], adv[rows], m, clip_low=0.2, clip_high=0.28,
                                 agg=agg, **counts)
        loss = loss + 0.1 * aggregate(kl_penalty(lp, ref[rows], "k3"), m, agg, **counts)
        return loss - 0.01 * aggregate(ent, m, agg, **counts), st

    one, st_one = loss_of(slice(None))
    one.backward()
    grad_one, W.grad = W.grad.clone(), None
    counts = {"num_tokens": int(mask.sum()), "num_seqs": B}
    for size in (1, 2, 4):
        total, stats = 0.0, {"clipfrac": 0.0, "approx_kl": 0.0}
        for start in range(0, B, size):
            part, st = loss_of(slice(start, start + size), **counts)
            part.backward()  # gradients accumulate over the micro-batches
            total += part.item()
            stats = {k: stats[k] + st[k] for k in stats}
        assert total == pytest.approx(one.item(), rel=1e-5)
        assert stats == pytest.approx(st_one, rel=1e-5, abs=1e-7)
        assert float((W.grad - grad_one).norm() / grad_one.norm()) <= 1e-5
        W.grad = None


def test_micro_batched_apo_and_dpo_losses_equal_one_pass():
    """@k-A*PO (Eq. 14) and @k-DPO (Eq. 13) average over rows / pairs: a micro-batch's
    ``reduction="sum"`` divided by the minibatch's number of rows / pairs sums to the one-pass
    mean, gradients included (a DPO micro-batch keeps its pairs whole)."""
    from bestk.kappo.losses import kappo_apo_loss, kappo_dpo_loss

    W, mask, logp_ent, g = _toy_policy(seed=1, B=8)
    B = mask.shape[0]

    def seq_logp(rows):
        return (logp_ent(rows)[0] * mask[rows]).sum(-1)

    ref = seq_logp(slice(None)).detach() + torch.randn(B, generator=g)
    target = torch.randn(B, generator=g)
    beta_eff = torch.rand(B // 2, generator=g) + 0.5

    def apo(rows, reduction="mean"):
        return kappo_apo_loss(seq_logp(rows), ref[rows], target[rows], 0.1, reduction=reduction)

    def dpo(pairs, reduction="mean"):
        lp = seq_logp(slice(2 * pairs.start, 2 * pairs.stop))
        r = ref[2 * pairs.start: 2 * pairs.stop]
        return kappo_dpo_loss(lp[0::2], lp[1::2], r[0::2], r[1::2], beta_eff[pairs],
                              reduction=reduction)

    for loss_fn, n in ((apo, B), (dpo, B // 2)):
        one = loss_fn(slice(0, n))
        one.backward()
        grad_one, W.grad = W.grad.clone(), None
        total = 0.0
        for start in range(0, n, 3):  # micro-batches of 3 rows / pairs, the last one shorter
            part = loss_fn(slice(start, min(n, start + 3)), reduction="sum") / n
            part.backward()
            total += part.item()
        assert total == pytest.approx(one.item(), rel=1e-5)
        assert float((W.grad - grad_one).norm() / grad_one.norm()) <= 1e-5
        W.grad = None


def test_aggregate_counts_errors():
    with pytest.raises(ValueError, match="num_tokens must be an integer"):
        aggregate(torch.zeros(1, 2), torch.ones(1, 2), num_tokens=-1)
    with pytest.raises(ValueError, match="num_seqs must be an integer"):
        aggregate(torch.zeros(1, 2), torch.ones(1, 2), "seq-mean-token-sum", num_seqs=1.5)
