"""Matched comparison of methods: ``bestk compare --estimators a,b,c --seeds S``.

For each seed, every method starts RL from the *same* SFT warm-up weights (computed once per
seed and saved), sees the same training prompts in the same order, draws its sampling noise
from the same per-step generators, and uses the same optimiser, rollout budget and evaluation
prompts; only the advantage computation differs — plus what a method declares for itself:

* a :class:`Method` has a label, an estimator, its options and config overrides of its own
  (``advantage_reward=success`` for GRPO on 0/1 success, ``optim.lr=1e-4``, ...);
* an A/A control (``--control grpo``) is the same method again with its ``sampling_seed``
  from the ``CONTROL_SAMPLING`` stream (:mod:`bestk._seeds`): same weights and prompts,
  independent sampling noise;
* ``lr_sweep`` picks each method's learning rate on a *validation split* (the last
  ``val_prompts`` training prompts, held out from training by the ``validation`` task wrapper;
  the test prompts are never used) by the mean over k = 1, 2, 4, ... of validation pass@k,
  on ``sweep_seeds`` seeds of their own, the grid extended past an edge (at most
  ``max_extensions`` rates) until the chosen rate is interior (:mod:`bestk.lr_sweep`); A/A
  controls take their method's rate;
* ``kappo`` calibrates ``kappo_grpo`` methods whose ``calibration`` option is ``"auto"`` from a
  bank of the seed's SFT policy on *every* training prompt, so KAPPO trains on the same prompt
  set as the others;
* runs that calibrate in-run from their ``kappo`` section (``algorithm=apo`` / ``dpo``, or
  ``kappo_grpo`` without a calibration) share one reference bank per seed (``share_bank``):
  the bank each of them would sample -- same SFT weights, prompts, M and sampling seed, so the
  same bank -- is sampled once, by the trainer's own code, into ``OUT/_bank/`` (with the
  completions when an @k-DPO run needs them) and given to every run as ``kappo.bank``; each
  run calibrates it with its own k, beta and kind. Results are those of unshared runs.

Runs execute in ``workers`` processes (each single-threaded; 1 = in this process), SFT first,
then the runs seed by seed. Every finished run writes ``OUT/<label>/seed<S>/result.json``
atomically; a rerun with the same configuration skips finished runs and continues an
interrupted one from its last checkpoint (``resume=True``), so a killed grid resumes where it
stopped. Runs and shared banks made from a seed's SFT weights are keyed by their digest too
(:func:`weights_digest`, recorded as ``run.reference_weights``), and recomputed weights drop
the seed's KAPPO calibration: where the weights come out different in the last bits (another
machine's kernels), what was made from the old ones is redone, so the runs of a seed stay
paired.
Finally ``OUT/results.json`` (``{label: {"seedS": {"start", "end", "run"}}}``),
``OUT/compare.md`` and ``OUT/compare.png``.
"""


from __future__ import annotations

from typing import TYPE_CHECKING

from bestk._lazy import lazy_attributes

_LAZY: dict[str, str] = {
    "run_compare": "bestk.compare.grid",
    "validation_runs": "bestk.compare.grid",
    "sweep_score": "bestk.compare.grid",
    "Method": "bestk.compare.methods",
    "KappoAuto": "bestk.compare.methods",
    "method_slug": "bestk.compare.methods",
    "weights_digest": "bestk.compare.keys",
    "summarize": "bestk.compare.summary",
    "write_summary": "bestk.compare.summary",
}

__all__ = ["run_compare", "validation_runs", "sweep_score", "Method", "KappoAuto", "method_slug",
           "weights_digest", "summarize", "write_summary"]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from bestk.compare.grid import run_compare, sweep_score, validation_runs
    from bestk.compare.keys import weights_digest
    from bestk.compare.methods import KappoAuto, Method, method_slug
    from bestk.compare.summary import summarize, write_summary

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, __all__)
