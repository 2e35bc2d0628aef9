r"""Unbiased validation metrics for verl: exact best@k, worst@k and maj@k in verl's own names.

verl's ``process_validation_metrics`` (``verl/trainer/ppo/metric_utils.py``) reports, per data
source and per reward variable (``reward``, ``acc``, every numeric ``reward_extra_info`` key),
``mean@n``, ``std@n`` and, for ``k`` in ``2, 4, 8, ... < n`` and ``n``, ``best@k/{mean,std}``,
``worst@k/{mean,std}`` and (when the reward function returns a ``pred``) ``maj@k/{mean,std}``.
It estimates the @k ones with a bootstrap that draws ``k`` of the prompt's ``n`` samples *with
replacement*, 1000 times. A draw with replacement repeats samples, so its best-of-k reads low
and its worst-of-k high: with 1 correct answer among ``n = 4`` samples, verl's ``best@4/mean``
is about ``1 - (3/4)^4 = 0.684``, where the unbiased estimate is 1 (the 4 samples did contain
a correct one). Averaged over the samples of a prompt, verl's value stays below the true
pass@k (docs/integrations.md has the figures).

:func:`unbiased_validation_metrics` takes exactly what verl's function takes and returns the
same nested dict ``{data_source: {variable: {metric: value}}}`` with the same metric names,
computed exactly (no resampling, no seed):

* ``mean@n``, ``std@n``: as verl (the prompt's mean and population standard deviation of its
  ``n`` values), averaged over prompts.
* ``best@k/mean``: the unbiased best@k (max@k) U-statistic
  ``sum_{i>=k} r_(i) C(i-1, k-1) / C(n, k)`` (:func:`bestk.metrics.best_at_k`; Chen et al.,
  *Evaluating Large Language Models Trained on Code*, 2021, arXiv:2107.03374, for 0/1 rewards),
  the mean of ``max`` over the ``C(n, k)`` subsets of ``k`` distinct samples; unbiased for
  ``E[max of k iid rewards]``. ``worst@k/mean`` is ``-best@k`` of the negated rewards.
* ``maj@k/mean``: the mean over the ``C(n, k)`` subsets of the majority-vote score
  (:func:`maj_at_k`), unbiased for the majority-vote score of ``k`` iid samples.
* ``<metric>/std``: the standard deviation of the best (worst, majority) score over those
  subsets: the without-replacement, exact counterpart of verl's bootstrap standard deviation.
  It is a property of the prompt's ``n`` samples, not an unbiased estimate of the spread of
  ``k`` fresh samples.
* ``<metric>/ci95`` (added for every ``mean@n`` and ``.../mean`` metric over at least two
  prompts): the half-width of the two-sided 95% Student-t interval of the prompt average
  (:func:`bestk.stats.mean_ci`). Prompts are independent, so the interval covers both the
  prompt sampling and the sampling of each prompt's ``n`` answers.

Every @k estimate is a U-statistic (Hoeffding, *A Class of Statistics with Asymptotically Normal
Distribution*, Ann. Math. Statist. 19, 1948): the average of a kernel over all ``k``-subsets of
iid samples, hence unbiased for the kernel's expectation on ``k`` iid samples.

Majority ties are broken as verl breaks them. verl's ``calc_maj_val`` keeps the answers in the
order they first appear in the (randomly drawn) sample, takes the first answer with the most
votes (``max`` over a dict), and returns the score of that answer's first sample. Over a
uniformly random order of a subset this picks each of the ``J`` tied answers with probability
``1/J``, and, within the winning answer, each of its samples with equal probability. So the
subset's majority score is ``(1/J) sum_{tied a} mean score of a's samples in the subset``, and
its expectation over subsets is ``sum_a w_a P(a wins)`` with ``w_a`` the mean score of answer
``a``'s samples (see :func:`maj_at_k` for how ``P(a wins)`` is computed exactly).

verl's data conventions are kept: samples are grouped by ``(data_source, uid)``; ``None``
values are left out of a variable; a variable whose values are strings is not a metric (as
verl's ``pred``); ``maj@k`` is reported for a variable when every sample of the prompt has a
``pred`` and the variable has as many values as the prompt has samples, the values paired with
the ``pred`` list by position; ``expected_acc_counts`` (verl's failed agent sessions) adds
``acc = 0`` for each missing session and an ``acc_success_only`` variable, as verl does.
Bad input -- lists of the wrong length, a variable mixing strings and numbers, non-numeric
values, NaN or infinite values, unhashable ``pred`` answers -- raises ``ValueError`` naming it.

Using it in a verl run: :func:`use_unbiased_validation` (one call, reversible) makes verl's
trainers call :func:`unbiased_validation_metrics`. verl runs its trainer in a Ray actor, which
imports verl and so loads bestk's plugin (:mod:`bestk.integrations.verl`); the plugin makes that
call in every process where the environment variable ``BESTK_VERL_VALIDATION=unbiased``
(:data:`VALIDATION_ENV`) is set. docs/integrations.md has the command line.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bestk._inputs import Numbers, prepare
from bestk._optional import require
from bestk._options import int_option
from bestk.groups import GroupLabels, Rows, make_groups
from bestk.metrics import best_at_k, maxk_weights
from bestk.stats import mean_ci

__all__ = [
    "VALIDATION_ENV",
    "CI_SUFFIX",
    "maj_at_k",
    "unbiased_validation_metrics",
    "use_unbiased_validation",
    "validation_from_env",
    "validation_ks",
]

#: Environment variable read when bestk's verl plugin is imported: ``unbiased`` makes verl's
#: trainers use :func:`unbiased_validation_metrics`; unset, empty or ``verl`` keeps verl's.
VALIDATION_ENV = "BESTK_VERL_VALIDATION"
#: Suffix of the confidence-interval half-width added next to each averaged metric.
CI_SUFFIX = "/ci95"

#: Validation metrics as verl nests them: ``{data_source: {variable: {metric: value}}}``.
Metrics = dict[str, dict[str, dict[str, float]]]


# ---------------------------------------------------------------------------------------------
# maj@k: the exact expectation of the majority-vote score over k-subsets


def _binom_table(n: torch.Tensor, k: int, c_max: int) -> torch.Tensor:
    """``(G, c_max+1, k+1)``: ``P(X = x)`` for ``X ~ Binomial(c, p = k/n_g)`` at every ``c <=
    c_max``, ``x <= k`` (0 for ``x > c``), from one table of ``log c!``; float64."""
    log_fact = torch.lgamma(torch.arange(c_max + 1, dtype=torch.float64) + 1)
    c = torch.arange(c_max + 1)[:, None]
    x = torch.arange(k + 1)[None, :]
    ok = x <= c
    log_choose = log_fact[c] - log_fact[x.clamp(max=c_max)] - log_fact[(c - x).clamp(min=0)]
    p = (k / n)[:, None, None]
    xf, rest = x.to(torch.float64), (c - x).clamp(min=0).to(torch.float64)
    log_p = torch.xlogy(xf, p) + torch.xlogy(rest, 1 - p)  # xlogy(0, 0) = 0
    return torch.where(ok, torch.exp(log_choose + log_p), 0.0)


def _convolve(state: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """Products of polynomials in ``z`` truncated to the state's degree: ``state`` is
    ``(G, Q, K+1)``, ``f`` is ``(G, Q, t+1)``; ``out[d] = sum_x f[x] state[d-x]``."""
    out = state * f[..., :1]
    for x in range(1, min(f.shape[-1], state.shape[-1])):  # a loop over degrees, not samples
        out[..., x:] += state[..., :-x] * f[..., x : x + 1]
    return out


def _answer_cells(answer: np.ndarray, prompt: np.ndarray, num_prompts: int
                  ) -> tuple[torch.Tensor, np.ndarray]:
    """``(counts (G, M), cell (T,))``: each prompt's answers sorted by count (largest first,
    zero-padded), and the flat cell ``g * M + slot`` of each sample's answer."""
    width = int(answer.max()) + 1
    pair = prompt.astype(np.int64) * width + answer
    uniq, inverse, counts = np.unique(pair, return_inverse=True, return_counts=True)
    owner = uniq // width
    order = np.lexsort((-counts, owner))
    slot = np.empty_like(order)
    slot[order] = _rank_within(owner[order])
    m = int(slot.max()) + 1
    cnt = np.zeros((num_prompts, m))
    cnt[owner, slot] = counts
    return torch.from_numpy(cnt), (owner * m + slot)[inverse.reshape(-1)]


