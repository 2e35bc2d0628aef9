"""Token-level policy losses: PPO-clip surrogate, KL-to-reference estimators, entropy.

Pure functions over tensors shaped ``(B, T)`` (one row per completion, ``T`` response tokens)
with a ``(B, T)`` 0/1 ``mask`` marking real response tokens. Conventions follow verl / TRL so a
loss computed here matches what those trainers optimise:

* PPO-clip with separate clip ranges (DAPO "clip-higher", Yu et al. 2025, Eq. 8): with
  ``rho = exp(logp - old_logp)``

      L_t = max( -A rho,  -A clip(rho, 1 - clip_low, 1 + clip_high) )

  (Schulman et al. 2017, Eq. 7, written as a loss to minimise).
* Aggregation of a token loss ``L`` (:func:`aggregate`):

  - ``token-mean``: ``sum_{b,t} m L / sum_{b,t} m`` (every token of the batch weighs the same;
    DAPO's token-level loss),
  - ``seq-mean-token-mean``: ``mean_b [ sum_t m L / sum_t m ]`` (original GRPO, Eq. 3 of
    Shao et al. 2024),
  - ``seq-mean-token-sum``: ``mean_b [ sum_t m L ]`` (Dr.GRPO-style, no length normalisation).

* KL to the reference policy from sampled tokens (Schulman, "Approximating KL divergence",
  2020), with ``log r = ref_logp - logp``:

  - ``k1 = -log r`` (unbiased for KL(pi || ref), high variance, can be negative),
  - ``k2 = (log r)^2 / 2`` (biased, low variance; its gradient is the gradient of the KL),
  - ``k3 = (r - 1) - log r`` (unbiased, always >= 0; GRPO's choice).

* Token entropy from logits: ``H = -sum_v p_v log p_v`` with ``0 log 0 = 0`` (``-inf`` logits
  of a masked vocabulary contribute 0).
"""

from __future__ import annotations

import torch

__all__ = [
    "AGG_MODES",
    "KL_ESTIMATORS",
    "aggregate",
    "ppo_clip_loss",
    "kl_penalty",
    "entropy_from_logits",
    "token_logprobs",
]

#: Valid loss aggregation modes (see :func:`aggregate`).
AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
#: Valid KL estimators (see :func:`kl_penalty`).
KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")


def _check_same_shape(**tensors: torch.Tensor) -> None:
    shapes = {k: tuple(v.shape) for k, v in tensors.items()}
    if len(set(shapes.values())) != 1:
        raise ValueError(f"shape mismatch: {shapes}")


