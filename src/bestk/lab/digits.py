"""SoftmaxGRPO section 6.1 (ImageNet classification) reproduced small on scikit-learn's digits.

An MLP policy ``pi(c | x)`` over the 10 classes of an 8x8 digit image. The RL learners sample
``N`` labels per training image ("rollouts"), get a reward — binary ``1[c = label]`` or graded
``1 - |c - label| / 9`` — and follow ``(1/N) sum_i A_i grad log pi(c_i | x)`` with the
advantages of a bestk estimator (DESIGN.md section 2). Exact maximum likelihood (``ml``) is the
cross-entropy on the true label, the ceiling SoftmaxGRPO is claimed to track.

All learners, seeds included, train as one batch of independent MLPs (batched matmuls, one Adam
over the stacked parameters: Adam is elementwise, so this equals separate optimisers). For a
given seed every learner starts from the same weights and sees the same minibatches (paired
comparison); the learners differ only in how they turn the sampled rewards into a gradient.

Evaluation is exact, not sampled: for a test image with policy ``pi`` the pass rate is
``p = pi(label | x)``, ``pass@k = 1 - (1 - p)^k`` and graded ``best@k`` follows from the
closed form of :func:`bestk.lab.exact.best_at_k_exact`. ``test_accuracy`` is the accuracy of
the argmax prediction; ``pass@k["1"]`` is the sampling accuracy ``E[p]``.

The gradient allocation by difficulty (SoftmaxGRPO Table 3) accumulates, over all training
steps, ``sum_i |A_i|`` of each image's group into the bin of that image's exact current pass
rate ``p`` (bins ``[0,.2), [.2,.5), [.5,.7), [.7,.9), [.9,1]``), and reports the shares.

KAPPO @k-GRPO (``bestk.advantages("kappo_grpo", ..., calibration=...)``) is calibrated from the
initial policy: a bank of ``kappo_bank`` sampled rewards per training image (per seed) before
training, ``bestk.kappo.calibrate(bank, k, beta, kind)`` (binary, or win-rate for graded).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bestk.lab._io import fmt, markdown_table, mean_ci, write_json_atomic, write_text_atomic
from bestk.lab.exact import best_at_k_exact

__all__ = ["DigitsConfig", "LEARNERS", "Learner", "load_digits_split", "run_setting", "run_digits"]

N_CLASSES = 10
#: Pass-rate bins of SoftmaxGRPO Table 3.
BINS: tuple[float, ...] = (0.0, 0.2, 0.5, 0.7, 0.9, 1.0)
BIN_LABELS = ["[0,.2)", "[.2,.5)", "[.5,.7)", "[.7,.9)", "[.9,1]"]
REWARDS = ("binary", "graded")
#: k of the @k learners (PKPO, KAPPO @k-GRPO), as in the task and their labels.
AT_K = 4


@dataclass(frozen=True)
class Learner:
    """A training rule: exact ML (``estimator=None``) or a bestk estimator with options."""

    label: str
    estimator: str | None
    options: tuple[tuple[str, Any], ...] = ()
    min_n: int = 2
    binary_only: bool = False

    def applies(self, reward: str, n: int) -> bool:
        return n >= self.min_n and not (self.binary_only and reward != "binary")


#: Every learner the lab knows (``DigitsConfig.learners`` picks a subset by label).
LEARNERS: dict[str, Learner] = {
    x.label: x
    for x in [
        Learner("ml", None),
        Learner("reinforce", "reinforce"),
        Learner("rloo", "rloo"),
        Learner("grpo", "grpo"),
        Learner("softmax_grpo(tau=0.1)", "softmax_grpo", (("tau", 0.1),)),
        Learner("softmax_grpo(tau=0.3)", "softmax_grpo", (("tau", 0.3),)),
        Learner("maxrl", "maxrl", binary_only=True),
        Learner("argmaxrl", "argmaxrl"),
        Learner(f"pkpo(k={AT_K})", "pkpo", (("k", AT_K),), min_n=AT_K),
        Learner(f"kappo_grpo(k={AT_K})", "kappo_grpo"),
    ]
}


@dataclass
class DigitsConfig:
    """Knobs of ``bestk lab digits`` (all have defaults; the default run takes minutes).

    Attributes
    ----------
    ns: rollouts per training image (the paper's x axis).
    rewards: reward variants, ``"binary"`` and/or ``"graded"`` (``1 - |pred - label| / 9``).
    learners: labels from :data:`LEARNERS`.
    seeds: independent seeds (initial weights, minibatches, sampling).
    hidden: MLP hidden width (one hidden ReLU layer).
    steps: Adam steps per run (same for all learners: equal rollouts at a given N).
    batch_size: training images per step (sampled without replacement).
    lr: Adam learning rate.
    test_fraction: held-out share of the 1797 images (stratified split, fixed by ``seed``).
    ks: k values of the reported pass@k / best@k.
    eval_every: steps between two evaluation points of the training curves.
    kappo_beta, kappo_winrate_beta: @k-GRPO KL strengths (binary / win-rate calibration);
        the objective's k is :data:`AT_K` = 4, as in the learner labels.
    kappo_bank: reference rewards per training image drawn from the initial policy.
    seed: base seed; the whole run is deterministic given it.
    threads: torch CPU threads (0 keeps torch's default; 1 is fastest for these tiny MLPs).
    """

    ns: tuple[int, ...] = (2, 4, 8, 16)
    rewards: tuple[str, ...] = REWARDS
    learners: tuple[str, ...] = tuple(LEARNERS)
    seeds: int = 3
    hidden: int = 64
    steps: int = 300
    batch_size: int = 64
    lr: float = 3e-3
    test_fraction: float = 0.3
    ks: tuple[int, ...] = (1, 2, 4, 8, 16)
    eval_every: int = 25
    kappo_beta: float = 0.1
    kappo_winrate_beta: float = 0.1
    kappo_bank: int = 30
    seed: int = 0
    threads: int = 1

    def validate(self) -> None:
        unknown = [x for x in self.learners if x not in LEARNERS]
        if unknown:
            raise ValueError(f"unknown learner(s) {unknown}; valid: {', '.join(LEARNERS)}")
        bad = [r for r in self.rewards if r not in REWARDS]
        if bad:
            raise ValueError(f"unknown reward variant(s) {bad}; valid: {', '.join(REWARDS)}")
        if not self.ns or min(self.ns) < 2:
            raise ValueError(f"ns must be rollout counts >= 2, got {self.ns}")
        for name in ("seeds", "hidden", "steps", "batch_size", "eval_every", "kappo_bank"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not (0.05 <= self.test_fraction <= 0.9):
            raise ValueError(f"test_fraction must lie in [0.05, 0.9], got {self.test_fraction}")
        for name in ("lr", "kappo_beta", "kappo_winrate_beta"):
            v = float(getattr(self, name))
            if not (v > 0 and math.isfinite(v)):
                raise ValueError(f"{name} must be a positive number, got {v}")
        if not self.ks or min(self.ks) < 1:
            raise ValueError(f"ks must be positive integers, got {self.ks}")

    @classmethod
    def fast(cls) -> DigitsConfig:
        """Seconds-long settings for tests and smoke runs."""
        return cls(ns=(4,), seeds=2, steps=30, batch_size=32, eval_every=15, hidden=32,
                   ks=(1, 4), kappo_bank=8)

    def learner(self, label: str) -> Learner:
        return LEARNERS[label]

    def key(self) -> str:
        """Hash of everything that changes results (for resuming a partial run)."""
        d = asdict(self)
        d.pop("threads")
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# data and model


def load_digits_split(test_fraction: float, seed: int):
    """scikit-learn's digits (bundled with the package, nothing downloaded), scaled to [0, 1]
    and split stratified: returns ``(x_train, y_train, x_test, y_test)`` tensors."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x = data.data.astype(np.float32) / 16.0
    y = data.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=test_fraction, random_state=seed,
                                          stratify=y)
    return (torch.from_numpy(xtr), torch.from_numpy(ytr), torch.from_numpy(xte),
            torch.from_numpy(yte))


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
    c = torch.arange(N_CLASSES, dtype=torch.float64)
    if kind == "binary":
        return torch.eye(N_CLASSES, dtype=torch.float64)
    if kind == "graded":
        return 1.0 - (c[None, :] - c[:, None]).abs() / 9.0
    raise ValueError(f"unknown reward variant {kind!r}; valid: {', '.join(REWARDS)}")


# ---------------------------------------------------------------------------------------------
# one setting: a reward variant and a rollout count, all learners and seeds batched


def _kappo_calibration(cfg: DigitsConfig, reward: str, model: BatchedMLP, slots: list[int],
                       x_train: torch.Tensor, y_train: torch.Tensor, rmat: torch.Tensor,
                       gen: torch.Generator) -> Any:
    """Calibrate @k-GRPO from the initial policy of each seed: bank id = seed * n_train + i."""
    from bestk.kappo import calibrate

    n_train = x_train.shape[0]
    with torch.no_grad():
        logits = model(x_train.expand(model.w1.shape[0], *x_train.shape))[slots]
        probs = torch.softmax(logits.double(), -1).reshape(-1, N_CLASSES)
        draws = torch.multinomial(probs, cfg.kappo_bank, replacement=True, generator=gen)
        draws = draws.reshape(len(slots), n_train, cfg.kappo_bank)
        bank_r = rmat[y_train[None, :, None].expand_as(draws), draws]
    ids = np.arange(len(slots) * n_train)
    bank = dict(zip(ids.tolist(), bank_r.reshape(-1, cfg.kappo_bank).numpy(), strict=True))
    if reward == "binary":
        return calibrate(bank, AT_K, cfg.kappo_beta, kind="binary")
    return calibrate(bank, AT_K, cfg.kappo_winrate_beta, kind="winrate")


def _calibration_summary(cal: Any) -> dict[str, Any]:
    """What the KAPPO calibration from the initial policy looked like (for the report)."""
    summary: dict[str, Any] = {"kind": cal.kind, "k": cal.k, "beta": cal.beta,
                               "prompts": cal.num_prompts}
    if cal.kind == "binary":
        a_k = np.asarray(cal.values["a_k"], dtype=np.float64)
        n_succ = np.asarray(cal.values["n_success"])
        summary.update({
            "a_k_min": float(a_k.min()), "a_k_median": float(np.median(a_k)),
            "a_k_max": float(a_k.max()),
            "share_no_success": float(np.mean(n_succ == 0)),
        })
    return summary


def _evaluate(model: BatchedMLP, x: torch.Tensor, y: torch.Tensor, rmat: torch.Tensor,
              ks: Sequence[int]) -> dict[str, torch.Tensor]:
    """Exact test metrics of every model: ``(P,)`` accuracy, ``(P, len(ks))`` pass@k, best@k."""
    with torch.no_grad():
        logits = model(x.expand(model.w1.shape[0], *x.shape)).double()
        probs = torch.softmax(logits, -1)  # (P, T, 10)
        p = probs.gather(2, y[None, :, None].expand(probs.shape[0], -1, 1))[..., 0]
        acc = (logits.argmax(-1) == y[None]).double().mean(1)
        kt = torch.tensor(list(ks), dtype=torch.float64)
        pass_k = (1 - (1 - p[..., None]) ** kt).mean(1)
        best_k = best_at_k_exact(probs, rmat[y], ks).mean(1)
    return {"accuracy": acc, "pass": pass_k, "best": best_k}


def run_setting(cfg: DigitsConfig, reward: str, n: int, data=None, progress: Any = None,
                ) -> dict[str, Any]:
    """Train every applicable learner x seed for one (reward variant, N); returns per-learner
    lists over seeds of the final metrics, training curves and gradient allocation."""
    import bestk

    try:  # registers "kappo_grpo"
        import bestk.kappo  # noqa: F401
    except ImportError:  # pragma: no cover - a bestk without KAPPO: the learner is skipped
        pass
    if data is None:
        data = load_digits_split(cfg.test_fraction, cfg.seed)
    x_train, y_train, x_test, y_test = data
    n_train, d_in = x_train.shape
    rmat = reward_matrix(reward)
    learners = [cfg.learner(lb) for lb in cfg.learners]
    skipped: dict[str, str] = {}
    active = []
    for lrn in learners:
        if not lrn.applies(reward, n):
            skipped[lrn.label] = ("binary rewards only" if lrn.binary_only and reward != "binary"
                                 else f"needs N >= {lrn.min_n}")
        elif lrn.estimator is not None and lrn.estimator not in bestk.ESTIMATORS:
            skipped[lrn.label] = f"estimator {lrn.estimator!r} is not registered in this bestk"
        else:
            active.append(lrn)
    n_l, n_s = len(active), cfg.seeds
    tag = f"{reward}/N={n}"
    setting_seed = cfg.seed * 1_000_003 + (REWARDS.index(reward) + 1) * 10_007 + n
    inits = []
    for s in range(n_s):
        g = torch.Generator().manual_seed(cfg.seed * 7919 + s)  # same init for every N/reward
        inits.append(BatchedMLP.init(d_in, cfg.hidden, N_CLASSES, g))
    model = BatchedMLP([inits[s] for _ in range(n_l) for s in range(n_s)])  # slot = l*S + s
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(setting_seed)
    batch_gen = torch.Generator().manual_seed(cfg.seed * 31 + 1)  # same batches for every N

    calibration = None
    for li, lrn in enumerate(active):
        if lrn.estimator == "kappo_grpo":
            slots = [li * n_s + s for s in range(n_s)]
            calibration = _kappo_calibration(cfg, reward, model, slots, x_train, y_train, rmat,
                                             gen)
    b = min(cfg.batch_size, n_train)
    alloc = torch.zeros(n_l, n_s, len(BINS) - 1, dtype=torch.float64)
    edges = torch.tensor(BINS[1:-1], dtype=torch.float64)
    curve_steps: list[int] = []
    curves: list[dict[str, torch.Tensor]] = []

    def record(step: int) -> None:
        curve_steps.append(step)
        curves.append(_evaluate(model, x_test, y_test, rmat, cfg.ks))

    record(0)
    for step in range(1, cfg.steps + 1):
        idx = torch.rand(n_s, n_train, generator=batch_gen).argsort(1)[:, :b]  # (S, b)
        xb = x_train[idx].repeat(n_l, 1, 1)  # (P, b, d)
        yb = y_train[idx].repeat(n_l, 1)  # (P, b)
        logp = torch.log_softmax(model(xb), -1)  # (P, b, 10)
        with torch.no_grad():
            probs = logp.exp().double()
            draws = torch.multinomial(probs.reshape(-1, N_CLASSES), n, replacement=True,
                                      generator=gen).reshape(n_l * n_s, b, n)
            rewards = rmat[yb[..., None].expand_as(draws), draws]  # (P, b, n)
            p_true = probs.gather(2, yb[..., None])[..., 0]  # (P, b) exact pass rate
        losses = []
        for li, lrn in enumerate(active):
            sl = slice(li * n_s, (li + 1) * n_s)
            if lrn.estimator is None:
                losses.append(-logp[sl].gather(2, yb[sl, :, None]).mean() * n_s)
                continue
            r = rewards[sl]  # (S, b, n)
            opts = dict(lrn.options)
            if lrn.estimator == "kappo_grpo":
                gid = (torch.arange(n_s)[:, None] * n_train + idx)[..., None].expand_as(r)
                adv = bestk.advantages("kappo_grpo", r.reshape(-1), gid.reshape(-1),
                                       calibration=calibration).reshape(r.shape)
            else:
                adv = bestk.advantages(lrn.estimator, r.reshape(-1, n), **opts).reshape(r.shape)
            adv = adv.to(torch.float32)
            lp = logp[sl].gather(2, draws[sl])  # (S, b, n)
            losses.append(-(adv * lp).mean() * n_s)  # mean over images and rollouts = (1/N)sum
            with torch.no_grad():
                mass = adv.abs().double().sum(2)  # (S, b)
                bin_id = torch.bucketize(p_true[sl], edges, right=True)
                alloc[li].scatter_add_(1, bin_id, mass)
        opt.zero_grad(set_to_none=True)
        torch.stack(losses).sum().backward()
        opt.step()
        if step % cfg.eval_every == 0 or step == cfg.steps:
            record(step)
        if progress is not None:
            progress()

    final = curves[-1]
    out: dict[str, Any] = {"setting": tag, "reward": reward, "N": n, "steps": curve_steps,
                           "rollouts_per_image_per_step": n, "skipped": skipped, "learners": {}}
    if calibration is not None:
        out["kappo_calibration"] = _calibration_summary(calibration)
    for li, lrn in enumerate(active):
        sl = slice(li * n_s, (li + 1) * n_s)
        tot = alloc[li].sum(1, keepdim=True)
        share = torch.where(tot > 0, alloc[li] / tot.clamp_min(1e-300), torch.zeros_like(tot))
        out["learners"][lrn.label] = {
            "test_accuracy": final["accuracy"][sl].tolist(),
            "pass@k": {str(k): final["pass"][sl, j].tolist() for j, k in enumerate(cfg.ks)},
            "best@k": {str(k): final["best"][sl, j].tolist() for j, k in enumerate(cfg.ks)},
            "allocation": share.tolist() if lrn.estimator is not None else None,
            "curve_accuracy": [c["accuracy"][sl].tolist() for c in curves],
            "curve_pass@1": [c["pass"][sl, 0].tolist() for c in curves],
        }
    return out


# ---------------------------------------------------------------------------------------------
# aggregation, report, plot


def _stat(values: Sequence[float]) -> dict[str, Any]:
    m, h = mean_ci(values)
    return {"mean": m, "ci95": h, "seeds": list(values)}


def aggregate(cfg: DigitsConfig, settings: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``{learner: {"test_accuracy", "pass@k", "best@k", "settings": {...}}}``; the headline
    numbers are the binary-reward run at the largest N (graded if binary was not run)."""
    reward0 = "binary" if "binary" in cfg.rewards else cfg.rewards[0]
    head_n = max(cfg.ns)
    results: dict[str, Any] = {}
    for label in cfg.learners:
        entry: dict[str, Any] = {"settings": {}}
        for tag, st in settings.items():
            d = st["learners"].get(label)
            if d is None:
                continue
            alloc = None
            if d["allocation"] is not None:
                a = np.asarray(d["allocation"])
                alloc = {b: _stat(a[:, j].tolist()) for j, b in enumerate(BIN_LABELS)}
            entry["settings"][tag] = {
                **({"calibration": st["kappo_calibration"]}
                   if label.startswith("kappo") and "kappo_calibration" in st else {}),
                "test_accuracy": _stat(d["test_accuracy"]),
                "initial_pass@1": _stat(d["curve_pass@1"][0]),
                "pass@k": {k: _stat(v) for k, v in d["pass@k"].items()},
                "best@k": {k: _stat(v) for k, v in d["best@k"].items()},
                "allocation": alloc,
            }
        head = entry["settings"].get(f"{reward0}/N={head_n}")
        if head is None and entry["settings"]:
            head = entry["settings"][sorted(entry["settings"])[-1]]
        if head is None:
            continue
        entry["headline_setting"] = next(t for t, v in entry["settings"].items() if v is head)
        entry["test_accuracy"] = head["test_accuracy"]["mean"]
        entry["test_accuracy_ci95"] = head["test_accuracy"]["ci95"]
        entry["pass@k"] = {k: v["mean"] for k, v in head["pass@k"].items()}
        entry["best@k"] = {k: v["mean"] for k, v in head["best@k"].items()}
        results[label] = {k: entry[k] for k in ("test_accuracy", "test_accuracy_ci95", "pass@k",
                                                "best@k", "headline_setting", "settings")}
    return results


def render_markdown(cfg: DigitsConfig, results: dict[str, Any],
                    settings: dict[str, dict[str, Any]]) -> str:
    lines = ["# bestk lab digits\n",
             f"MLP (hidden {cfg.hidden}) on scikit-learn digits, {cfg.steps} Adam steps "
             f"(lr {cfg.lr}) of {cfg.batch_size} images x N rollouts; {cfg.seeds} seeds; "
             "exact evaluation on the held-out split; mean ± 95% t-interval over seeds.\n"]
    for reward in cfg.rewards:
        metric = "test accuracy (argmax)" if reward == "binary" else "test best@1 (graded)"
        lines.append(f"## {reward} rewards: {metric} vs rollouts per image N\n")
        rows = []
        for label, res in results.items():
            cells = [label]
            for n in cfg.ns:
                s = res["settings"].get(f"{reward}/N={n}")
                if s is None:
                    cells.append("n/a")
                    continue
                st = s["test_accuracy"] if reward == "binary" else s["best@k"]["1"]
                cells.append(f"{st['mean']:.3f} ± {fmt(st['ci95'])}")
            rows.append(cells)
        lines.append(markdown_table(["learner", *[f"N={n}" for n in cfg.ns]], rows))
        n_show = 8 if 8 in cfg.ns else max(cfg.ns)
        key = "pass@k" if reward == "binary" else "best@k"
        lines.append(f"\n{reward} rewards, N={n_show}: test {key} (exact)\n")
        rows = []
        for label, res in results.items():
            s = res["settings"].get(f"{reward}/N={n_show}")
            if s is None:
                continue
            rows.append([label, *[f"{s[key][str(k)]['mean']:.3f} ± {fmt(s[key][str(k)]['ci95'])}"
                                  for k in cfg.ks]])
        lines.append(markdown_table(["learner", *[f"{key[:-1]}{k}" for k in cfg.ks]], rows))
        lines.append(f"\nGradient allocation by exact pass rate (share of sum |A_i|, SoftmaxGRPO "
                     f"Table 3), {reward} rewards, N={n_show}, accumulated over training:\n")
        rows = []
        for label, res in results.items():
            s = res["settings"].get(f"{reward}/N={n_show}")
            if s is None or s["allocation"] is None:
                continue
            rows.append([label, *[f"{100 * s['allocation'][b]['mean']:.1f}%" for b in BIN_LABELS]])
        lines.append(markdown_table(["learner", *BIN_LABELS], rows))
        skipped = {lb: why for st in settings.values() if st["reward"] == reward
                   for lb, why in st["skipped"].items()}
        if skipped:
            lines.append("\nNot run: " + "; ".join(f"{k} ({v})" for k, v in skipped.items()) + "\n")
    return "\n".join(lines)


def plot(cfg: DigitsConfig, results: dict[str, Any], path: Path) -> None:
    """Accuracy (best@1) vs N per reward variant, and pass@k / best@k vs k at N=8."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n_show = 8 if 8 in cfg.ns else max(cfg.ns)
    cmap = plt.get_cmap("tab10")
    color = {lb: cmap(i % 10) for i, lb in enumerate(cfg.learners)}
    fig, axes = plt.subplots(2, len(cfg.rewards), figsize=(5.5 * len(cfg.rewards), 8),
                             squeeze=False)
    for j, reward in enumerate(cfg.rewards):
        key = "pass@k" if reward == "binary" else "best@k"
        ax, ax2 = axes[0][j], axes[1][j]
        for label, res in results.items():
            xs, ms, hs = [], [], []
            for n in cfg.ns:
                s = res["settings"].get(f"{reward}/N={n}")
                if s is None:
                    continue
                st = s["test_accuracy"] if reward == "binary" else s["best@k"]["1"]
                xs.append(n)
                ms.append(st["mean"])
                hs.append(0.0 if math.isnan(st["ci95"]) else st["ci95"])
            if xs:
                ax.errorbar(xs, ms, yerr=hs, marker="o", capsize=3, label=label,
                            color=color[label], alpha=0.85)
            s = res["settings"].get(f"{reward}/N={n_show}")
            if s is not None:
                ax2.plot(list(cfg.ks), [s[key][str(k)]["mean"] for k in cfg.ks], marker="o",
                         label=label, color=color[label])
        ax.set_xscale("log", base=2)
        ax.set_xlabel("rollouts per image N")
        ax.set_ylabel("test accuracy" if reward == "binary" else "test best@1")
        ax.set_title(f"digits, {reward} rewards")
        ax.grid(alpha=0.3)
        ax2.set_xscale("log", base=2)
        ax2.set_xlabel("k")
        ax2.set_ylabel(f"test {key}")
        ax2.set_title(f"{reward} rewards, N={n_show}")
        ax2.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)


def run_digits(cfg: DigitsConfig, out: str | Path, *, progress: bool = True,
               resume: bool = True) -> dict[str, Any]:
    """Run every (reward, N) setting and write ``results.json``, ``results.md``,
    ``digits.png`` and ``config.json`` under ``out``.

    Each finished setting is saved atomically to ``out/settings/``; with ``resume`` a rerun
    with the same configuration reuses them (a killed run continues where it stopped).
    """

    cfg.validate()
    out = Path(out)
    threads_before = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        return _run_digits(cfg, out, progress=progress, resume=resume)
    finally:
        torch.set_num_threads(threads_before)


def _run_digits(cfg: DigitsConfig, out: Path, *, progress: bool, resume: bool) -> dict[str, Any]:
    from rich.progress import Progress

    data = load_digits_split(cfg.test_fraction, cfg.seed)
    key = cfg.key()
    settings: dict[str, dict[str, Any]] = {}
    with Progress(disable=not progress, transient=True) as bar:
        for reward in cfg.rewards:
            for n in cfg.ns:
                part = out / "settings" / f"{reward}_N{n}.json"
                if resume and part.exists():
                    saved = json.loads(part.read_text())
                    if saved.get("config_key") == key:
                        settings[saved["setting"]] = saved
                        continue
                task = bar.add_task(f"digits {reward} N={n}", total=cfg.steps)
                t0 = time.perf_counter()
                st = run_setting(cfg, reward, n, data, progress=lambda t=task: bar.advance(t))
                st["wall_seconds"] = time.perf_counter() - t0
                st["config_key"] = key
                write_json_atomic(part, st)
                settings[st["setting"]] = st
    results = aggregate(cfg, settings)
    wall = sum(st.get("wall_seconds", 0.0) for st in settings.values())
    write_json_atomic(out / "config.json", {**asdict(cfg), "config_key": key,
                                            "training_wall_seconds": wall})
    write_json_atomic(out / "results.json", results)
    write_text_atomic(out / "results.md", render_markdown(cfg, results, settings))
    plot(cfg, results, out / "digits.png")
    return results
