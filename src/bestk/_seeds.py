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
* ``affine`` streams: ``seed * scale + key + sum(weight * component)`` over the stream's named
  ``terms`` (``(component, weight)`` pairs), the components given by keyword:
  ``LAB_DIGITS_INIT.seed(seed, slot_seed=3)``. The lab testbeds' legacy mixes of the seed with
  a bandit index, a slot seed, a rollout count...; kept for the same reason as the offset
  rule (the committed per-seed data reproduce bit for bit). Not for new streams: two affine
  streams can collide for some components, derived streams do not.

Use::

    from bestk._seeds import PROMPTS
    rng = np.random.default_rng(PROMPTS.seed(cfg.seed, step))

Every stream is listed in :data:`STREAMS`; keys are unique within a derivation and a scope
(the stream's name up to its last dot: ``train``, ``lab.digits``, ...), and no module outside
this one derives a seed of its own (tests/test_seeds.py checks both).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

__all__ = ["Stream", "STREAMS"]


@dataclass(frozen=True)
class Stream:
    """A named random stream: ``name`` (what it draws), ``key`` (its number) and ``rule``
    (``"derived"``, ``"offset"`` or ``"affine"``, see the module docstring); an affine stream
    also has its ``scale`` (the seed's multiplier) and ``terms`` (``(component, weight)``)."""

    name: str
    key: int
    rule: Literal["derived", "offset", "affine"] = "derived"
    scale: int = 1
    terms: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if self.rule != "affine" and (self.scale != 1 or self.terms):
            raise ValueError(f"stream {self.name!r}: scale and terms are for affine streams")

    def seed(self, seed: int, step: int = 0, **components: int) -> int:
        """The integer seed of this stream for ``seed`` (and ``step``, derived streams only;
        the ``components`` named by ``terms``, affine streams only)."""
        if self.rule == "affine":
            if step:
                raise ValueError(f"stream {self.name!r} is an affine stream; it has no step")
            names = [c for c, _ in self.terms]
            if sorted(components) != sorted(names):
                raise ValueError(f"stream {self.name!r} takes components {names}, "
                                 f"got {sorted(components)}")
            return (int(seed) * self.scale + self.key
                    + sum(w * int(components[c]) for c, w in self.terms))
        if components:
            raise ValueError(f"stream {self.name!r} is a {self.rule} stream; it has no "
                             f"components, got {sorted(components)}")
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

# --- tasks (offset) ---------------------------------------------------------------------------
#: the held-out prompts of the ``reasoning_gym`` task (its training prompts use ``seed``).
TASK_EVAL_PROMPTS = Stream("tasks.eval_prompts", 1_000_003, rule="offset")

# --- lab (offset and affine: the committed per-seed data reproduce) ---------------------------
#: bandit ``i``'s learning curves (``BanditConfig.seed``).
LAB_BANDIT_CURVES = Stream("lab.bandit.curves", 0, rule="affine", terms=(("bandit", 1000),))
#: bandit ``i``'s learning-rate sweep (``BanditConfig.seed``).
LAB_BANDIT_SWEEP = Stream("lab.bandit.sweep", 500_000, rule="affine", terms=(("bandit", 1000),))
#: bandit ``i``'s learning curves of the exploratory arms (``BanditConfig.seed``, ``step`` =
#: the bandit's index ``i``): a batch of their own, so they leave the other curves as they were.
LAB_BANDIT_EXPLORATORY_CURVES = Stream("lab.bandit.exploratory_curves", 21)
#: bandit ``i``'s learning-rate sweep of the exploratory arms (``step`` = ``i``).
LAB_BANDIT_EXPLORATORY_SWEEP = Stream("lab.bandit.exploratory_sweep", 22)
#: the digits train/test split (scikit-learn's ``random_state``).
LAB_DIGITS_TEST_SPLIT = Stream("lab.digits.test_split", 0, rule="offset")
#: the validation split held out of the digits training images.
LAB_DIGITS_VALIDATION_SPLIT = Stream("lab.digits.validation_split", 1, rule="offset")
#: the fixed evaluation composites of ``parts`` images (``validation`` = 1 on that split).
LAB_DIGITS_EVAL_COMPOSITES = Stream("lab.digits.eval_composites", 0, rule="affine", scale=7,
                                    terms=(("parts", 1), ("validation", 1)))
#: a slot's initial MLP weights (``slot_seed``: the slot's paired seed).
LAB_DIGITS_INIT = Stream("lab.digits.init", 0, rule="affine", scale=7919,
                         terms=(("slot_seed", 1),))
#: the rollouts (and the KAPPO bank) of one setting: reward ``REWARDS.index(r) + 1``, N.
LAB_DIGITS_ROLLOUTS = Stream("lab.digits.rollouts", 0, rule="affine", scale=1_000_003,
                             terms=(("reward", 10_007), ("n", 1)))
#: the rollouts of the exploratory learners' own batch of slots (derived from the setting's
#: :data:`LAB_DIGITS_ROLLOUTS` seed): independent of the other learners' draws.
LAB_DIGITS_EXPLORATORY_ROLLOUTS = Stream("lab.digits.exploratory_rollouts", 23)
#: the training batches of one run of slots (``first_slot_seed``: its smallest slot seed).
LAB_DIGITS_BATCHES = Stream("lab.digits.batches", 1, rule="affine", scale=31,
                            terms=(("first_slot_seed", 97),))
#: the minibatches of the digits SFT stage (``first_slot_seed``: the run's smallest slot seed).
LAB_DIGITS_SFT = Stream("lab.digits.sft", 2, rule="affine", scale=31,
                        terms=(("first_slot_seed", 97),))
#: the reference banks of the binary KAPPO problems.
LAB_KAPPO_BINARY = Stream("lab.kappo.binary", 0, rule="offset")
#: the rewards of the win-rate KAPPO bandit.
LAB_KAPPO_WINRATE = Stream("lab.kappo.winrate", 1, rule="offset")

# --- bestk eval (offset) -------------------------------------------------------------------------
#: the reference bank ``bestk eval --bank`` samples on training prompts (``--seed``).
EVAL_BANK_SAMPLING = Stream("eval.bank_sampling", 1, rule="offset")

STREAMS: tuple[Stream, ...] = (
    PROMPTS, SAMPLING, EVAL_SAMPLING, SFT_ORDER, BANK_SAMPLING, BANK_PROMPTS,
    TASK_EVAL_PROMPTS,
    LAB_BANDIT_CURVES, LAB_BANDIT_SWEEP, LAB_BANDIT_EXPLORATORY_CURVES,
    LAB_BANDIT_EXPLORATORY_SWEEP, LAB_DIGITS_TEST_SPLIT, LAB_DIGITS_VALIDATION_SPLIT,
    LAB_DIGITS_EVAL_COMPOSITES, LAB_DIGITS_INIT, LAB_DIGITS_ROLLOUTS,
    LAB_DIGITS_EXPLORATORY_ROLLOUTS, LAB_DIGITS_BATCHES, LAB_DIGITS_SFT,
    LAB_KAPPO_BINARY, LAB_KAPPO_WINRATE,
    EVAL_BANK_SAMPLING,
)

# --- bestk compare (offset, affine: the committed comparisons reproduce bit for bit) ---------
#: the ``j``-th test seed of a comparison: ``COMPARE_SEEDS.seed(seed, index=j)`` (``seed + j``).
COMPARE_SEEDS = Stream("compare.seeds", 0, rule="affine", terms=(("index", 1),))
#: the ``j``-th seed of the learning-rate sweep, disjoint from the test seeds:
#: ``SWEEP_SEEDS.seed(seed, index=j)`` (``seed + 1000 + j``).
SWEEP_SEEDS = Stream("compare.sweep_seeds", 1000, rule="affine", terms=(("index", 1),))
#: The most seeds of a comparison's test runs (``--seeds``) and of its sweep (``--sweep-seeds``):
#: more test seeds would reach the sweep's first seed (``seed + 1000``).
MAX_GRID_SEEDS = SWEEP_SEEDS.key
#: an A/A control's ``sampling_seed`` (``seed + 100_003``): same weights and prompts as its
#: method, independent sampling noise.
CONTROL_SAMPLING = Stream("compare.control_sampling", 100_003, rule="offset")
#: the sampling of the ``KappoAuto`` calibration bank of a seed's SFT policy (``seed``).
KAPPO_AUTO_BANK = Stream("compare.kappo_auto_bank", 77_001, rule="offset")

STREAMS = STREAMS + (COMPARE_SEEDS, SWEEP_SEEDS, CONTROL_SAMPLING, KAPPO_AUTO_BANK)
