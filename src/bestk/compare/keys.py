"""What identifies a run, an SFT warm-up and a shared reference bank of a grid, so that a rerun
reuses exactly what is still valid: fingerprints of the non-default config and the digest of the
SFT weights.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bestk.train.config import ResolvedTrainConfig, TrainConfig
from bestk.train.config.io import config_to_dict
from bestk.train.rollout.shared_start import state_digest
from bestk.train.runtime.files import load_weights
from bestk.train.validation import (
    resolve_defaults,
)


def fingerprint(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def weights_digest(path: str | Path) -> str:
    """SHA-256 (16 hex digits) of the tensors of a saved state dict: names, dtypes, shapes and
    bytes in name order, so equal weights give equal digests whatever the file's container.

    A grid keys every run and shared bank made from a seed's SFT weights by this digest, not
    only by the SFT configuration: recomputing the weights on another machine (a resumed or
    restored grid) can change them in the last float bits, and runs made from different
    weights would no longer be paired."""
    return state_digest(load_weights(path))  # damaged: a one-line ValueError naming it


def non_default(value: object, default: object) -> object:
    """The parts of a nested config dict that differ from the defaults (``None`` if none).

    Run keys are fingerprints of these, so a config key that a later bestk version adds with
    a default leaves the keys of finished runs unchanged (they stay resumable)."""
    if isinstance(value, dict) and isinstance(default, dict):
        out = {}
        for k, v in value.items():
            d = non_default(v, default[k]) if k in default else v
            if k not in default or d is not None:
                out[k] = d
        return out or None
    return None if value == default else value


@functools.cache
def _defaults() -> dict[str, Any]:
    """The resolved default config as a dict (resolved once per process)."""
    return config_to_dict(resolve_defaults(TrainConfig()))


def config_key(cfg: ResolvedTrainConfig, sections: Sequence[str] | None = None) -> object:
    """What sets ``cfg`` apart from the resolved defaults (:func:`non_default`), over
    ``sections`` only when given."""
    d, base = config_to_dict(cfg), _defaults()
    if sections is not None:
        d, base = {k: d[k] for k in sections}, {k: base[k] for k in sections}
    return non_default(d, base)


def sft_key(cfg: ResolvedTrainConfig) -> str:
    """The key of a seed's SFT warm-up: the non-default model, task, SFT and seed."""
    return fingerprint(config_key(cfg, ("model", "task", "sft", "seed")))


def bank_key(cfg: ResolvedTrainConfig) -> str:
    """What a run's in-run reference bank depends on besides the weights' own SFT key: runs of
    one seed with equal keys sample the same bank."""
    k, r = cfg.kappo, cfg.rollout
    key = {"sft": sft_key(cfg), "seed": cfg.seed, "M": k.bank_size, "prompts": k.bank_prompts,
           "temperature": r.temperature, "top_p": r.top_p, "max_new_tokens": r.max_new_tokens}
    if k.calibration is not None:  # @k-DPO with a calibration file: a bank on its prompts
        key["calibration"] = k.calibration
    return fingerprint(key)
