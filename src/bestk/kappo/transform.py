r"""Reward-side KAPPO for any engine: the prompt-adaptive reward (KAPPO Cors. 4.4 and 4.6).

KAPPO's reward-side interface turns an @1 optimiser into an @k optimiser by changing only the
reward it sees. Optimising the ordinary KL-regularised objective
:math:`E_\pi[\tilde R] - \beta\,\mathrm{KL}(\pi\|\pi_{ref})` with

* **binary rewards** (Corollary 4.4, Eq. 7): :math:`\tilde R(y,x) = a_k(x)\,R(y,x)`,
  :math:`a_k(x) = k(1-p^*(x))^{k-1}` -- gives the pass@k optimum of Prop. 4.1;
* **graded rewards** (Corollary 4.6 with the explicit win-rate transform of Prop. 4.7, Eq. 12):
  :math:`\tilde R(y,x) = S^q_x(R(y,x)) = T(F_{ref}(R(y,x)|x))`, computed from the reference
  bank as :math:`T_j`, :math:`j = \#\{\text{reference rewards of } x \le R\}` (Algorithm 2) --
  gives the win-rate max@k optimum of Prop. 4.7.

So any engine whose estimator follows :math:`\nabla E_\pi[\tilde R]` (REINFORCE, RLOO, Dr.GRPO's
centring; with a KL term of strength :math:`\beta`) trains @k by transforming its rewards with
:func:`transform_rewards`. GRPO's per-group standardisation cancels a per-prompt multiplier
(KAPPO Eq. 139), so binary rewards need an unscaled estimator (RLOO, or Dr.GRPO with no std
division; see ``bestk.integrations.verl.kappo_compute_score`` and
``bestk.integrations.trl.KappoReward``); win-rate rewards work with either (Eq. 15 is the
standardised form).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, overload

import numpy as np
import torch

from bestk._inputs import ArrayInput, Numbers, NumbersOut
from bestk.kappo.calibration import Calibration

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from bestk.groups import Labels

__all__ = ["transform_rewards"]


@overload
def transform_rewards(calibration: Calibration, prompt_ids: Labels,
                      rewards: torch.Tensor) -> torch.Tensor: ...


@overload
def transform_rewards(calibration: Calibration, prompt_ids: Labels,
                      rewards: ArrayInput) -> np.ndarray: ...


def transform_rewards(calibration: Calibration, prompt_ids: Labels,
                      rewards: Numbers) -> NumbersOut:
    """KAPPO's adaptive reward of each (prompt, reward) pair, from a reference calibration.

    Parameters
    ----------
    calibration:
        A :class:`~bestk.kappo.Calibration` (``bestk calibrate`` / :func:`bestk.kappo.calibrate`).
    prompt_ids:
        The prompt id of each reward: a sequence (or tensor) of ``B`` ids for ``B`` rewards, or,
        for ``(G, N)`` rewards laid out one group per row, ``G`` ids (one per row). Every id must
        be in the calibration (else a ``ValueError`` naming the first missing one).
    rewards:
        ``(B,)`` or ``(G, N)`` rewards, a tensor, array or sequence; all finite. A binary
        calibration needs 0/1 rewards.

    Returns
    -------
    The transformed rewards, shaped like ``rewards``: :math:`a_k(x) R` (binary, Eq. 7) or
    :math:`T_j` (win-rate, Algorithm 2). A tensor (same dtype and device) for tensor input,
    else a float64 numpy array.

    Examples
    --------
    >>> from bestk.kappo import calibrate
    >>> cal = calibrate({"easy": [1] * 27 + [0] * 3, "hard": [1] + [0] * 29}, k=4, beta=0.1)
    >>> transform_rewards(cal, ["easy", "hard"], [1.0, 1.0]).round(4)
    array([0.0036, 0.3579])
    """
    if not isinstance(calibration, Calibration):
        raise ValueError(
            "calibration must be a bestk.kappo.Calibration (bestk.kappo.calibrate or "
            f"Calibration.load), got {type(calibration).__name__}"
        )
    r = rewards if isinstance(rewards, torch.Tensor) else np.asarray(rewards, dtype=np.float64)
    if r.ndim not in (1, 2):
        raise ValueError(f"rewards must be (B,) or (G, N), got shape {tuple(r.shape)}")
    ids = prompt_ids.detach().cpu().numpy() if isinstance(prompt_ids, torch.Tensor) else prompt_ids
    if r.ndim == 2:
        rows = np.empty(len(ids), dtype=object)
        rows[:] = list(ids)
        if rows.shape != (r.shape[0],):
            raise ValueError(
                f"{r.shape[0]} groups of rewards need {r.shape[0]} prompt ids (one per row), "
                f"got {len(rows)}"
            )
        ids = np.repeat(rows, r.shape[1])
    flat = r.reshape(-1)
    out = calibration.transform(ids, flat)
    return out.reshape(r.shape)  # a tensor's: already on the rewards' device
