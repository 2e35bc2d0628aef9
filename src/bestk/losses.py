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
* Memory-bounded token log-probs and entropies (:func:`chunked_token_logprobs`): the same
  values from ``(B, T, V)`` logits of any float dtype, computed in float32 one chunk of
  ``chunk_tokens`` positions at a time, forward and backward, so that no float32 ``(B, T, V)``
  tensor (nor the softmax / log-softmax copies autograd would keep) exists besides the logits
  and their gradient.
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
    "chunked_token_logprobs",
]

#: Valid loss aggregation modes (see :func:`aggregate`).
AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
#: Valid KL estimators (see :func:`kl_penalty`).
KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")


def _check_same_shape(**tensors: torch.Tensor) -> None:
    shapes = {k: tuple(v.shape) for k, v in tensors.items()}
    if len(set(shapes.values())) != 1:
        raise ValueError(f"shape mismatch: {shapes}")


def aggregate(
    loss: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token-mean",
    *,
    num_tokens: int | None = None,
    num_seqs: int | None = None,
) -> torch.Tensor:
    """Reduce a ``(B, T)`` token loss to a scalar over the tokens where ``mask`` is 1.

    ``mode`` is one of :data:`AGG_MODES` (formulas in the module docstring). Rows with no
    response token contribute 0 to the sequence modes (and count in the batch mean); an
    all-zero mask gives 0.

    **Micro-batches.** ``num_tokens`` / ``num_seqs`` replace the batch's own denominators
    (``sum m``, and ``B`` of the sequence modes) by those of the whole minibatch the rows are
    a micro-batch of. The losses of a minibatch's micro-batches, each aggregated with the
    minibatch's counts, then sum to the loss of the minibatch in one pass (and so do their
    gradients): ``token-mean`` divides every micro-batch by the minibatch's token count, the
    sequence modes by its number of sequences.
    """
    if mode not in AGG_MODES:
        raise ValueError(f"unknown loss aggregation {mode!r}; valid: {', '.join(AGG_MODES)}")
    _check_same_shape(loss=loss, mask=mask)
    if loss.ndim != 2:
        raise ValueError(f"loss must be 2-D (B, T), got shape {tuple(loss.shape)}")
    for name, v in (("num_tokens", num_tokens), ("num_seqs", num_seqs)):
        if v is not None and not (isinstance(v, int) and v >= 0):
            raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
    m = mask.to(loss.dtype)
    masked = loss * m
    if mode == "token-mean":
        if num_tokens is not None:
            return masked.sum() / max(float(num_tokens), 1.0)
        return masked.sum() / m.sum().clamp_min(1.0)
    per_seq = masked.sum(-1)
    if mode == "seq-mean-token-mean":
        per_seq = per_seq / m.sum(-1).clamp_min(1.0)
    if num_seqs is not None:
        return per_seq.sum() / max(float(num_seqs), 1.0)
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
    num_tokens: int | None = None,
    num_seqs: int | None = None,
    weights: torch.Tensor | None = None,
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
    num_tokens, num_seqs:
        the token count and number of sequences of the whole minibatch when these rows are
        one micro-batch of it (:func:`aggregate`); the stats are then also divided by
        ``num_tokens``, so that the micro-batches' losses and stats sum to the minibatch's.
    weights:
        ``(B, T)`` per-token weights of ``L_t`` (constants), e.g. truncated importance weights
        ``min(pi_old / pi_sampler, C)`` when the rollouts came from another sampler than the
        policy (Yao et al. 2025, TRL's ``vllm_importance_sampling_correction``); ``None`` = 1.

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
    if weights is not None:
        _check_same_shape(logp=logp, weights=weights)
        token_loss = token_loss * weights.to(logp.dtype).detach()
    loss = aggregate(token_loss, mask, agg, num_tokens=num_tokens, num_seqs=num_seqs)
    with torch.no_grad():
        m = mask.to(logp.dtype)
        denom = m.sum().clamp_min(1.0) if num_tokens is None else max(float(num_tokens), 1.0)
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

#: Default size of a chunk of :func:`chunked_token_logprobs`, in logits (positions x V).
CHUNK_ELEMENTS = 1 << 22


def _blocks(B: int, T: int, chunk_tokens: int):
    """``(batch slice, time slice)`` blocks covering ``(B, T)`` with at most ``chunk_tokens``
    positions each: whole rows when a row fits, else pieces of one row."""
    if T <= chunk_tokens:
        rows = max(1, chunk_tokens // max(T, 1))
        for b0 in range(0, B, rows):
            yield slice(b0, min(B, b0 + rows)), slice(0, T)
    else:
        for b in range(B):
            for t0 in range(0, T, chunk_tokens):
                yield slice(b, b + 1), slice(t0, min(T, t0 + chunk_tokens))


class _ChunkedLogprobs(torch.autograd.Function):
    """log softmax(z / tau)[y] and H(softmax(z / tau)) per position, in float32 chunks.

    Backward recomputes each chunk's softmax ``p`` (float32) from the saved logits and the
    saved log-normaliser: ``d logp_y / dz = (onehot(y) - p) / tau`` and
    ``dH / dz = -p (log p + H) / tau``, written chunk by chunk into a gradient of the logits'
    dtype. An output whose gradient is not asked for (e.g. the entropies of an update that
    only logs them) adds nothing to the backward pass: no all-zero term is computed (whose
    subtraction could only turn a ``-0`` of the gradient into ``+0``).

    Each chunk works in place in a few float32 buffers reused from chunk to chunk, and
    ``/ tau`` is skipped at ``tau = 1`` (``x / 1 == x`` exactly): the values are those of the
    plain elementwise formulas above, bit for bit.
    """

    @staticmethod
    def forward(ctx, logits, tokens, temperature, chunk_tokens, with_entropy):
        B, T, _ = logits.shape
        work = torch.promote_types(logits.dtype, torch.float32)
        logp = torch.empty(B, T, dtype=work, device=logits.device)
        lse = torch.empty_like(logp)
        ent = torch.zeros_like(logp)
        bufs = _Buffers(work, logits.device)
        for bs, ts in _blocks(B, T, chunk_tokens):
            z = bufs.scaled(logits[bs, ts], temperature)
            norm = torch.logsumexp(z, -1)
            lse[bs, ts] = norm
            logp[bs, ts] = z.gather(-1, tokens[bs, ts, None]).squeeze(-1) - norm
            if with_entropy:
                lp = z.sub_(norm[..., None])      # z is no longer needed: log p in place
                p = bufs.get("p", lp.shape)
                torch.exp(lp, out=p)
                # -sum_v where(p > 0, p log p, 0): where p = 0, p log p is 0 * -inf = NaN
                # (a -inf logit, set to 0 here) or -0 (an underflow), which changes a sum
                # only where it is 0: + 0.0 makes that +0, as the sum of where()'s +0 was
                plogp = lp.mul_(p).nan_to_num_(nan=0.0)
                ent[bs, ts] = -(plogp.sum(-1).add_(0.0))
        ctx.save_for_backward(logits, tokens, lse, ent)
        ctx.temperature, ctx.chunk_tokens = temperature, chunk_tokens
        ctx.with_entropy = with_entropy
        if not with_entropy:
            ctx.mark_non_differentiable(ent)
        # an output the loss does not use gets ``None`` in backward, not a tensor of zeros
        ctx.set_materialize_grads(False)
        return logp, ent

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_logp, grad_ent):
        logits, tokens, lse, ent = ctx.saved_tensors
        tau = ctx.temperature
        B, T, _ = logits.shape
        use_ent = ctx.with_entropy and grad_ent is not None
        if grad_logp is None:
            if not use_ent:
                return None, None, None, None, None
            grad_logp = torch.zeros_like(lse)  # the entropies' gradient alone (rare)
        grad = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        bufs = _Buffers(lse.dtype, logits.device)
        for bs, ts in _blocks(B, T, ctx.chunk_tokens):
            lp = bufs.scaled(logits[bs, ts], tau).sub_(lse[bs, ts, None])   # z - lse
            p = bufs.get("p", lp.shape)
            torch.exp(lp, out=p)
            if use_ent:
                # -grad_ent * p * (where(p > 0, lp, 0) + H), before p is overwritten
                safe_lp = lp.masked_fill_(bufs.not_positive(p), 0.0)
                h = safe_lp.add_(ent[bs, ts, None])
                term = torch.mul(grad_ent[bs, ts, None].to(lse.dtype), p,
                                 out=bufs.get("term", p.shape)).mul_(h)
            g_lp = grad_logp[bs, ts, None].to(lse.dtype)
            g = p.mul_(-g_lp)                     # -p * g_lp (negation is exact)
            g.scatter_add_(-1, tokens[bs, ts, None], g_lp)
            if use_ent:
                g.sub_(term)
            if tau != 1.0:
                g.div_(tau)
            grad[bs, ts] = g                      # rounded to the logits' dtype
        return grad, None, None, None, None


class _Buffers:
    """Float buffers of :class:`_ChunkedLogprobs`, allocated once per pass and reused by
    every chunk of at most the first chunk's size (the last chunk may be smaller)."""

    def __init__(self, dtype: torch.dtype, device: torch.device):
        self.dtype, self.device = dtype, device
        self.store: dict[str, torch.Tensor] = {}

    def get(self, name: str, shape: torch.Size, dtype: torch.dtype | None = None
            ) -> torch.Tensor:
        """A buffer of ``shape`` (contiguous; garbage contents) named ``name``."""
        n = shape.numel()
        buf = self.store.get(name)
        if buf is None or buf.numel() < n:
            buf = torch.empty(n, dtype=dtype or self.dtype, device=self.device)
            self.store[name] = buf
        return buf[:n].view(shape)

    def scaled(self, logits: torch.Tensor, tau: float) -> torch.Tensor:
        """``logits.to(float32) / tau`` (``tau = 1``: no division) in a buffer of its own."""
        z = self.get("z", logits.shape)
        z.copy_(logits)
        return z if tau == 1.0 else z.div_(tau)

    def not_positive(self, p: torch.Tensor) -> torch.Tensor:
        """``~(p > 0)`` (NaN included) as a boolean buffer."""
        pos = self.get("pos", p.shape, torch.bool)
        torch.gt(p, 0, out=pos)
        return pos.logical_not_()


def chunked_token_logprobs(
    logits: torch.Tensor,
    tokens: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_tokens: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(logp, entropy)``: :func:`token_logprobs` and :func:`entropy_from_logits` of
    ``logits / temperature`` (``(B, T, V)``, any float dtype; ``(B, T)`` ids -> ``(B, T)`` in
    float32, float64 for float64 logits; ``entropy`` is ``None`` unless ``with_entropy``),
    both differentiable, computed ``chunk_tokens`` positions at a time (default
    :data:`CHUNK_ELEMENTS` ``// V``: 16 MiB float32 buffers whatever the vocabulary).

    Memory: besides the logits and their gradient (in the logits' dtype), at most a few float32
    ``(chunk_tokens, V)`` buffers exist at once, in the forward and in the backward pass
    (which recomputes each chunk's softmax). The naive ``token_logprobs(logits.float() / tau)``
    keeps a float32 copy of the whole ``(B, T, V)`` (two with bfloat16 logits), and the
    entropy three more (log-softmax, softmax, their product) until the backward pass.

    Accuracy: each chunk is computed in float32 (float64 logits: in float64) from the logits
    as given, so the values equal the naive float32 computation up to float32 rounding (about
    1e-6 relative; tested). With
    bfloat16 logits both differ from what float32 logits ``z`` would give by at most
    ``2 u max|z|`` per log-prob (``u = 2^-8``, bfloat16's unit roundoff: the rounding of the
    chosen logit plus that of the log-normaliser; tested) - the error of the bfloat16 logits
    themselves, not of this computation.
    """
    if logits.ndim != 3 or logits.shape[:-1] != tokens.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} must be (B, T, V) and tokens {tuple(tokens.shape)} "
            "(B, T)"
        )
    if not logits.is_floating_point():
        raise ValueError(f"logits must be floating point, got {logits.dtype}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    if chunk_tokens is None:
        chunk_tokens = max(1, CHUNK_ELEMENTS // max(logits.shape[-1], 1))
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    logp, ent = _ChunkedLogprobs.apply(
        logits, tokens.long(), float(temperature), int(chunk_tokens), bool(with_entropy)
    )
    return logp, (ent if with_entropy else None)


from bestk.kappo.losses import kappo_apo_loss, kappo_dpo_loss  # noqa: E402, F401  (@k losses)