def _answer_means(x: np.ndarray, cell: np.ndarray, counts: torch.Tensor) -> torch.Tensor:
    """``(G, M)``: the mean of ``x`` over each answer's samples (0 in padding)."""
    sums = np.bincount(cell, weights=x, minlength=counts.numel()).reshape(counts.shape)
    return torch.from_numpy(sums) / counts.clamp(min=1)


def _maj_moments(values: np.ndarray, answer: np.ndarray, prompt: np.ndarray, num_prompts: int,
                 k: int) -> np.ndarray:
    """``(2, G)``: the mean over ``k``-subsets of each prompt's majority score and its variance
    (the second pass weighs each answer by the mean squared deviation of its samples from the
    first pass's mean: no cancellation).

    Let prompt ``g`` have ``n`` samples, answers ``a`` with ``c_a`` samples and mean score
    ``w_a``. Select every sample independently with probability ``p = k/n``: answer ``a`` gets
    ``X_a ~ Binomial(c_a, p)`` samples, and conditioned on ``sum X = k`` the selection is a
    uniform ``k``-subset. With ``t`` the largest ``X`` and ``J`` the number of answers at ``t``,
    the subset's expected majority score is ``(1/J) sum_{a: X_a = t} w_a``, so

        maj@k = sum_t [z^k] int_0^1 sum_a w_a E_a(z) prod_{b != a} (L_b(z) + u E_b(z)) du
                / P(sum X = k),

    ``L_b(z) = sum_{x<t} P(X_b = x) z^x``, ``E_b(z) = P(X_b = t) z^t`` (``int u^(J-1) du = 1/J``).
    Answers with ``c_b < t`` contribute the binomial ``(1 - p + p z)^(c_b)`` together; the others
    (at most ``n/t``) are multiplied in one at a time, carrying ``P = prod`` and its derivative
    in the weights ``D`` (``D <- D f_b + w_b E_b P``). The ``u`` integral is Gauss-Legendre with
    enough nodes to be exact (the ``[z^k]`` coefficient has degree ``< k/t`` in ``u``). All terms
    are non-negative: no cancellation. Loops run over ``t``, answer slots and polynomial
    degrees, never over prompts or samples.
    """
    counts, cell = _answer_cells(answer, prompt, num_prompts)
    mean = _maj_expect(counts, _answer_means(values, cell, counts), k)
    var = _maj_expect(counts, _answer_means((values - mean[prompt]) ** 2, cell, counts), k)
    return np.stack([mean, var])


