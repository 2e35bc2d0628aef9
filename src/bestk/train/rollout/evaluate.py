"""Held-out evaluation: ``n`` samples per prompt -> unbiased pass@k / best@k curves.

pass@k uses ``bestk.pass_at_k_curve`` on the per-prompt success counts (a completion succeeds
when its reward is ``>= task.success_threshold``); best@k uses ``bestk.best_at_k_curve`` on
the raw rewards (the unbiased order-statistic estimator, never a with-replacement bootstrap).
Both are averaged over prompts with bootstrap CIs over prompts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from bestk.metrics import best_at_k_curve, pass_at_k_curve
from bestk.tasks import Example, Task
from bestk.train.runtime.stop import Stopped

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from rich.progress import Progress

    from bestk.train.rollout.batch import Rollout
    from bestk.train.rollout.engine import RolloutEngine

__all__ = ["EvalResult", "evaluate", "pass_summary"]


def pass_summary(metrics: Mapping[str, object], n: int) -> str:
    """``pass@1=0.123 pass@8=0.456`` of an evaluation record with ``n`` samples per prompt
    (``pass@1=0.123`` alone when ``n`` is 1: the same number once)."""
    ks = (1, n) if n > 1 else (1,)
    return " ".join(f"pass@{k}={float(metrics[f'pass@{k}']):.3f}"  # type: ignore[arg-type]
                    for k in ks)


@dataclass
class EvalResult:
    """Result of :func:`evaluate`.

    ``metrics`` is the flat dict logged to ``metrics.jsonl`` (``pass@k``, ``best@k`` for graded
    tasks, their CI bounds as ``pass@k_lo``/``_hi``, ``reward_mean``, ``entropy``, ``distinct``
    (distinct stripped completions per prompt), ``distinct_correct`` (distinct stripped
    *successful* completions per prompt), ``response_len``); ``rewards`` is ``(P, n)``;
    ``texts`` the completions, prompt-major; ``columns`` each reward function's ``(P, n)``
    values when the task has several (``NaN`` where one returned ``None``; their means are
    also in ``metrics`` as ``rewards/<name>/mean``), else empty; ``lengths`` the ``(P, n)``
    completion lengths in tokens.
    """

    metrics: dict[str, float]
    rewards: np.ndarray
    texts: list[str]
    examples: list[Example]
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    lengths: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))


def evaluate(
    engine: RolloutEngine,
    task: Task,
    examples: Sequence[Example],
    *,
    n: int = 8,
    max_new_tokens: int = 16,
    batch_prompts: int = 64,
    seed: int = 0,
    should_stop: Callable[[], bool] | None = None,
    progress: Progress | None = None,
    description: str = "evaluation",
    entropy_samples: int | None = None,
) -> EvalResult:
    """Sample ``n`` completions for each example with ``engine`` (synced with the policy
    first; its sampling settings: temperature, top-p, top-k, prompt length limit),
    ``batch_prompts`` prompts at a time, the noise drawn from one generator seeded by
    ``seed``; score them; compute the curves (k = 1..n). ``should_stop`` (Ctrl-C, SIGTERM) is
    asked before each batch of prompts: when it says so,
    :class:`~bestk.train.runtime.stop.Stopped` is raised. ``progress``: a ``rich`` progress
    bar, to which the evaluation adds a task (``description: P prompts x n``, advanced after
    each batch of prompts, so that it shows the time left) and from which it removes it when
    done.

    ``entropy_samples = m < n``: the token entropy (``metrics["entropy"]``, the mean over
    completion tokens of the policy's next-token entropy) is measured on the first ``m``
    samples of each prompt only. An engine that samples with another model (``vllm``) gets it
    from a forward of the policy after sampling, which then runs on those rows only
    (:meth:`Rollout.policy_entropy_of`): most of such an evaluation's time. The samples are
    exchangeable, so it estimates the same quantity; every other metric uses all ``n``."""
    if not examples:
        raise ValueError("evaluate: no held-out prompts")
    m_ent = _entropy_rows(entropy_samples, n)
    defer = m_ent < n and getattr(engine, "defers_policy_pass", False)
    engine.sync()
    gen = torch.Generator(device=engine.device).manual_seed(int(seed))
    acc = _Samples(task, n, m_ent)
    bar = progress.add_task(f"{description}: {len(examples)} prompts x {n}",
                            total=len(examples), phase="evaluation") \
        if progress is not None else None
    try:
        for start in range(0, len(examples), batch_prompts):
            if should_stop is not None and should_stop():
                raise Stopped(f"an evaluation ({start} of {len(examples)} prompts)")
            chunk = list(examples[start : start + batch_prompts])
            acc.add(chunk, engine.sample([ex["prompt"] for ex in chunk], n=n,
                                         max_new_tokens=max_new_tokens, generator=gen,
                                         **({"defer_policy_pass": True} if defer else {})))
            if progress is not None:
                assert bar is not None  # added with the progress bar
                progress.update(bar, advance=len(chunk))
    finally:
        if progress is not None and bar is not None:
            progress.remove_task(bar)
    return acc.result(examples)


def _entropy_rows(entropy_samples: int | None, n: int) -> int:
    """The samples of each prompt whose token entropy is measured: ``entropy_samples``
    (at most ``n``), all ``n`` when it is ``None``; anything else is a ``ValueError``."""
    if entropy_samples is not None and (isinstance(entropy_samples, bool)
                                        or not isinstance(entropy_samples, int)
                                        or entropy_samples < 1):
        raise ValueError(f"evaluate: entropy_samples must be an integer >= 1 or None, got "
                         f"{entropy_samples!r}")
    return n if entropy_samples is None else min(int(entropy_samples), n)


class _Samples:
    """What :func:`evaluate` gathers batch by batch: rewards (and each reward function's
    column when the task has several), texts, completion lengths and the entropy of the
    first ``m_ent`` samples of each prompt, summed over their tokens."""

    def __init__(self, task: Task, n: int, m_ent: int) -> None:
        self.task, self.n, self.m_ent = task, n, m_ent
        self.several = len(task.reward_names) > 1
        self.rewards: list[np.ndarray] = []
        self.texts: list[str] = []
        self.entropy: list[float] = []
        self.lengths: list[np.ndarray] = []
        self.ent_tokens = 0.0
        self.parts: dict[str, list[np.ndarray]] = {}

    def add(self, chunk: list[Example], ro: Rollout) -> None:
        """Score the ``len(chunk) * n`` completions ``ro`` of the prompts ``chunk`` and keep
        what the metrics need."""
        n, m_ent = self.n, self.m_ent
        exs = [ex for ex in chunk for _ in range(n)]
        if self.several:
            scores = self.task.score_detailed(exs, ro.texts)
            self.rewards.append(scores.total)
            for name, col in scores.columns.items():
                self.parts.setdefault(name, []).append(col)
        else:
            self.rewards.append(self.task.score(exs, ro.texts))
        self.texts.extend(ro.texts)
        m = ro.completion_mask.float()
        if m_ent < n:
            rows = (torch.arange(len(chunk))[:, None] * n + torch.arange(m_ent)).reshape(-1)
            self.entropy.append(float(ro.policy_entropy_of(rows, m_ent).sum()))
            self.ent_tokens += float(m[rows.to(m.device)].sum())
        else:
            ro.resolve_policy()
            self.entropy.append(float((ro.entropy * m).sum()))
            self.ent_tokens += float(m.sum())
        self.lengths.append(m.sum(1).cpu().numpy())

    def result(self, examples: Sequence[Example]) -> EvalResult:
        """The :class:`EvalResult` of every batch added, prompts ``examples`` in order."""
        P, n = len(examples), self.n
        r = np.concatenate(self.rewards).reshape(P, n)
        lengths = np.concatenate(self.lengths)
        succ = self.task.success(r)
        metrics = _curves(r, succ, self.task.graded)
        metrics.update(
            reward_mean=float(r.mean()),
            entropy=sum(self.entropy) / max(self.ent_tokens, 1.0),
            **_distinct(self.texts, succ),
            response_len=float(lengths.sum()) / r.size,
            num_prompts=P,  # counts: integers in metrics.jsonl ("n": 8)
            n=int(n),
        )
        columns = {k: np.concatenate(v).reshape(P, n) for k, v in self.parts.items()}
        metrics.update({f"rewards/{k}/mean": float(np.nanmean(c)) for k, c in columns.items()
                        if not np.isnan(c).all()})
        return EvalResult(metrics, r, self.texts, list(examples), columns,
                          lengths.reshape(P, n))


def _curves(r: np.ndarray, succ: np.ndarray, graded: bool) -> dict[str, float]:
    """pass@k (from the ``(P, n)`` successes ``succ``) and, for a graded task, best@k (from
    the rewards ``r``) for k = 1..n, each with its CI bounds ``_lo`` / ``_hi``."""
    n = r.shape[1]
    pk = pass_at_k_curve(n, succ.sum(1))
    metrics: dict[str, float] = pk.as_dict("pass")
    metrics.update({f"pass@{int(k)}_lo": float(v) for k, v in zip(pk.ks, pk.lo, strict=True)})
    metrics.update({f"pass@{int(k)}_hi": float(v) for k, v in zip(pk.ks, pk.hi, strict=True)})
    if graded:
        bk = best_at_k_curve(r)
        metrics.update(bk.as_dict("best"))
        metrics.update({f"best@{int(k)}_lo": float(v) for k, v in zip(bk.ks, bk.lo, strict=True)})
        metrics.update({f"best@{int(k)}_hi": float(v) for k, v in zip(bk.ks, bk.hi, strict=True)})
    return metrics


def _distinct(texts: list[str], succ: np.ndarray) -> dict[str, float]:
    """``distinct``: distinct stripped completions per prompt; ``distinct_correct``: the same
    among the successful ones (``texts`` prompt-major, ``succ`` ``(P, n)``)."""
    arr = np.asarray(texts, dtype=object).reshape(succ.shape)
    distinct = np.mean([len({t.strip() for t in row}) for row in arr])
    distinct_correct = np.mean([len({t.strip() for t, ok in zip(row, oks, strict=True) if ok})
                                for row, oks in zip(arr, succ, strict=True)])
    return {"distinct": float(distinct), "distinct_correct": float(distinct_correct)}
