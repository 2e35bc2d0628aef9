r"""@k losses that fit the KAPPO optimal policy directly (KAPPO Sec. 5, Eqs. 13-14).

* :func:`kappo_apo_loss` -- @k-A*PO (Eq. 14 with the KAPPO reward): the squared regression
  :math:`(\hat a_k R - \beta\log\hat Z - \beta\log\frac{\pi_\theta(y|x)}{\pi_{ref}(y|x)})^2`
  for binary rewards, or :math:`(T_j - \beta\log\frac{\pi_\theta}{\pi_{ref}})^2` for win-rate
  rewards (:math:`Z = 1`). Targets come from :meth:`bestk.kappo.Calibration.regression_target`.
  For any sampling policy :math:`\pi_{old}` with full support the loss is minimised (to 0) by
  :math:`\pi^* = \pi_{ref}\exp((\hat a_k R - \beta \log \hat Z)/\beta)` -- the closed-form
  maximiser of the KL-regularised pass@k objective (Prop. 4.1) when the calibration is exact,
  or the win-rate max@k optimum (Prop. 4.7). It is a regression loss, not a policy-gradient
  estimator.
* :func:`kappo_dpo_loss` -- @k-DPO (Eq. 13): the DPO logistic loss with a per-prompt
  :math:`\beta_{eff}(x)` (from :meth:`Calibration.get` ``("dpo_beta_eff", ids)``):
  :math:`-\log\sigma(\beta_{eff}(x)[\log\frac{\pi_\theta(y_w)}{\pi_{ref}(y_w)} -
  \log\frac{\pi_\theta(y_l)}{\pi_{ref}(y_l)}])`. Its Bradley-Terry optimum is the
  single-reward optimum with prompt-adaptive regularisation, i.e. the pass@k optimum
  (Corollary 4.3).

Log-probabilities are *sequence* log-probabilities (sum of token log-probs), shape ``(B,)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bestk._inputs import Numbers

__all__ = ["kappo_apo_loss", "kappo_dpo_loss", "REDUCTIONS"]

REDUCTIONS = ("mean", "sum", "none")


def _as_like(x: Numbers, ref: torch.Tensor, name: str) -> torch.Tensor:
    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(x, dtype=ref.dtype)
    t = t.to(device=ref.device, dtype=ref.dtype)
    if t.ndim == 0:
        t = t.expand_as(ref)
    if t.shape != ref.shape:
        raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(ref.shape)}")
    return t


def _check(t: torch.Tensor, name: str) -> None:
    if t.ndim != 1:
        raise ValueError(f"{name} must be 1-D (B,), got shape {tuple(t.shape)}")
    if t.numel() == 0:
        raise ValueError(f"{name} is empty")
    if not t.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got {t.dtype}")
    if not bool(torch.isfinite(t.detach()).all()):
        i = int(torch.nonzero(~torch.isfinite(t.detach()))[0])
        raise ValueError(f"{name}[{i}] is not finite")


def _reduce(loss: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"unknown reduction {reduction!r}; valid: {', '.join(REDUCTIONS)}")


def kappo_apo_loss(
    policy_logps: torch.Tensor,
    ref_logps: torch.Tensor,
    targets: Numbers,
    beta: float,
    *,
    reduction: str = "mean",
) -> torch.Tensor:
    """@k-A*PO loss :math:`(t-\\beta(\\log\\pi_\\theta - \\log\\pi_{ref}))^2` (Eq. 14), t = target.

    Parameters
    ----------
    policy_logps, ref_logps:
        ``(B,)`` sequence log-probabilities of the sampled completions under the trained and the
        reference policy (``ref_logps`` is treated as a constant).
    targets:
        ``(B,)`` regression targets :math:`\\hat a_k(x) R - \\beta\\log\\hat Z(x)` (binary) or
        :math:`T_j` (win-rate), e.g. ``cal.regression_target(prompt_ids, rewards)``.
    beta:
        The KL strength used for the calibration (> 0).
    reduction:
        ``"mean"`` (default), ``"sum"`` or ``"none"``.
    """
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not beta > 0:
        raise ValueError(f"beta must be a finite number > 0, got {beta!r}")
    if beta == float("inf"):
        raise ValueError("beta must be finite")
    _check(policy_logps, "policy_logps")
    ref = _as_like(ref_logps, policy_logps, "ref_logps")
    tgt = _as_like(targets, policy_logps, "targets")
    _check(ref, "ref_logps")
    _check(tgt, "targets")
    resid = tgt.detach() - beta * (policy_logps - ref.detach())
    return _reduce(resid * resid, reduction)


def kappo_dpo_loss(
    chosen_logps: torch.Tensor,
    rejected_logps: torch.Tensor,
    ref_chosen_logps: Numbers,
    ref_rejected_logps: Numbers,
    beta_eff: Numbers,
    *,
    reduction: str = "mean",
) -> torch.Tensor:
    """@k-DPO loss :math:`-\\log\\sigma(\\beta_{eff}(x)[\\Delta_w - \\Delta_l])` (Eq. 13).

    ``chosen_logps``/``rejected_logps`` are the trained policy's sequence log-probs of the
    preferred / dispreferred completion of each pair, ``ref_*`` the reference ones, and
    ``beta_eff`` the per-pair (per-prompt) coefficient (scalar or ``(B,)``, > 0), e.g.
    ``cal.get("dpo_beta_eff", prompt_ids)``.
    """
    _check(chosen_logps, "chosen_logps")
    rej = _as_like(rejected_logps, chosen_logps, "rejected_logps")
    rc = _as_like(ref_chosen_logps, chosen_logps, "ref_chosen_logps")
    rr = _as_like(ref_rejected_logps, chosen_logps, "ref_rejected_logps")
    be = _as_like(beta_eff, chosen_logps, "beta_eff")
    for t, n in ((rej, "rejected_logps"), (rc, "ref_chosen_logps"), (rr, "ref_rejected_logps"),
                 (be, "beta_eff")):
        _check(t, n)
    if bool((be.detach() <= 0).any()):
        i = int(torch.nonzero(be.detach() <= 0)[0])
        raise ValueError(f"beta_eff[{i}] = {be[i].item()} must be > 0")
    margin = (chosen_logps - rc.detach()) - (rej - rr.detach())
    return _reduce(-F.logsigmoid(be.detach() * margin), reduction)
