"""Classification testbeds: scikit-learn's digits, and the engine the sparse testbed shares.

A policy ``pi(c | x)`` (an MLP) over the classes of an image. The RL learners sample ``N``
labels per training example ("rollouts"), get a reward — binary ``1[c = label]`` or graded
``1 - |c - label| / 9`` — and follow ``(1/N) sum_i A_i grad log pi(c_i | x)`` with the
advantages of a bestk estimator. Exact maximum likelihood (``ml``) is the cross-entropy on the
true label.

Everything trains as one batch of independent MLPs ("slots": learner x learning rate x seed),
with :class:`bestk.lab.common.optim.SlotAdam` (Adam with a learning rate per slot), so a
learning-rate sweep is one batch too. For a given seed every slot starts from the same weights
and sees the same minibatches; the slots differ in how they turn *their own* sampled rewards
into a gradient (each slot draws its own rollouts). The A/A control ``grpo (A/A)`` is GRPO
again: same weights, same minibatches, independent sampling noise — every difference to
``grpo`` is noise.

Every seed first trains by exact maximum likelihood for ``sft_steps`` steps (the SFT stage,
shared by every learner of the seed), and RL starts from that policy: as with language models,
RL begins from a policy that is right some of the time.

Learning rates come from a sweep on a validation split (a share of the training images held
out; the test images are never used for it): every learner trains with each rate of
``lr_grid`` on ``sweep_seeds`` seeds of their own, the grid extended past an edge until the
chosen rate is interior (:mod:`bestk.lr_sweep`), and keeps the rate with the best
validation score (the mean over ``ks`` of pass@k for binary rewards, best@k for graded). The
A/A control uses GRPO's rate.

Evaluation is exact, not sampled: for a test example with policy ``pi`` the pass rate is
``p = pi(label | x)``, ``pass@k = 1 - (1 - p)^k`` and graded ``best@k`` follows from the closed
form of :func:`bestk.lab.common.exact.best_at_k_exact`, averaged over the test examples. These are
continuous in the weights, so two seeds never tie by construction (argmax accuracy is not
reported: on a few hundred test images it moves in steps of one image).

The gradient allocation by difficulty (SoftmaxGRPO Table 3) accumulates, over all training
steps, ``sum_i |A_i|`` of each example's group into the bin of that example's exact current
pass rate ``p`` (bins ``[0,.2), [.2,.5), [.5,.7), [.7,.9), [.9,1]``), and reports the shares.

KAPPO @k-GRPO (``bestk.advantages("kappo_grpo", ..., calibration=...)``) is calibrated from the
policy RL starts from (the SFT policy, KAPPO's reference): a bank of ``kappo_bank`` sampled
rewards per training image (per seed) before RL, ``bestk.kappo.calibrate(bank, k, beta,
kind)`` (binary, or win-rate for graded), so it trains on the same images as the other
learners; its KL strength beta is swept with the learning rate (``kappo_betas``).

Modules
-------
* :mod:`bestk.lab.digits.settings` -- reward variants, :data:`LEARNERS`, :class:`DigitsConfig`;
* :mod:`bestk.lab.digits.engine` -- the data, the batched MLP, :func:`run_slots` (slots
  trained as one batch, exact evaluation; the sparse testbed shares it);
* :mod:`bestk.lab.digits.sweep` -- :func:`sweep_and_test`: learning rates on the validation
  split, then the test run;
* :mod:`bestk.lab.digits.data` -- the per-seed data for the claims (:func:`testbed_data`);
* :mod:`bestk.lab.digits.report` -- the markdown report and the figure;
* :mod:`bestk.lab.digits.run` -- :func:`run_digits` (the work of ``bestk lab digits``), with
  the resumable settings loop the sparse testbed shares.

The package's public names are those of :data:`__all__`; a few more that tests and
``benchmarks/make_results.py`` use are re-exported as ``X as X``, the rest live in their module.
"""

from __future__ import annotations

from bestk.lab.digits.data import testbed_data
from bestk.lab.digits.engine import BatchedMLP as BatchedMLP
from bestk.lab.digits.engine import Problem, Slot, load_digits_split, make_problem, run_slots
from bestk.lab.digits.engine import RunSpec as RunSpec
from bestk.lab.digits.engine import evaluate_slots as evaluate_slots
from bestk.lab.digits.engine import reward_matrix as reward_matrix
from bestk.lab.digits.report import learner_colour, plot
from bestk.lab.digits.report import render_testbed as render_testbed
from bestk.lab.digits.run import run_digits
from bestk.lab.digits.settings import BIN_LABELS as BIN_LABELS
from bestk.lab.digits.settings import (
    LEARNERS,
    DigitsConfig,
    Learner,
    known_learners,
    learning_rates,
    positive_ks,
)
from bestk.lab.digits.settings import REWARD_KINDS as REWARD_KINDS
from bestk.lab.digits.sweep import sweep_and_test

__all__ = [
    "DigitsConfig",
    "LEARNERS",
    "Learner",
    "Problem",
    "Slot",
    "load_digits_split",
    "make_problem",
    "run_slots",
    "sweep_and_test",
    "run_digits",
    "testbed_data",
    "known_learners",
    "learning_rates",
    "positive_ks",
    "learner_colour",
    "plot",
]
