"""KAPPO: @k adaptive pressure for policy optimisation (see ``docs/references.md``).

Reference calibration (binary pass@k and continuous win-rate max@k), the closed-form optimal
quantities, the @k-A*PO / @k-DPO losses, the reward-side transform for any engine
(:func:`transform_rewards`), the discrete max@k reconstruction and the finite-bank error
analysis. See docs/kappo.md. The ``kappo_grpo`` advantage estimator built on them is a
built-in of the estimator registry, a layer above this one
(:func:`bestk.estimators.kappo_grpo.kappo_grpo`; ``bestk.advantages("kappo_grpo", ...)``).

The names below load on first use (PEP 562, :mod:`bestk._lazy`): ``import bestk.kappo`` is
cheap, so the ``bestk calibrate`` / ``bestk plot`` commands can be listed without importing
torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bestk._lazy import lazy_attributes

#: public name -> module that defines it
_LAZY: dict[str, str] = {
    "load_bank": "bestk.kappo.bank",
    "BinaryCalibration": "bestk.kappo.binary",
    "binary_calibration": "bestk.kappo.binary",
    "dpo_beta_eff": "bestk.kappo.binary",
    "solve_p_star": "bestk.kappo.binary",
    "KINDS": "bestk.kappo.calibration",
    "KIND_SPECS": "bestk.kappo.calibration",
    "BINARY": "bestk.kappo.calibration",
    "WINRATE": "bestk.kappo.calibration",
    "CalibrationKind": "bestk.kappo.calibration",
    "BinaryKind": "bestk.kappo.calibration",
    "WinrateKind": "bestk.kappo.calibration",
    "calibration_kind": "bestk.kappo.calibration",
    "SCHEMA_VERSION": "bestk.kappo.calibration",
    "Calibration": "bestk.kappo.calibration",
    "bank_checksum": "bestk.kappo.calibration",
    "calibrate": "bestk.kappo.calibration",
    "load_calibration": "bestk.kappo.calibration",
    "kappo_apo_loss": "bestk.kappo.losses",
    "kappo_dpo_loss": "bestk.kappo.losses",
    "MaxAtKReconstruction": "bestk.kappo.reconstruction",
    "reconstruct_from_bank": "bestk.kappo.reconstruction",
    "reconstruct_max_at_k": "bestk.kappo.reconstruction",
    "BankError": "bestk.kappo.sensitivity",
    "binomial_weights": "bestk.kappo.sensitivity",
    "finite_bank_error": "bestk.kappo.sensitivity",
    "transform_rewards": "bestk.kappo.transform",
    "winrate_constant": "bestk.kappo.winrate",
    "winrate_G": "bestk.kappo.winrate",
    "winrate_log_constant": "bestk.kappo.winrate",
    "winrate_psi": "bestk.kappo.winrate",
    "winrate_T": "bestk.kappo.winrate",
    "winrate_table": "bestk.kappo.winrate",
}

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from bestk.kappo.bank import load_bank
    from bestk.kappo.binary import BinaryCalibration, binary_calibration, dpo_beta_eff, solve_p_star
    from bestk.kappo.calibration import (
        BINARY,
        KIND_SPECS,
        KINDS,
        SCHEMA_VERSION,
        WINRATE,
        BinaryKind,
        Calibration,
        CalibrationKind,
        WinrateKind,
        bank_checksum,
        calibrate,
        calibration_kind,
        load_calibration,
    )
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
    "BINARY",
    "BankError",
    "BinaryCalibration",
    "BinaryKind",
    "Calibration",
    "CalibrationKind",
    "KINDS",
    "KIND_SPECS",
    "MaxAtKReconstruction",
    "SCHEMA_VERSION",
    "bank_checksum",
    "binary_calibration",
    "binomial_weights",
    "WINRATE",
    "WinrateKind",
    "calibrate",
    "calibration_kind",
    "dpo_beta_eff",
    "finite_bank_error",
    "kappo_apo_loss",
    "kappo_dpo_loss",
    "load_calibration",
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


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, __all__)
