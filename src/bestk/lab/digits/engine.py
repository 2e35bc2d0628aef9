"""The classification engine: the digits data, the batched MLP, and slots trained as one batch.

A slot is one MLP of the batch (learner x learning rate x seed, :class:`Slot`);
:func:`run_slots` trains every slot of a list together (:class:`bestk.lab.common.optim.SlotAdam`),
sampling each slot's own rollouts, and evaluates them exactly (:func:`evaluate_slots`). The
data are scikit-learn's digits (:func:`make_problem`: single images, or several side by side
for the sparse testbed). The sparse testbed shares all of it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
import torch

from bestk._optional import require
from bestk._seeds import (
    LAB_DIGITS_BATCHES,
    LAB_DIGITS_EVAL_COMPOSITES,
    LAB_DIGITS_EXPLORATORY_ROLLOUTS,
    LAB_DIGITS_INIT,
    LAB_DIGITS_ROLLOUTS,
    LAB_DIGITS_SFT,
    LAB_DIGITS_TEST_SPLIT,
    LAB_DIGITS_VALIDATION_SPLIT,
)
from bestk.estimators import ESTIMATORS, advantages, estimator_info
from bestk.kappo.calibration import Calibration, calibrate
from bestk.lab.common.exact import best_at_k_exact
from bestk.lab.common.io import (
    metric_key,
)
from bestk.lab.common.optim import SlotAdam
from bestk.lab.digits.settings import (
    AT_K,
    BIN_LABELS,
    BINS,
    N_CLASSES,
    REWARD_KINDS,
    REWARDS,
    Learner,
)

#: What :func:`run_slots` returns: ``slots`` (learner, lr, seed, beta of each), ``start`` /
#: ``end`` (metric key -> per-slot values), ``allocation`` (pass-rate bin -> per-slot gradient
#: shares), ``curve_steps`` / ``curve_pass@1`` and, for calibrated learners,
#: ``kappo_calibration``; JSON values, read by key.
SlotResults: TypeAlias = dict[str, Any]


def load_digits_split(test_fraction: float, seed: int):
    """scikit-learn's digits (bundled with the package, nothing downloaded), scaled to [0, 1]
    and split stratified: returns ``(x_train, y_train, x_test, y_test)`` tensors."""
    load_digits = require("sklearn.datasets", extra="lab").load_digits
    train_test_split = require("sklearn.model_selection", extra="lab").train_test_split

    data = load_digits()
    x = data.data.astype(np.float32) / 16.0
    y = data.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=test_fraction,
                                          random_state=LAB_DIGITS_TEST_SPLIT.seed(seed),
                                          stratify=y)
    return (torch.from_numpy(xtr), torch.from_numpy(ytr), torch.from_numpy(xte),
            torch.from_numpy(yte))


@dataclass
class Problem:
    """A classification problem: ``parts`` images side by side per example, the label the
    ``parts``-digit number they show (``10**parts`` classes).

    ``x_train`` / ``y_train`` are the single training images; ``x_eval`` / ``y_eval`` the
    evaluation examples, already composed (``(T, parts * 64)``, ``(T,)``; the validation or
    the test split, see :func:`make_problem`). ``data_id`` fingerprints the training
    images and evaluation examples (two runs with the same id saw the same data).
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_eval: torch.Tensor
    y_eval: torch.Tensor
    reward: str
    parts: int = 1
    data_id: str = ""

    @property
    def n_classes(self) -> int:
        return 10**self.parts

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])

    def reward_matrix(self) -> torch.Tensor:
        if self.parts != 1:
            raise ValueError("reward matrices exist for single digits only")
        return reward_matrix(self.reward)

    def batch(self, gen: torch.Generator, seeds: int, b: int
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(x (S, b, d), y (S, b), image ids (S, b))`` of one minibatch per seed: ``b``
        distinct training images (single digits), or ``b`` composites of uniformly drawn
        images (image ids ``-1``)."""
        n_tr = self.n_train
        if self.parts == 1:
            idx = torch.rand(seeds, n_tr, generator=gen).argsort(1)[:, :b]
            return self.x_train[idx], self.y_train[idx], idx
        idx = torch.randint(0, n_tr, (seeds, b, self.parts), generator=gen)
        return compose(self.x_train, self.y_train, idx) + (torch.full((seeds, b), -1),)


def compose(x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Images ``idx (..., parts)`` side by side -> ``(..., parts * d)`` and the label
    ``sum_j y[idx_j] 10^(parts - 1 - j)``."""
    parts = idx.shape[-1]
    xs = x[idx].reshape(*idx.shape[:-1], parts * x.shape[-1])
    place = 10 ** torch.arange(parts - 1, -1, -1)
    return xs, (y[idx] * place).sum(-1)


def make_problem(reward: str, *, split: str, test_fraction: float, val_fraction: float,
                 seed: int, parts: int = 1, num_eval: int = 2000) -> Problem:
    """The digits split for ``split="test"`` (train on the training images, evaluate on the
    test images) or ``"validation"`` (a ``val_fraction`` share of the training images is held
    out and evaluated on; the test images are not used). Composites (``parts > 1``) evaluate
    on ``num_eval`` fixed composites of evaluation images."""
    if split not in ("test", "validation"):
        raise ValueError(f"split must be 'test' or 'validation', got {split!r}")
    xtr, ytr, xte, yte = load_digits_split(test_fraction, seed)
    if split == "validation":
        train_test_split = require("sklearn.model_selection", extra="lab").train_test_split

        a, b, c, d = train_test_split(xtr.numpy(), ytr.numpy(), test_size=val_fraction,
                                      random_state=LAB_DIGITS_VALIDATION_SPLIT.seed(seed),
                                      stratify=ytr.numpy())
        xtr, xte, ytr, yte = (torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c),
                              torch.from_numpy(d))
    if parts > 1:
        g = torch.Generator().manual_seed(LAB_DIGITS_EVAL_COMPOSITES.seed(
            seed, parts=parts, validation=int(split == "validation")))
        eidx = torch.randint(0, xte.shape[0], (num_eval, parts), generator=g)
        xte, yte = compose(xte, yte, eidx)
    h = hashlib.sha256()
    for t in (xtr, ytr, xte, yte):
        h.update(np.ascontiguousarray(t.numpy()).tobytes())
    return Problem(xtr, ytr, xte, yte, reward, parts, "sha256:" + h.hexdigest()[:16])