def aggregate(loss: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean") -> torch.Tensor:
    """Reduce a ``(B, T)`` token loss to a scalar over the tokens where ``mask`` is 1.

    ``mode`` is one of :data:`AGG_MODES` (formulas in the module docstring). Rows with no
    response token contribute 0 to the sequence modes (and count in the batch mean); an
    all-zero mask gives 0.
    """
    if mode not in AGG_MODES:
        raise ValueError(f"unknown loss aggregation {mode!r}; valid: {', '.join(AGG_MODES)}")
    _check_same_shape(loss=loss, mask=mask)
    if loss.ndim != 2:
        raise ValueError(f"loss must be 2-D (B, T), got shape {tuple(loss.shape)}")
    m = mask.to(loss.dtype)
    masked = loss * m
    if mode == "token-mean":
        return masked.sum() / m.sum().clamp_min(1.0)
    per_seq = masked.sum(-1)
    if mode == "seq-mean-token-mean":
        per_seq = per_seq / m.sum(-1).clamp_min(1.0)
    return per_seq.mean()


def ppo_clip_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    agg: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip surrogate loss with separate lower/upper clip ranges.

    ``L_t = max(-A rho_t, -A clip(rho_t, 1 - clip_low, 1 + clip_high))``,
    ``rho_t = exp(logp_t - old_logp_t)``, aggregated with :func:`aggregate`. At
    ``logp == old_logp`` its gradient is ``-A grad logp`` (the policy gradient).

    Parameters
    ----------
    logp, old_logp:
        ``(B, T)`` log-probabilities of the sampled tokens under the current and the behaviour
        (rollout) policy; ``old_logp`` is treated as a constant.
    advantages:
        ``(B, T)`` token advantages, or ``(B,)`` sequence advantages (broadcast over tokens).
    mask:
        ``(B, T)`` 1 on response tokens.
    clip_low, clip_high:
        ``>= 0``; the ratio is clipped to ``[1 - clip_low, 1 + clip_high]``.

    Returns
    -------
    ``(loss, stats)`` with stats ``clipfrac`` (share of tokens where the clipped branch is
    active) and ``approx_kl`` (token mean of ``old_logp - logp``).
    """
    if advantages.ndim == 1:
        advantages = advantages.unsqueeze(-1).expand_as(logp)
    _check_same_shape(logp=logp, old_logp=old_logp, advantages=advantages, mask=mask)
    for name, v in (("clip_low", clip_low), ("clip_high", clip_high)):
        if not v >= 0:
            raise ValueError(f"{name} must be >= 0, got {v!r}")
    if clip_low >= 1:
        raise ValueError(f"clip_low must be < 1 (ratio floor 1 - clip_low > 0), got {clip_low}")
    adv = advantages.to(logp.dtype).detach()
    log_ratio = logp - old_logp.detach()
    ratio = torch.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    token_loss = torch.maximum(unclipped, clipped)
    loss = aggregate(token_loss, mask, agg)
    with torch.no_grad():
        m = mask.to(logp.dtype)
        denom = m.sum().clamp_min(1.0)
        clipfrac = float(((clipped > unclipped).to(logp.dtype) * m).sum() / denom)
        approx_kl = float((-log_ratio * m).sum() / denom)
    return loss, {"clipfrac": clipfrac, "approx_kl": approx_kl}


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of ``KL(pi || pi_ref)`` from tokens sampled from ``pi``.

    With ``log r = ref_logp - logp``: ``k1 = -log r``, ``k2 = (log r)^2 / 2``,
    ``k3 = exp(log r) - 1 - log r`` (Schulman 2020). ``ref_logp`` is treated as a constant;
    ``log r`` is clamped to ``[-20, 20]`` before the exponential of ``k3``.
    """
    if estimator not in KL_ESTIMATORS:
        raise ValueError(
            f"unknown KL estimator {estimator!r}; valid: {', '.join(KL_ESTIMATORS)}"
        )
    _check_same_shape(logp=logp, ref_logp=ref_logp)
    log_r = ref_logp.detach() - logp
    if estimator == "k1":
        return -log_r
    if estimator == "k2":
        return 0.5 * log_r * log_r
    log_r = log_r.clamp(-20.0, 20.0)
    return torch.expm1(log_r) - log_r


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of ``softmax(logits)`` over the last axis: ``H = -sum_v p_v log p_v``.

    Computed as ``-sum_v p_v (z_v - logsumexp(z))`` with the convention ``0 log 0 = 0``, so
    masked vocabulary entries (``-inf`` logits, as top-k / top-p filtering leaves them) add
    nothing instead of ``0 * -inf = NaN``. half / bfloat16 logits are computed in float32.

    Raises ``ValueError`` if a row has no finite logit (all ``-inf``: no distribution), a
    ``+inf`` logit, or a NaN.
    """
    z = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    lse = torch.logsumexp(z, -1, keepdim=True)
    if not bool(torch.isfinite(lse).all()):
        bad = torch.nonzero(~torch.isfinite(lse[..., 0]))[0].tolist()
        row = z[tuple(bad)]
        what = ("contains NaN" if bool(torch.isnan(row).any()) else
                "contains +inf" if bool(torch.isposinf(row).any()) else
                "is all -inf (no token has positive probability)")
        raise ValueError(f"entropy_from_logits: the logits row at index {tuple(bad)} {what}")
    logp = z - lse
    p = torch.exp(logp)
    plogp = torch.where(p > 0, p * logp, torch.zeros_like(p))
    return -plogp.sum(-1)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``log softmax(logits)[..., tokens]``: ``(B, T, V)`` logits, ``(B, T)`` ids -> ``(B, T)``."""
    if logits.shape[:-1] != tokens.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and tokens {tuple(tokens.shape)} do not match"
        )
    z = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    picked = torch.gather(z, -1, tokens.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(z, -1)

from bestk.kappo.losses import kappo_apo_loss, kappo_dpo_loss  # noqa: E402, F401  (@k losses)
