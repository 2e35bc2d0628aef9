"""One seed rule: every random stream of bestk is a named :class:`Stream`.

A stream turns a user's ``seed`` (and, for per-step streams, the step) into the integer seed
of one generator. Two derivations exist, both deterministic and both named here, so that no
module writes ``seed + 77_001`` or ``SeedSequence([seed, step, 7])`` of its own:

* ``derived`` streams (the rule for anything new):
  ``SeedSequence([seed, step, key]).generate_state(1)[0]``. Different keys give
  statistically independent streams, and a step's stream does not depend on earlier steps,
  so a resumed run repeats an uninterrupted one bit for bit.
* ``offset`` streams: ``seed + key``. The rule some streams had before this module; they keep
  it so that the committed results (docs/results) and the default ``bestk train`` numbers
  reproduce bit for bit. Their ``step`` must be 0.

Use::

    from bestk._seeds import PROMPTS
    rng = np.random.default_rng(PROMPTS.seed(cfg.seed, step))

Every stream is listed in :data:`STREAMS`; keys are unique within a derivation (a test
checks it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

__all__ = ["Stream", "STREAMS"]


@dataclass(frozen=True)
class Stream:
    """A named random stream: ``name`` (what it draws), ``key`` (its number) and ``rule``
    (``"derived"`` or ``"offset"``, see the module docstring)."""

    name: str
    key: int
    rule: Literal["derived", "offset"] = "derived"

    def seed(self, seed: int, step: int = 0) -> int:
        """The integer seed of this stream for ``seed`` (and ``step``, derived streams only)."""
        if self.rule == "offset":
            if step:
                raise ValueError(f"stream {self.name!r} is an offset stream; it has no step")
            return int(seed) + self.key
        return int(np.random.SeedSequence([int(seed), int(step), self.key]).generate_state(1)[0])


# --- bestk train (derived; per step where a step is given) -----------------------------------
#: RL step ``s``'s prompt draw (``seed``).
PROMPTS = Stream("train.prompts", 1)
#: RL step ``s``'s completion sampling (``sampling_seed``).
SAMPLING = Stream("train.sampling", 2)
#: the held-out evaluation at step ``s`` (``sampling_seed``).
EVAL_SAMPLING = Stream("train.eval_sampling", 3)
#: the SFT warm-up's batch order (``seed``).
SFT_ORDER = Stream("train.sft_order", 7)
#: the in-run KAPPO reference bank's sampling (``seed``).
BANK_SAMPLING = Stream("train.bank_sampling", 11)
#: the choice of the KAPPO bank prompts (``seed``).
BANK_PROMPTS = Stream("train.bank_prompts", 12)

STREAMS: tuple[Stream, ...] = (
    PROMPTS, SAMPLING, EVAL_SAMPLING, SFT_ORDER, BANK_SAMPLING, BANK_PROMPTS,
)

# --- bestk compare (offset: the committed comparisons reproduce bit for bit) ----------------
#: the ``j``-th test seed of a comparison: ``COMPARE_SEEDS.seed(seed + j)`` (``seed + j``).
COMPARE_SEEDS = Stream("compare.seeds", 0, rule="offset")
#: the ``j``-th seed of the learning-rate sweep, disjoint from the test seeds:
#: ``SWEEP_SEEDS.seed(seed + j)`` (``seed + 1000 + j``).
SWEEP_SEEDS = Stream("compare.sweep_seeds", 1000, rule="offset")
#: an A/A control's ``sampling_seed`` (``seed + 100_003``): same weights and prompts as its
#: method, independent sampling noise.
CONTROL_SAMPLING = Stream("compare.control_sampling", 100_003, rule="offset")
#: the sampling of the ``KappoAuto`` calibration bank of a seed's SFT policy (``seed``).
KAPPO_AUTO_BANK = Stream("compare.kappo_auto_bank", 77_001, rule="offset")

STREAMS = STREAMS + (COMPARE_SEEDS, SWEEP_SEEDS, CONTROL_SAMPLING, KAPPO_AUTO_BANK)