def _maj_expect(counts: torch.Tensor, weights: torch.Tensor, k: int) -> np.ndarray:
    """``(G,)``: ``sum_a weights[a] P(answer a wins a uniform k-subset)`` per prompt, in chunks
    of prompts (the widest tensors: the state ``(G, Q, k+1, t+1)`` with ``Q (t+1) <= k+2``,
    the binomial table ``(G, n+1, k+1)``)."""
    n_max = int(counts.sum(1).max())
    step = max(1, _CELLS // ((k + 1) * max(k + 2, n_max + 1)))
    return np.concatenate([_maj_chunk(counts[lo:lo + step], weights[lo:lo + step], k)
                           for lo in range(0, counts.shape[0], step)])


#: Cells of the largest tensor :func:`_maj_expect` builds at once (float64: 64 MiB).
_CELLS = 1 << 23


def _maj_chunk(counts: torch.Tensor, weights: torch.Tensor, k: int) -> np.ndarray:
    """:func:`_maj_expect` on one chunk of prompts (their answer table)."""
    num_prompts = counts.shape[0]
    rows = torch.arange(num_prompts)
    n = counts.sum(1)
    table = _binom_table(n, k, int(n.max()))  # P(X = x | c samples) at [g, c, x]
    ints = counts.long()
    out = torch.zeros(num_prompts, dtype=torch.float64)
    for t in range(1, min(k, int(counts.max())) + 1):
        big = counts >= t
        slots = int(big.sum(1).max())
        small = (n - (counts * big).sum(1)).long()
        nodes = max(1, math.ceil(min(slots, k // t) / 2))
        x, w = np.polynomial.legendre.leggauss(nodes)
        u = torch.from_numpy((x + 1) / 2)
        w_u = torch.from_numpy(w / 2)
        prod = table[rows, small][:, None, :].repeat(1, nodes, 1)  # the small answers
        deriv = torch.zeros_like(prod)
        identity = (torch.arange(t + 1) == 0).to(torch.float64)
        for s in range(slots):
            coef = table[rows, ints[:, s], : t + 1]  # (G, t+1)
            coef = torch.where(big[:, s, None], coef, identity)  # small answers: already in
            top = coef[:, t]  # P(X_b = t), 0 for a small answer
            f = coef[:, None, :].repeat(1, nodes, 1)
            f[:, :, t] = top[:, None] * u
            at_top = F.pad(prod, (t, 0))[..., : k + 1] * top[:, None, None]  # P E_b
            deriv = _convolve(deriv, f) + weights[:, s, None, None] * at_top
            prod = _convolve(prod, f)
        out += (deriv[..., k] * w_u).sum(-1)
    out /= table[rows, n.long(), k]  # P(sum X = k)
    return out.numpy()


def _rank_within(ids: np.ndarray) -> np.ndarray:
    """The rank of each entry among the entries with the same id, in order (a cumcount)."""
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    rank = np.empty(ids.shape[0], dtype=np.int64)
    rank[order] = np.arange(ids.shape[0]) - np.searchsorted(sorted_ids, sorted_ids, side="left")
    return rank


def maj_at_k(values: Numbers, answers: Sequence[Hashable] | np.ndarray, k: int,
             group: GroupLabels = None) -> float | np.ndarray:
    """Unbiased maj@k: the majority-vote score of ``k`` samples, averaged over every subset of
    ``k`` distinct samples of each group (exact, by a generating function; no enumeration,
    no resampling).

    The majority answer of a subset is the answer with the most samples in it; ``J`` answers
    tied for the most votes win with probability ``1/J`` each, and the winner's score is the
    score of one of its samples in the subset chosen uniformly (verl's ``calc_maj_val`` on a
    uniformly random order: module docstring). The average over subsets is a U-statistic,
    unbiased for the majority score of ``k`` iid samples.
    See :func:`_maj_moments` for the generating function.

    Parameters
    ----------
    values: 1-D scores, one per sample (finite numbers).
    answers: 1-D hashable answers (the votes), one per sample; compared as Python values.
    k: an integer ``1 <= k <= n`` for every group.
    group: labels as in :func:`bestk.advantages`; ``None`` = one group.

    Returns a float for ``group=None``, else a float64 array in sorted label order (as
    :func:`bestk.metrics.best_at_k`).
    """
    try:
        k = int_option("maj_at_k", "k", k, minimum=1)
    except ValueError:
        raise ValueError(f"maj_at_k: k must be an integer >= 1, got {k!r}") from None
    ndim = values.ndim if isinstance(values, torch.Tensor | np.ndarray) else np.ndim(values)
    if ndim != 1:
        raise ValueError(f"maj_at_k: values must be 1-D, got {ndim} dimensions")
    flat, groups, _ = prepare(values, group)
    n = flat.shape[0]
    if n == 0:
        raise ValueError("maj_at_k: no samples")
    try:
        n_answers = len(answers)
    except TypeError:
        raise ValueError(f"maj_at_k: answers must be a 1-D sequence, got {type(answers).__name__}"
                         ) from None
    if n_answers != n:
        raise ValueError(f"maj_at_k: {n_answers} answers but {n} values")
    codes = make_groups(answers, n).index.numpy()
    sizes = groups.sizes
    if bool((sizes < k).any()):
        g = int(torch.nonzero(sizes < k)[0])
        raise ValueError(
            f"maj_at_k: k={k} exceeds the size {int(sizes[g])} of group {groups.label(g)!r}")
    vals = flat.cpu().numpy()
    if not (np.abs(vals) < _SQUARE_LIMIT).all():
        raise ValueError("maj_at_k: values too large to square in float64")
    counts, cell = _answer_cells(codes, groups.index.cpu().numpy(), groups.num_groups)
    res = _maj_expect(counts, _answer_means(vals, cell, counts), k)
    return float(res[0]) if group is None else res


# ---------------------------------------------------------------------------------------------
# verl's validation data


def validation_ks(n: int) -> list[int]:
    """The ``k`` verl reports for a prompt of ``n`` values: ``2, 4, 8, ... < n`` and ``n``
    (none for ``n <= 1``)."""
    if n <= 1:
        return []
    ks = [2 ** i for i in range(1, max(1, (n - 1).bit_length()) + 1) if 2 ** i < n]
    return [*ks, n]


def _objects(name: str, xs: Any, n: int) -> np.ndarray:
    """A length-``n`` 1-D object array of ``xs`` (a list, numpy array or tensor)."""
    try:
        length = len(xs)
    except TypeError:
        raise ValueError(f"{name} must be a list of per-sample values, got "
                         f"{type(xs).__name__}") from None
    if length != n:
        raise ValueError(f"{name} has {length} values but there are {n} samples "
                         "(len(data_sources))")
    if isinstance(xs, torch.Tensor):
        xs = xs.tolist()
    return np.fromiter(xs, dtype=object, count=n)


def _numeric(name: str, values: Any, n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(float values, present mask)`` of one variable, ``None`` for a string variable."""
    fast = None
    if isinstance(values, list | np.ndarray):
        try:
            fast = np.asarray(values)
        except (ValueError, TypeError):
            fast = None
    if fast is not None and fast.ndim == 1 and fast.shape[0] == n:
        if fast.dtype.kind in "biuf":
            out, present = fast.astype(np.float64), np.ones(n, dtype=bool)
            return _finite(name, out, present)
        if fast.dtype.kind in "US" and set(map(type, values)) <= {str, np.str_}:
            return None
    arr = _objects(f"infos_dict[{name!r}]", values, n)
    present = _not_none(f"infos_dict[{name!r}]", arr)
    kept = arr[present]
    kinds = set(map(type, kept))
    if kinds and all(issubclass(t, str) for t in kinds):
        return None
    if any(issubclass(t, str) for t in kinds):
        raise ValueError(f"infos_dict[{name!r}] mixes strings and numbers")
    try:
        nums = np.asarray(kept.tolist(), dtype=np.float64)
    except (ValueError, TypeError):
        raise ValueError(f"infos_dict[{name!r}] holds values that are not numbers (types: "
                         f"{sorted(t.__name__ for t in kinds)})") from None
    if nums.ndim != 1:
        raise ValueError(f"infos_dict[{name!r}] holds sequences, not one number per sample")
    out = np.zeros(n)
    out[present] = nums
    return _finite(name, out, present)


#: Scores must stay below this in magnitude: squares of differences of two of them are finite.
_SQUARE_LIMIT = 2.0**510


def _not_none(name: str, arr: np.ndarray) -> np.ndarray:
    """``(n,)`` bool: which entries of an object array are not ``None``."""
    try:
        return np.asarray(arr != None, dtype=np.bool_).reshape(arr.shape[0])  # noqa: E711
    except (ValueError, TypeError):
        raise ValueError(f"{name} holds values that are neither numbers, strings nor None"
                         ) from None


def _finite(name: str, out: np.ndarray, present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    bad = np.flatnonzero(present & ~np.isfinite(out))
    if bad.size:
        raise ValueError(f"infos_dict[{name!r}] has the non-finite value {float(out[bad[0]])!r} at "
                         f"sample {int(bad[0])}")
    if not (np.abs(out[present]) < _SQUARE_LIMIT).all():
        raise ValueError(f"infos_dict[{name!r}] has values too large to square in float64")
    return out, present


def _codes(name: str, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense codes and the labels they stand for (Python equality, as verl's dicts)."""
    try:
        g = make_groups(labels, labels.shape[0])
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None
    return g.index.numpy(), g.labels


class _Batch:
    """verl's per-sample lists as arrays: rows (real samples, then ``acc = 0`` rows for missing
    agent sessions), their prompt, each prompt's data source, the variables."""

    def __init__(self, data_sources: Any, sample_uids: Any, infos_dict: Mapping[str, Any],
                 expected_acc_counts: Mapping[tuple[Any, Any], int] | None):
        try:
            n = len(data_sources)
        except TypeError:
            raise ValueError("data_sources must be a list of per-sample data sources") from None
        ds = _objects("data_sources", data_sources, n)
        uid = _objects("sample_uids", sample_uids, n)
        if not isinstance(infos_dict, Mapping):
            raise ValueError(f"infos_dict must map names to per-sample lists, got "
                             f"{type(infos_dict).__name__}")
        columns = {name: _numeric(name, vals, n) for name, vals in infos_dict.items()}
        exp = dict(expected_acc_counts or {})
        exp_keys = list(exp)
        if any(not isinstance(key, tuple) or len(key) != 2 for key in exp_keys):
            raise ValueError("expected_acc_counts must be keyed by (data_source, uid) pairs")
        counts = np.asarray(list(exp.values()))
        if counts.size and (counts.dtype.kind not in "iu" or bool((counts < 0).any())):
            raise ValueError("expected_acc_counts must hold counts (integers >= 0), got "
                             f"{counts.tolist()[:5]}")
        counts = counts.astype(np.int64).reshape(-1)
        exp_ds = _objects("expected data sources", [key[0] for key in exp_keys], len(exp_keys))
        exp_uid = _objects("expected uids", [key[1] for key in exp_keys], len(exp_keys))
        ds_code, self.ds_labels = _codes("data_sources", np.concatenate([ds, exp_ds]))
        uid_code, _ = _codes("sample_uids", np.concatenate([uid, exp_uid]))
        pair = ds_code * (int(uid_code.max(initial=0)) + 1) + uid_code
        prompt, _ = _codes("prompts", pair) if pair.size else (pair, pair)
        self.ds_of_prompt = np.zeros(int(prompt.max(initial=-1)) + 1, dtype=np.int64)
        self.ds_of_prompt[prompt] = ds_code
        # data sources in order of first appearance, as verl's dicts
        first = np.full(self.ds_labels.shape[0], np.iinfo(np.int64).max)
        np.minimum.at(first, ds_code, np.arange(ds_code.shape[0]))
        self.ds_order = np.argsort(first, kind="stable")
        row_prompt, exp_prompt = prompt[:n], prompt[n:]
        acc = columns.get("acc")
        self.columns: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        extra = np.zeros(0, dtype=np.int64)
        success_only = None
        if exp_keys and acc is not None:
            acc_ds = np.unique(ds_code[:n][acc[1]])
            keep = np.isin(ds_code[n:], acc_ds)
            observed = np.bincount(row_prompt[acc[1]], minlength=self.ds_of_prompt.shape[0])
            missing = np.maximum(counts[keep] - observed[exp_prompt[keep]], 0)
            extra = np.repeat(exp_prompt[keep], missing)
            in_exp = np.isin(row_prompt, exp_prompt[keep])
            success_only = (acc[0], acc[1] & in_exp)
        self.prompt = np.concatenate([row_prompt, extra])
        self.real = np.arange(self.prompt.shape[0]) < n
        pad = np.zeros(extra.shape[0])
        for name, col in columns.items():
            if col is None:
                continue
            vals, present = col
            is_acc = name == "acc" and success_only is not None
            self.columns[name] = (np.concatenate([vals, pad]),
                                  np.concatenate([present, np.full(extra.shape[0], is_acc)]))
        if success_only is not None and bool(success_only[1].any()):
            self.columns["acc_success_only"] = (
                np.concatenate([success_only[0], pad]),
                np.concatenate([success_only[1], np.zeros(extra.shape[0], bool)]))
        self.pred: np.ndarray | None = None
        if "pred" in infos_dict:
            preds = _objects("infos_dict['pred']", infos_dict["pred"], n)
            has = _not_none("infos_dict['pred']", preds)
            code = np.full(self.prompt.shape[0], -1, dtype=np.int64)
            if bool(has.any()):
                code[:n][has] = _codes("infos_dict['pred']", preds[has])[0]
            self.pred = code

    @property
    def num_prompts(self) -> int:
        return int(self.ds_of_prompt.shape[0])

    def votes(self, prompt: np.ndarray, present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(eligible prompts (P,), answer code of each present value)``: verl pairs a
        variable's values of a prompt with its ``pred`` list by position, when the two have the
        same length and no ``pred`` is ``None``."""
        P = self.num_prompts
        n_vals = np.bincount(prompt, minlength=P)
        if self.pred is None:
            return np.zeros(P, dtype=bool), np.full(prompt.shape[0], -1)
        real_prompt = self.prompt[self.real]
        n_real = np.bincount(real_prompt, minlength=P)
        no_pred = np.bincount(real_prompt[self.pred[self.real] < 0], minlength=P)
        eligible = (n_vals == n_real) & (no_pred == 0) & (n_vals > 0)
        order = np.argsort(real_prompt, kind="stable")  # real rows by prompt, in row order
        start = np.searchsorted(real_prompt[order], np.arange(P))
        pos = _rank_within(prompt)
        ok = eligible[prompt]
        answer = np.full(prompt.shape[0], -1)
        answer[ok] = self.pred[self.real][order[start[prompt[ok]] + pos[ok]]]
        return eligible, answer


def _extreme_at_k(v: np.ndarray, ids: np.ndarray, k: int, G: int) -> tuple[np.ndarray, ...]:
    """``(best mean, best std, worst mean, worst std)`` over the ``k``-subsets of each group
    (ids ``0..G-1``). The means are :func:`bestk.metrics.best_at_k` (the worst: of ``-v``); the
    standard deviations weigh the squared deviations from that mean by the same weights
    ``C(i-1, k-1) / C(n, k)`` (:func:`bestk.metrics.maxk_weights`, the probability that the
    ``i``-th smallest is the subset's maximum): two passes, no cancellation."""
    out: list[np.ndarray] = []
    for x in (v, -v):
        flat, groups, _ = prepare(x, ids)
        s = groups.sort(flat)
        mean = np.asarray(best_at_k(x, k, ids))

        def spread(rows: Rows) -> torch.Tensor:
            w = maxk_weights(rows, k)
            m = rows.total(torch.where(w > 0, w * rows.values, 0.0))
            return torch.where(w > 0, w * (rows.values - m[:, None]) ** 2, 0.0)

        var = s.row_totals(spread, groups.num_groups).numpy()
        out += [mean, np.sqrt(var)]
    best, best_sd, neg_worst, worst_sd = out
    return best, best_sd, -neg_worst, worst_sd


def _variable_metrics(batch: _Batch, vals: np.ndarray, present: np.ndarray
                      ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{metric: (prompt ids, per-prompt values)}`` of one variable, in verl's names."""
    prompt, v = batch.prompt[present], vals[present]
    P = batch.num_prompts
    n_p = np.bincount(prompt, minlength=P)
    mean = np.bincount(prompt, weights=v, minlength=P) / np.maximum(n_p, 1)
    sq_dev = np.bincount(prompt, weights=(v - mean[prompt]) ** 2, minlength=P)
    eligible, answer = batch.votes(prompt, present)
    parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}

    def put(metric: str, who: np.ndarray, values: np.ndarray) -> None:
        parts.setdefault(metric, []).append((who, values))  # prompts of several sizes

    for n in np.unique(n_p[n_p > 0]).tolist():
        who = np.flatnonzero(n_p == n)
        put(f"mean@{n}", who, mean[who])
        if n == 1:
            continue
        put(f"std@{n}", who, np.sqrt(sq_dev[who] / n))
        rows = n_p[prompt] == n
        ids = np.searchsorted(who, prompt[rows])  # 0..len(who)-1 in prompt order
        voting = np.flatnonzero(eligible[who])
        vrows = rows & eligible[prompt]
        vids = np.searchsorted(voting, ids[eligible[prompt[rows]]])
        for k in validation_ks(n):
            b, b_sd, w, w_sd = _extreme_at_k(v[rows], ids, k, who.shape[0])
            put(f"best@{k}/mean", who, b)
            put(f"best@{k}/std", who, b_sd)
            put(f"worst@{k}/mean", who, w)
            put(f"worst@{k}/std", who, w_sd)
            if voting.size:
                m1, var = _maj_moments(v[vrows], answer[vrows], vids, voting.size, k)
                put(f"maj@{k}/mean", who[voting], m1)
                put(f"maj@{k}/std", who[voting], np.sqrt(var))
    return {metric: (np.concatenate([w for w, _ in got]), np.concatenate([x for _, x in got]))
            for metric, got in parts.items()}


def _is_mean(metric: str) -> bool:
    return metric.startswith("mean@") or metric.endswith("/mean")


def unbiased_validation_metrics(
    data_sources: Sequence[Any] | np.ndarray,
    sample_uids: Sequence[Any] | np.ndarray,
    infos_dict: Mapping[str, Sequence[Any]],
    seed: int = 42,
    expected_acc_counts: Mapping[tuple[Any, Any], int] | None = None,
    *,
    ci: bool = True,
) -> Metrics:
    """verl's validation metrics, computed exactly and without bias (module docstring).

    A drop-in replacement of ``verl.trainer.ppo.metric_utils.process_validation_metrics``: the
    same arguments (``seed`` is accepted and ignored: nothing is resampled) and the same
    ``{data_source: {variable: {metric: value}}}`` with verl's metric names, each the average
    over the data source's prompts of a per-prompt value; plus ``<metric>/ci95`` (the 95%
    Student-t half-width over prompts) for each averaged ``mean@n`` and ``.../mean`` metric of
    at least two prompts, unless ``ci=False``.
    """
    del seed  # exact: nothing is drawn
    batch = _Batch(data_sources, sample_uids, infos_dict, expected_acc_counts)
    per_var = {name: _variable_metrics(batch, vals, present)
               for name, (vals, present) in batch.columns.items()}
    cells: dict[int, dict[str, dict[str, float]]] = {}
    for name, metrics in per_var.items():
        for metric, (who, values) in metrics.items():
            ds = batch.ds_of_prompt[who]
            order = np.argsort(ds, kind="stable")
            ds, values = ds[order], values[order]
            starts = np.flatnonzero(np.r_[True, ds[1:] != ds[:-1]])
            sizes = np.diff(np.r_[starts, ds.shape[0]])
            means = np.add.reduceat(values, starts) / sizes
            for d, lo, size, mean in zip(ds[starts].tolist(), starts.tolist(), sizes.tolist(),
                                         means.tolist(), strict=True):
                entry = cells.setdefault(d, {}).setdefault(name, {})
                entry[metric] = mean
                if ci and size > 1 and _is_mean(metric):
                    entry[metric + CI_SUFFIX] = mean_ci(values[lo:lo + size])[1]
    out: Metrics = {}
    for d in batch.ds_order.tolist():
        if d in cells:
            source = batch.ds_labels[d]
            out[source.item() if isinstance(source, np.generic) else source] = cells[d]
    return out


# ---------------------------------------------------------------------------------------------
# Using it in verl

#: verl's own ``process_validation_metrics``, kept while :func:`use_unbiased_validation` is on.
_VERL_FUNCTION: list[Any] = []


def validation_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """Whether :data:`VALIDATION_ENV` asks for unbiased validation metrics: ``unbiased`` ->
    True; unset, empty or ``verl`` -> False; anything else is a ``ValueError``."""
    value = (os.environ if environ is None else environ).get(VALIDATION_ENV, "").strip().lower()
    if value in ("", "verl"):
        return False
    if value == "unbiased":
        return True
    raise ValueError(f"{VALIDATION_ENV} must be 'unbiased' or 'verl', got {value!r}")


def use_unbiased_validation(enable: bool = True) -> list[str]:
    """Make verl compute validation metrics with :func:`unbiased_validation_metrics`
    (``enable=False``: give verl its own function back). Idempotent and reversible.

    verl's trainers import ``process_validation_metrics`` by name (``from ...metric_utils
    import process_validation_metrics`` in ``ray_trainer`` and ``v1.trainer_base``), so the
    function is replaced in ``metric_utils`` (for modules imported later) and in every module
    already imported that holds verl's function or this one under that name; a module holding
    some other function there is left alone. Returns the names of the modules that now hold
    the chosen function.
    """
    if not isinstance(enable, bool):
        raise ValueError(f"use_unbiased_validation: enable must be True or False, got {enable!r}")
    mu = require("verl.trainer.ppo.metric_utils", extra="verl", who="bestk.integrations.verl")
    ours = unbiased_validation_metrics
    if not _VERL_FUNCTION:
        if mu.process_validation_metrics is ours:  # pragma: no cover - only after a reload
            raise ValueError("verl's process_validation_metrics is no longer known")
        _VERL_FUNCTION.append(mu.process_validation_metrics)
    theirs = _VERL_FUNCTION[0]
    target = ours if enable else theirs
    done = []
    for name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        held = namespace.get("process_validation_metrics")
        if held is ours or held is theirs:
            namespace["process_validation_metrics"] = target
            done.append(name)
    if not enable:
        _VERL_FUNCTION.clear()
    return sorted(done)
