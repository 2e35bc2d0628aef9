r"""The ``kappo_grpo`` advantage estimator (@k-GRPO, KAPPO App. 18, Eqs. 138-144).

``bestk.advantages("kappo_grpo", rewards, prompt_ids, calibration=cal)``: the group labels are
the prompt ids of the calibration bank (``groups.labels[groups.index]`` gives each sample's id).

* Binary calibration (Eq. 140): :math:`A_i = \hat a_k(x)\,(R_i - \bar R)/(s_R + 10^{-6})`, the
  prompt's multiplier applied *after* standardising, because standardising would cancel a
  reward rescaling (Eq. 139). :math:`s_R` is the group std with N-1 (as ``grpo``).
* Win-rate calibration: :math:`S_i = T_{j_i}` with :math:`j_i = \#\{r^{ref}_{x} \le R_i\}`, then
  :math:`A_i = (S_i - \bar S)/(s_S + 10^{-6})` within the group.

Objective: not an unbiased gradient of any fixed objective. Standardised GRPO reweights each
prompt by a sample-dependent factor (App. 18), so @k-GRPO is the paper's *empirical* extension:
its expected update is the GRPO update with each prompt's contribution scaled by
:math:`\hat a_k(x)` (binary), or GRPO on the win-rate-transformed reward :math:`T(F_{ref}(R))`
whose KL-regularised optimum is the max@k optimum of Prop. 4.7 (win-rate). For an unbiased
@k route use @k-A*PO (:func:`bestk.kappo.kappo_apo_loss`) or ``scale="none"`` centring.
Groups of size 1 get A = 0.
"""

from __future__ import annotations

import torch

from bestk.estimators._registry import register_estimator
from bestk.groups import Groups
from bestk.kappo.calibration import Calibration, load_calibration

__all__ = ["kappo_grpo"]

_EPS = 1e-6


@register_estimator(
    "kappo_grpo",
    objective=None,
    reward_domain="calibrated",
    needs_prompt_ids=True,
    path_options={"calibration": load_calibration},
    min_group=2,  # standardised within the group: 0 for a group of one
)
def kappo_grpo(rewards: torch.Tensor, groups: Groups, *, calibration: Calibration) -> torch.Tensor:
    """@k-GRPO advantages from a reference :class:`~bestk.kappo.Calibration`.

    Binary: ``A_i = a_k(x) (R_i - mean) / (std + 1e-6)`` (Eq. 140); win-rate: ``T_j`` of each
    reward, standardised within the group. Registered with ``needs_prompt_ids``: the group
    labels must be the calibration's prompt ids (1-D rewards with ``group``; with ``group=None``
    or 2-D rewards :func:`bestk.advantages` raises ``ValueError``, since each prompt would get
    another prompt's a_k), and a ``calibrated`` reward domain: 0/1 rewards with a binary
    calibration. ``calibration`` may be a file path (loaded once, cached). Not an unbiased
    gradient of any fixed objective (GRPO's std-normalisation reweights prompts by
    sample-dependent factors); the expected update is GRPO's with each prompt scaled by a_k(x)
    -- see the module docstring.
    """
    if not isinstance(calibration, Calibration):
        raise ValueError(
            "option 'calibration' must be a bestk.kappo.Calibration (from bestk.kappo.calibrate "
            f"or Calibration.load), got {type(calibration).__name__}"
        )
    # One lookup per group (G unique labels); the calibration's kind does the rest (binary:
    # a_k times the standardised reward, Eq. 140; win-rate: T_j, then standardised).
    rows = calibration.index_of(groups.labels)
    return calibration.kind_spec.grpo_advantages(calibration, rows, groups, rewards, _EPS)