class BatchedMLP(torch.nn.Module):
    """``P`` independent one-hidden-layer MLPs evaluated with batched matmuls."""

    def __init__(self, inits: Sequence[dict[str, torch.Tensor]]):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.stack([i["w1"] for i in inits]))
        self.b1 = torch.nn.Parameter(torch.stack([i["b1"] for i in inits]))
        self.w2 = torch.nn.Parameter(torch.stack([i["w2"] for i in inits]))
        self.b2 = torch.nn.Parameter(torch.stack([i["b2"] for i in inits]))

    @staticmethod
    def init(d_in: int, hidden: int, d_out: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
        """PyTorch-default-like uniform fan-in initialisation of one MLP."""
        a1, a2 = 1 / math.sqrt(d_in), 1 / math.sqrt(hidden)
        return {
            "w1": (torch.rand(d_in, hidden, generator=gen) * 2 - 1) * a1,
            "b1": (torch.rand(1, hidden, generator=gen) * 2 - 1) * a1,
            "w2": (torch.rand(hidden, d_out, generator=gen) * 2 - 1) * a2,
            "b2": (torch.rand(1, d_out, generator=gen) * 2 - 1) * a2,
        }

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``(P, B, d_in)`` -> logits ``(P, B, d_out)``."""
        h = torch.relu(torch.baddbmm(self.b1, x, self.w1))
        return torch.baddbmm(self.b2, h, self.w2)


def reward_matrix(kind: str) -> torch.Tensor:
    """``(10, 10)`` reward of predicting class ``c`` (column) for label ``y`` (row)."""
    if kind not in REWARDS:
        raise ValueError(f"unknown reward variant {kind!r}; valid: {', '.join(REWARDS)}")
    c = torch.arange(N_CLASSES, dtype=torch.float64)
    return {"binary": torch.eye(N_CLASSES, dtype=torch.float64),
            "graded": 1.0 - (c[None, :] - c[:, None]).abs() / 9.0}[kind]


# ---------------------------------------------------------------------------------------------
# the engine: a list of slots (learner, learning rate, seed) trained as one batch


@dataclass(frozen=True)
class Slot:
    """One model of the batch: a learner, its learning rate and its seed id."""

    learner: Learner
    lr: float
    seed: int
    #: @k-GRPO's KL strength (calibrated learners only; ``None`` for the others).
    beta: float | None = None


@dataclass
class RunSpec:
    """What every slot of a batch shares: group size, budget, model, metrics, base seed."""

    n: int
    steps: int
    batch_size: int
    hidden: int
    ks: tuple[int, ...]
    eval_every: int
    seed: int
    kappo_bank: int = 30
    sft_steps: int = 0
    sft_lr: float = 1e-2
    eval_chunk: int = field(default=16)
    exploratory: bool = False
    """The exploratory learners' own batch: rollouts from
    :data:`~bestk._seeds.LAB_DIGITS_EXPLORATORY_ROLLOUTS` (same weights and minibatches)."""


def _kappo_calibration(spec: RunSpec, problem: Problem, model: BatchedMLP, slots: list[int],
                       slot_seed_pos: list[int], gen: torch.Generator,
                       betas: Sequence[float]) -> dict[float, Calibration]:
    """Calibrate @k-GRPO from the policy RL starts from (the SFT policy when
    ``spec.sft_steps > 0``) of each seed, once per KL strength in ``betas``: bank id = seed
    position x n_train + image index (the group ids the training loop uses)."""
    n_train = problem.n_train
    rmat = problem.reward_matrix()
    banks: dict[int, np.ndarray] = {}
    with torch.no_grad():
        for slot, pos in zip(slots, slot_seed_pos, strict=True):
            logits = _slot_logits(model, slot, problem.x_train)
            probs = torch.softmax(logits.double(), -1)
            draws = torch.multinomial(probs, spec.kappo_bank, replacement=True, generator=gen)
            bank_r = rmat[problem.y_train[:, None].expand_as(draws), draws]
            for i, row in enumerate(bank_r.numpy()):
                banks[pos * n_train + i] = row
    kind = REWARD_KINDS[problem.reward]
    return {b: calibrate(banks, AT_K, b, kind=kind) for b in betas}


def _slot_logits(model: BatchedMLP, slot: int, x: torch.Tensor) -> torch.Tensor:
    """Logits of one slot's MLP on ``x (T, d)``."""
    h = torch.relu(torch.addmm(model.b1[slot], x, model.w1[slot]))
    return torch.addmm(model.b2[slot], h, model.w2[slot])


def _calibration_summary(cal: Calibration) -> dict[str, object]:
    """What the KAPPO calibration from the initial policy looked like (for the report)."""
    summary: dict[str, object] = {"kind": cal.kind, "k": cal.k, "beta": cal.beta,
                               "prompts": cal.num_prompts}
    if cal.kind_spec.binary:
        a_k = np.asarray(cal.values["a_k"], dtype=np.float64)
        n_succ = np.asarray(cal.values["n_success"])
        summary.update({
            "a_k_min": float(a_k.min()), "a_k_median": float(np.median(a_k)),
            "a_k_max": float(a_k.max()),
            "share_no_success": float(np.mean(n_succ == 0)),
        })
    return summary


def evaluate_slots(model: BatchedMLP, problem: Problem, ks: Sequence[int],
                   chunk: int = 16) -> dict[str, torch.Tensor]:
    """Exact evaluation metrics of every slot: ``{"pass": (P, len(ks)), "best": (P, len(ks)),
    "p": (P, T)}`` (``best`` equals ``pass`` on binary rewards)."""
    kt = torch.tensor(list(ks), dtype=torch.float64)
    n_slots = model.w1.shape[0]
    passes, bests, ps = [], [], []
    with torch.no_grad():
        for lo in range(0, n_slots, chunk):
            sl = slice(lo, min(lo + chunk, n_slots))
            w1, b1, w2, b2 = model.w1[sl], model.b1[sl], model.w2[sl], model.b2[sl]
            x = problem.x_eval.expand(w1.shape[0], *problem.x_eval.shape)
            logits = torch.baddbmm(b2, torch.relu(torch.baddbmm(b1, x, w1)), w2)
            logp = torch.log_softmax(logits.double(), -1)  # (c, T, C)
            y = problem.y_eval[None, :, None].expand(logp.shape[0], -1, 1)
            p = logp.gather(2, y)[..., 0].exp()  # (c, T)
            pk = (1 - (1 - p[..., None]) ** kt).mean(1)
            if REWARD_KINDS[problem.reward].binary:  # 0/1 rewards: best@k is pass@k
                bk = pk
            else:
                bk = best_at_k_exact(logp.exp(), problem.reward_matrix()[problem.y_eval],
                                     ks).mean(1)
            passes.append(pk)
            bests.append(bk)
            ps.append(p)
    return {"pass": torch.cat(passes), "best": torch.cat(bests), "p": torch.cat(ps)}


def run_slots(problem: Problem, slots: Sequence[Slot], spec: RunSpec,
              progress: Callable[[], None] | None = None) -> SlotResults:
    """Train every slot for ``spec.steps`` steps; return per-slot metrics at the start and the
    end (``{"start": {key: [P]}, "end": {key: [P]}}``, keys from :func:`metric_key`), the
    gradient allocation shares, training curves of pass@1 and the KAPPO calibration summary.

    Per step: one minibatch per seed, ``spec.n`` rollouts per image from each slot's policy
    (:func:`_sample_rollouts`), the summed loss of every learner group
    (:func:`_batch_loss`), one :class:`~bestk.lab.common.optim.SlotAdam` step; exact
    evaluation every ``spec.eval_every`` steps and at the end (:func:`evaluate_slots`)."""
    slots = list(slots)
    _check_estimators(slots)
    n, b = spec.n, min(spec.batch_size, problem.n_train)
    seeds = sorted({s.seed for s in slots})
    seed_pos = {sd: i for i, sd in enumerate(seeds)}
    pos = torch.tensor([seed_pos[s.seed] for s in slots])
    inits = _initial_weights(problem, seeds, spec)
    model = BatchedMLP([inits[s.seed] for s in slots])
    lr = torch.tensor([s.lr for s in slots], dtype=torch.float32)[:, None, None]
    opt = SlotAdam(list(model.parameters()), lr)
    gen = _rollout_generator(problem, spec)
    batch_gen = torch.Generator().manual_seed(
        LAB_DIGITS_BATCHES.seed(spec.seed, first_slot_seed=seeds[0]))
    groups = _learner_groups(slots)
    calibrations = _calibrations(spec, problem, model, slots, pos, gen)
    alloc = torch.zeros(len(slots), len(BINS) - 1, dtype=torch.float64)
    start = evaluate_slots(model, problem, spec.ks, spec.eval_chunk)
    curve_steps: list[int] = [0]
    curves: list[torch.Tensor] = [start["pass"][:, 0].clone()]
    # 0/1 rewards: the indicator of the true class; else the variant's reward matrix
    rmat = None if REWARD_KINDS[problem.reward].binary else problem.reward_matrix()
    for step in range(1, spec.steps + 1):
        ro = _sample_rollouts(problem, model, pos, len(seeds), n, b, batch_gen, gen, rmat)
        loss, masses = _batch_loss(problem, slots, groups, pos, ro, calibrations)
        for it, mass in masses:
            alloc[it] += mass
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % spec.eval_every == 0 or step == spec.steps:
            ev = evaluate_slots(model, problem, spec.ks, spec.eval_chunk)
            curve_steps.append(step)
            curves.append(ev["pass"][:, 0].clone())
        if progress is not None:
            progress()
    return _slot_results(slots, spec, start, ev, alloc, curve_steps, curves, calibrations)


def _check_estimators(slots: Sequence[Slot]) -> None:
    """Every slot's estimator is registered in bestk (else ``ValueError`` naming the learners)."""
    missing = [s.learner.label for s in slots
               if s.learner.estimator is not None and s.learner.estimator not in ESTIMATORS]
    if missing:
        raise ValueError(f"estimator(s) of {sorted(set(missing))} are not registered in bestk")


def _initial_weights(problem: Problem, seeds: Sequence[int], spec: RunSpec
                     ) -> dict[int, dict[str, torch.Tensor]]:
    """Each seed's initial MLP (its own :data:`~bestk._seeds.LAB_DIGITS_INIT` stream), trained
    by :func:`supervised_warm_start` first when ``spec.sft_steps > 0``: the slots of one seed
    start from the same weights (the pairing)."""
    d_in = problem.x_train.shape[1] * problem.parts
    inits = {}
    for sd in seeds:
        g = torch.Generator().manual_seed(LAB_DIGITS_INIT.seed(spec.seed, slot_seed=sd))
        inits[sd] = BatchedMLP.init(d_in, spec.hidden, problem.n_classes, g)
    if spec.sft_steps:
        inits = supervised_warm_start(problem, inits, spec)
    return inits


def _rollout_generator(problem: Problem, spec: RunSpec) -> torch.Generator:
    """The rollouts' stream, one per (base seed, reward variant, group size); the exploratory
    learners' batch draws from a stream of its own."""
    setting_seed = LAB_DIGITS_ROLLOUTS.seed(spec.seed, reward=REWARDS.index(problem.reward) + 1,
                                            n=spec.n)
    if spec.exploratory:
        setting_seed = LAB_DIGITS_EXPLORATORY_ROLLOUTS.seed(setting_seed)
    return torch.Generator().manual_seed(setting_seed)


def _learner_groups(slots: Sequence[Slot]) -> dict[tuple[str, float | None], list[int]]:
    """Slot indices grouped by (learner, KL strength): one advantage call per group and step."""
    groups: dict[tuple[str, float | None], list[int]] = {}
    for i, s in enumerate(slots):
        groups.setdefault((s.learner.label, s.beta), []).append(i)
    return groups


def _calibrations(spec: RunSpec, problem: Problem, model: BatchedMLP, slots: Sequence[Slot],
                  pos: torch.Tensor, gen: torch.Generator) -> dict[float, Calibration]:
    """KL strength -> @k-GRPO's calibration from the calibrated slots' starting policies
    (:func:`_kappo_calibration`, banks drawn from ``gen``); empty when no learner is
    calibrated. A calibrated slot without a ``beta`` is a ``ValueError``."""
    kappo = [i for i, s in enumerate(slots) if s.learner.calibrated]
    if not kappo:
        return {}
    no_beta = sorted({slots[i].learner.label for i in kappo if slots[i].beta is None})
    if no_beta:
        raise ValueError(f"calibrated learner(s) {no_beta} need a KL strength (Slot.beta)")
    return _kappo_calibration(spec, problem, model, kappo, [int(pos[i]) for i in kappo], gen,
                              sorted({_beta(slots[i]) for i in kappo}))


@dataclass
class _Rollouts:
    """One training step's minibatch and rollouts for every slot (``P`` slots, ``S`` seeds,
    ``b`` images, ``n`` rollouts per image, ``C`` classes)."""

    ids: torch.Tensor  # (S, b) image ids of each seed's minibatch (-1 for composites)
    yb: torch.Tensor  # (P, b) labels of each slot's minibatch
    logp: torch.Tensor  # (P, b, C) log pi(c | x), in the autograd graph
    draws: torch.Tensor  # (P, b, n) sampled classes
    rewards: torch.Tensor  # (P, b, n) their rewards (float64)
    p_true: torch.Tensor  # (P, b) exact pass rate pi(y | x) (float64)


def _sample_rollouts(problem: Problem, model: BatchedMLP, pos: torch.Tensor, n_seeds: int,
                     n: int, b: int, batch_gen: torch.Generator, gen: torch.Generator,
                     rmat: torch.Tensor | None) -> _Rollouts:
    """One minibatch of ``b`` images per seed (``batch_gen``; slot ``i`` sees seed position
    ``pos[i]``'s) and ``n`` classes per image drawn from each slot's policy (``gen``), rewarded
    ``1[c = y]`` (``rmat`` None: 0/1 rewards) or ``rmat[y, c]``."""
    xs, ys, ids = problem.batch(batch_gen, n_seeds, b)  # (S, b, d), (S, b), (S, b)
    xb, yb = xs[pos], ys[pos]  # (P, b, d), (P, b)
    logp = torch.log_softmax(model(xb), -1)  # (P, b, C)
    with torch.no_grad():
        probs = logp.exp().double()
        draws = torch.multinomial(probs.reshape(-1, problem.n_classes), n, replacement=True,
                                  generator=gen).reshape(len(pos), b, n)
        if rmat is None:
            rewards = (draws == yb[..., None]).double()  # (P, b, n)
        else:
            rewards = rmat[yb[..., None].expand_as(draws), draws]
        p_true = probs.gather(2, yb[..., None])[..., 0]  # (P, b) exact pass rate
    return _Rollouts(ids, yb, logp, draws, rewards, p_true)


def _batch_loss(problem: Problem, slots: Sequence[Slot],
                groups: dict[tuple[str, float | None], list[int]], pos: torch.Tensor,
                ro: _Rollouts, calibrations: dict[float, Calibration]
                ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The loss whose gradient is every slot's update, and the gradient mass per pass-rate bin.

    Per group of ``s`` slots: exact ML is ``-mean log pi(y | x)``, a policy-gradient learner
    ``-mean(A * log pi(c | x))`` over images and rollouts (:func:`_group_advantages`); each
    group's mean is multiplied by ``s`` so that every slot's own loss has weight 1. The masses
    are ``(slot indices, (s, bins) sum of |A| by the image's pass-rate bin)`` per
    policy-gradient group, to add to the allocation."""
    edges = torch.tensor(BINS[1:-1], dtype=torch.float64)
    loss = torch.zeros(())
    masses = []
    for idx in groups.values():
        lrn = slots[idx[0]].learner
        it = torch.tensor(idx)
        if lrn.estimator is None:
            loss = loss - ro.logp[it].gather(2, ro.yb[it, :, None]).mean() * len(idx)
            continue
        calibration = calibrations[_beta(slots[idx[0]])] if lrn.calibrated else None
        adv = _group_advantages(problem, lrn, ro.rewards[it], pos[it], ro.ids, calibration)
        lp = ro.logp[it].gather(2, ro.draws[it])  # (s, b, n)
        loss = loss - (adv * lp).mean() * len(idx)  # mean over examples and rollouts
        with torch.no_grad():
            mass = adv.abs().double().sum(2)  # (s, b)
            bin_id = torch.bucketize(ro.p_true[it], edges, right=True)
            masses.append((it, torch.zeros(len(idx), len(BINS) - 1, dtype=torch.float64
                                           ).scatter_add_(1, bin_id, mass)))
    return loss, masses


def _group_advantages(problem: Problem, lrn: Learner, r: torch.Tensor, seed_pos: torch.Tensor,
                      ids: torch.Tensor, calibration: Calibration | None) -> torch.Tensor:
    """``lrn``'s advantages (float32, ``(s, b, n)``) of the rewards ``r (s, b, n)``: per image's
    group of ``n`` rollouts, or, for estimators that need prompt ids, with every rollout
    labelled by its image's bank id (seed position x n_train + image index, the ids
    :func:`_kappo_calibration` used)."""
    opts = dict(lrn.options)
    if calibration is not None:
        opts["calibration"] = calibration
    assert lrn.estimator is not None
    if estimator_info(lrn.estimator).needs_prompt_ids:
        gid = (seed_pos[:, None] * problem.n_train + ids[seed_pos])[..., None]
        adv = advantages(lrn.estimator, r.reshape(-1), gid.expand_as(r).reshape(-1),
                         **opts).reshape(r.shape)
    else:
        adv = advantages(lrn.estimator, r.reshape(-1, r.shape[-1]), **opts).reshape(r.shape)
    return adv.to(torch.float32)


def _slot_results(slots: Sequence[Slot], spec: RunSpec, start: dict[str, torch.Tensor],
                  end: dict[str, torch.Tensor], alloc: torch.Tensor, curve_steps: list[int],
                  curves: list[torch.Tensor], calibrations: dict[float, Calibration]
                  ) -> SlotResults:
    """The :data:`SlotResults` of a finished batch; allocation shares are each slot's gradient
    mass per pass-rate bin over its total (0 where it had none)."""
    tot = alloc.sum(1, keepdim=True)
    share = torch.where(tot > 0, alloc / tot.clamp_min(1e-300), torch.zeros_like(alloc))
    out: SlotResults = {
        "slots": [{"learner": s.learner.label, "lr": s.lr, "seed": s.seed, "beta": s.beta}
                  for s in slots],
        "start": _metrics(start, spec.ks),
        "end": _metrics(end, spec.ks),
        "allocation": {lb: share[:, j].tolist() for j, lb in enumerate(BIN_LABELS)},
        "curve_steps": curve_steps,
        "curve_pass@1": torch.stack(curves, 1).tolist(),  # (P, points)
    }
    if calibrations:
        out["kappo_calibration"] = {f"{b:g}": _calibration_summary(c)
                                    for b, c in calibrations.items()}
    return out


def _beta(slot: Slot) -> float:
    """A calibrated slot's KL strength (:class:`Slot`)."""
    if slot.beta is None:
        raise ValueError(f"calibrated learner {slot.learner.label!r} needs a KL strength")
    return float(slot.beta)


def supervised_warm_start(problem: Problem, inits: dict[int, dict[str, torch.Tensor]],
                          spec: RunSpec) -> dict[int, dict[str, torch.Tensor]]:
    """The SFT stage: every seed's initial MLP trained by exact maximum likelihood
    (cross-entropy on the true label, Adam at ``spec.sft_lr``) for ``spec.sft_steps`` steps of
    ``spec.batch_size`` training images (minibatches from their own stream), so RL starts, as
    with language models, from a policy that is right some of the time, and @k-GRPO is
    calibrated from that policy (KAPPO's reference). Returns the trained weights per seed."""
    seeds = sorted(inits)
    model = BatchedMLP([inits[sd] for sd in seeds])
    opt = SlotAdam(list(model.parameters()), torch.full((len(seeds), 1, 1), spec.sft_lr))
    gen = torch.Generator().manual_seed(LAB_DIGITS_SFT.seed(spec.seed, first_slot_seed=seeds[0]))
    b = min(spec.batch_size, problem.n_train)
    for _ in range(spec.sft_steps):
        xs, ys, _ids = problem.batch(gen, len(seeds), b)
        logp = torch.log_softmax(model(xs), -1)
        loss = -logp.gather(2, ys[..., None]).mean() * len(seeds)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return {sd: {name: getattr(model, name)[j].detach().clone()
                     for name in ("w1", "b1", "w2", "b2")} for j, sd in enumerate(seeds)}


def _metrics(ev: dict[str, torch.Tensor], ks: Sequence[int]) -> dict[str, list]:
    """``pass@k`` and ``best@k`` per slot (on binary rewards best@k is pass@k)."""
    out = {metric_key("pass", k): ev["pass"][:, j].tolist() for j, k in enumerate(ks)}
    out.update({metric_key("best", k): ev["best"][:, j].tolist() for j, k in enumerate(ks)})
    return out
