"""KAPPO: @k adaptive pressure for policy optimisation (papers/kappo-paper.txt).

Reference calibration (binary pass@k and continuous win-rate max@k), the closed-form optimal
quantities, the ``kappo_grpo`` advantage estimator (registered when first used), the @k-A*PO /
@k-DPO losses, the reward-side transform for any engine (:func:`transform_rewards`), the
discrete max@k reconstruction and the finite-bank error analysis. See docs/kappo.md.

The names below load on first use (PEP 562): ``import bestk.kappo`` is cheap, so the
``bestk calibrate`` / ``bestk plot`` commands can be listed without importing torch. Using
``kappo_grpo`` (or ``bestk.ESTIMATORS``) registers the ``kappo_grpo`` estimator.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: submodule -> the public names it defines
_EXPORTS: dict[str, tuple[str, ...]] = {
    "bank": ("load_bank",),
    "binary": ("BinaryCalibration", "binary_calibration", "dpo_beta_eff", "solve_p_star"),
    "calibration": ("KINDS", "SCHEMA_VERSION", "Calibration", "bank_checksum", "calibrate"),
    "estimator": ("kappo_grpo",),
    "losses": ("kappo_apo_loss", "kappo_dpo_loss"),
    "reconstruction": ("MaxAtKReconstruction", "reconstruct_from_bank", "reconstruct_max_at_k"),
    "sensitivity": ("BankError", "binomial_weights", "finite_bank_error"),
    "transform": ("transform_rewards",),
    "winrate": (
        "winrate_constant", "winrate_G", "winrate_log_constant", "winrate_psi", "winrate_T",
        "winrate_table",
    ),
}
_WHERE = {name: mod for mod, names in _EXPORTS.items() for name in names}

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from bestk.kappo.bank import load_bank
    from bestk.kappo.binary import BinaryCalibration, binary_calibration, dpo_beta_eff, solve_p_star
    from bestk.kappo.calibration import KINDS, SCHEMA_VERSION, Calibration, bank_checksum, calibrate
    from bestk.kappo.estimator import kappo_grpo
    from bestk.kappo.losses import kappo_apo_loss, kappo_dpo_loss
    from bestk.kappo.reconstruction import (
        MaxAtKReconstruction,
        reconstruct_from_bank,
        reconstruct_max_at_k,
    )
    from bestk.kappo.sensitivity import BankError, binomial_weights, finite_bank_error
    from bestk.kappo.transform import transform_rewards
    from bestk.kappo.winrate import (
        winrate_constant,
        winrate_G,
        winrate_log_constant,
        winrate_psi,
        winrate_T,
        winrate_table,
    )


__all__ = [
    "BankError",
    "BinaryCalibration",
    "Calibration",
    "KINDS",
    "MaxAtKReconstruction",
    "SCHEMA_VERSION",
    "bank_checksum",
    "binary_calibration",
    "binomial_weights",
    "calibrate",
    "dpo_beta_eff",
    "finite_bank_error",
    "kappo_apo_loss",
    "kappo_dpo_loss",
    "kappo_grpo",
    "load_bank",
    "reconstruct_from_bank",
    "reconstruct_max_at_k",
    "solve_p_star",
    "transform_rewards",
    "winrate_G",
    "winrate_T",
    "winrate_constant",
    "winrate_log_constant",
    "winrate_psi",
    "winrate_table",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'bestk.kappo' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"bestk.kappo.{_WHERE[name]}"), name)
    globals()[name] = value  # later lookups bypass __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
