"""Unbiased pass@k / best@k metrics, curves over k with bootstrap CIs, gradient allocation.

* :func:`pass_at_k` — ``1 - C(n-c, k) / C(n, k)`` from ``n`` samples with ``c`` correct
  (Chen et al. 2021), unbiased for ``1 - (1-p)^k``.
* :func:`best_at_k` — ``sum_{i>=k} r_(i) C(i-1,k-1)/C(n,k)`` per group (ascending sort),
  unbiased for ``E[max of k iid rewards]`` (max@k); equals pass@k on 0/1 rewards.
* :func:`pass_at_k_curve`, :func:`best_at_k_curve` — averages over prompts for many ``k`` with
  percentile bootstrap CIs **over prompts**. (Bootstrapping best@k by resampling the ``n``
  samples of a prompt *with replacement*, as some trainers log, is biased low; we never do it.)
* :func:`gradient_allocation` — share of ``sum |A_i| x tokens_i`` per pass-rate bin
  (SoftmaxGRPO Table 3).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np
import torch

from bestk._inputs import Numbers, NumbersOut, prepare
from bestk._options import int_option, real_option
from bestk.groups import GroupLabels, Groups, Rows, SortedGroups

__all__ = [
    "pass_at_k",
    "best_at_k",
    "Curve",
    "pass_at_k_curve",
    "best_at_k_curve",
    "resolve_ks",
    "curve_options",
    "gradient_allocation",
    "PASS_RATE_BINS",
]

#: Pass-rate bins of SoftmaxGRPO Table 3: [0,.2), [.2,.5), [.5,.7), [.7,.9), [.9,1].
PASS_RATE_BINS: tuple[float, ...] = (0.0, 0.2, 0.5, 0.7, 0.9, 1.0)


_INT64_LIMIT = 2**63


class Allocation(TypedDict):
    """What :func:`gradient_allocation` returns, one entry per pass-rate bin."""

    #: The bins' labels, ``"[0,0.2)"`` ... ``"[0.9,1]"``.
    bins: list[str]
    #: Each bin's share of ``sum |A_i| x tokens_i`` (they sum to 1 unless every ``A_i`` is 0).
    share: list[float]
    #: Prompts (groups) whose pass rate falls in the bin.
    prompts: list[int]
    #: Samples of those prompts.
    samples: list[int]


def maxk_weights(rows: Rows, k: int, *, leave_one_out: bool = False) -> torch.Tensor:
    """``(R, W)``: ``C(i-1, k-1) / C(n', k)`` at every cell of one padded ascending
    :class:`~bestk.groups.Rows` matrix, in the values' dtype.

    ``i`` is the 1-based rank in the group and ``n'`` the group size, or the size minus one
    when ``leave_one_out`` (weights of the group with one member removed, indexed by the rank
    in the reduced group). Zero where ``i < k`` or ``i > n'``. Computed as
    ``exp(log(k/n') + sum_{j=i+1}^{n'} log((j-k)/(j-1)))``, a segment-local suffix scan.
    """
    dtype = rows.values.dtype
    m = rows.rank  # in the values' dtype
    n_eff = rows.n - 1 if leave_one_out else rows.n
    n_eff = torch.as_tensor(n_eff, dtype=dtype, device=m.device)
    one = torch.ones((), dtype=dtype, device=m.device)
    # log of the recursion ratio (j-k)/(j-1) for k < j <= n', 0 elsewhere (padding included).
    inner = (m > k) & (m <= n_eff)
    ratio = torch.where(inner, (m - k) / torch.maximum(m - 1, one), one)
    suffix = rows.rcumsum(torch.log(ratio), exclusive=True)  # sum_{j=i+1}^{n'}
    valid = (m >= k) & (m <= n_eff)
    n_pos = torch.maximum(n_eff, one)
    logw = torch.log(torch.full_like(n_pos, k) / n_pos) + suffix  # k / n', correctly rounded
    return torch.where(valid, torch.exp(torch.where(valid, logw, -one)), torch.zeros_like(logw))


def _int_array(name: str, x: Numbers) -> np.ndarray:
    """``x`` as an int64 array; floats must be integral, everything must fit int64."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{name} must hold integers: {e}") from None
    if arr.dtype.kind == "O":  # e.g. Python ints beyond int64
        try:
            arr = arr.astype(np.int64)
        except (OverflowError, TypeError, ValueError):
            raise ValueError(f"{name} must hold integers in the int64 range, got {x!r}") from None
    if arr.dtype.kind == "f":
        if not np.isfinite(arr).all() or not np.all(arr == np.round(arr)):
            raise ValueError(f"{name} must hold integers, got {x!r}")
        if arr.size and not bool(np.all(np.abs(arr) < _INT64_LIMIT)):
            raise ValueError(f"{name} must hold integers in the int64 range, got {x!r}")
        return arr.astype(np.int64)
    if arr.dtype.kind == "u":
        if arr.size and int(arr.max()) >= _INT64_LIMIT:
            raise ValueError(f"{name} must hold integers in the int64 range, got {x!r}")
    elif arr.dtype.kind != "i":
        raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
    return arr.astype(np.int64)


def _int_param(owner: str, name: str, x: Numbers) -> np.ndarray:
    """A parameter such as ``k``: a Python / numpy integer (checked by
    :func:`bestk._options.int_option`, the rule of :func:`best_at_k` and ``pkpo``: no float,
    not even an integral one, no bool) or an array of an integer dtype; as an int64 array.
    Counts (``n``, ``c``) are data and go through :func:`_int_array`, which also takes
    integral floats (a sum of 0/1 float successes)."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    if np.ndim(x) == 0:
        try:
            return np.asarray(int_option(owner, name, x))
        except ValueError:
            raise ValueError(
                f"{owner}: {name} must be an integer, got {type(x).__name__} {x!r} (integral "
                "floats such as 2.0 are refused, as best_at_k and pkpo refuse them)"
            ) from None
    arr = np.asarray(x)
    if arr.dtype.kind not in "iuO":
        raise ValueError(f"{owner}: {name} must hold integers (an integer dtype), got dtype "
                         f"{arr.dtype}")
    return _int_array(name, arr)


#: Largest number of product terms pass_at_k evaluates per entry (min(c, k) of n - c >= k).
MAX_PRODUCT_TERMS = 1 << 26


def _log_fail_product(
    n: np.ndarray, c: np.ndarray, k: np.ndarray, skip: np.ndarray, budget: int = 1 << 22
) -> np.ndarray:
    """``log C(n-c, k)/C(n, k)`` as a sum of ``min(c, k)`` terms ``log1p(-a/(n-j))``.

    ``C(n-c,k)/C(n,k) = prod_{i=n-c+1}^{n} (1 - k/i) = prod_{j=0}^{k-1} (1 - c/(n-j))``; the
    shorter of the two products is summed in log space (``a = k`` if ``c <= k`` else ``c``),
    on a padded ``(entries, width)`` grid processed in chunks of at most ``budget`` cells.
    Entries flagged ``skip`` (``n - c < k``, pass@k = 1) get 0.
    """
    m = np.where(skip, 0, np.minimum(c, k)).astype(np.int64)
    a = np.where(c <= k, k, c)
    out = np.zeros(n.shape, dtype=np.float64)
    width = int(m.max(initial=0))
    if width == 0:
        return out
    if width > MAX_PRODUCT_TERMS:
        raise ValueError(
            f"pass_at_k: min(c, k) = {width} exceeds the {MAX_PRODUCT_TERMS} product terms "
            "evaluated exactly; for such n the estimate is 1 - (1 - c/n)^k to within k/n"
        )
    j = np.arange(width, dtype=np.float64)
    step = max(1, budget // width)
    for lo in range(0, n.size, step):  # chunks bound memory; each chunk is vectorised
        sl = slice(lo, lo + step)
        used = j[None, :] < m[sl, None]
        denom = np.where(used, n[sl, None] - j[None, :], 1.0)
        terms = np.where(used, np.log1p(-np.where(used, a[sl, None], 0.0) / denom), 0.0)
        out[sl] = terms.sum(1)
    return out


def pass_at_k(n: Numbers, c: Numbers, k: Numbers) -> float | np.ndarray:
    """Unbiased pass@k estimate ``1 - C(n-c, k) / C(n, k)``; broadcasts over arrays.

    Evaluated in the stable product form ``1 - prod_{i=n-c+1}^{n} (1 - k/i)`` (or the
    equivalent ``prod_{j<k} (1 - c/(n-j))`` when ``k < c``), summed in log space with
    ``log1p`` and finished with ``expm1``; exactly 1 when ``n - c < k``.

    Parameters
    ----------
    n: number of samples per prompt (``>= 1``); integers, or integral floats.
    c: number of correct samples (``0 <= c <= n``); integers, or integral floats.
    k: budget (``1 <= k <= n``): an integer (not a float, as for :func:`best_at_k`) or an
       integer array.

    Returns a float for scalar inputs, else a float64 array of the broadcast shape.
    """
    n_a, c_a = _int_array("n", n), _int_array("c", c)
    k_a = _int_param("pass_at_k", "k", k)
    try:
        n_b, c_b, k_b = np.broadcast_arrays(n_a, c_a, k_a)
    except ValueError as e:
        raise ValueError(f"pass_at_k: n, c and k do not broadcast: {e}") from None
    if n_b.size == 0:
        raise ValueError("pass_at_k: empty input")
    if (n_b < 1).any():
        raise ValueError(f"pass_at_k: n must be >= 1, got {n_b.min()}")
    if ((c_b < 0) | (c_b > n_b)).any():
        raise ValueError("pass_at_k: need 0 <= c <= n for every entry")
    if ((k_b < 1) | (k_b > n_b)).any():
        raise ValueError("pass_at_k: need 1 <= k <= n for every entry")
    shape = n_b.shape
    n_f, c_f, k_f = (a.reshape(-1).astype(np.float64) for a in (n_b, c_b, k_b))
    all_fail = n_f - c_f < k_f
    log_fail = _log_fail_product(n_f, c_f, k_f, all_fail)
    out = np.where(all_fail, 1.0, -np.expm1(log_fail))
    out = np.clip(out, 0.0, 1.0).reshape(shape) + 0.0  # + 0.0 turns -0.0 into 0.0
    return float(out) if out.ndim == 0 else out


def _best_at_k_sorted(groups: Groups, s: SortedGroups, k: int) -> torch.Tensor:
    """``(G,)`` best@k estimates from an ascending within-group sort ``s``, each summed in
    sorted order (a function of the group's sorted values alone)."""
    return s.row_totals(lambda rows: maxk_weights(rows, k) * rows.values, groups.num_groups)


def best_at_k(rewards: Numbers, k: int, group: GroupLabels = None) -> float | NumbersOut:
    """Unbiased best@k (max@k) estimate per group.

    For a group of ``n`` rewards sorted ascending, ``sum_{i>=k} r_(i) C(i-1,k-1)/C(n,k)``
    with the weights from the recursion ``w_n = k/n, w_{i-1} = w_i (i-k)/(i-1)``. Unbiased
    for ``E[max(r_1..r_k)]`` of ``k`` iid draws; ties need no care. Computed in float64.

    Parameters
    ----------
    rewards: 1-D ``(B,)`` with ``group`` labels, or 2-D ``(G, N)`` (one row per prompt).
    k: budget, an integer ``1 <= k <= n`` for every group.
    group: labels as in :func:`bestk.advantages`; ``None`` = one group.

    Returns
    -------
    * 1-D rewards with ``group=None`` (a single group): a Python ``float`` (a 0-d tensor of
      the rewards' dtype for tensor input), like :func:`pass_at_k` on scalars;
    * otherwise ``(G,)`` estimates in group order: rows for 2-D input, sorted unique labels
      for 1-D (``numpy.unique`` order); a tensor of the rewards' dtype for tensor input, else
      a float64 numpy array.
    """
    try:
        k = int_option("best_at_k", "k", k, minimum=1)
    except ValueError:
        raise ValueError(f"best_at_k: k must be an integer >= 1, got {k!r}") from None
    flat, groups, finish = prepare(rewards, group)
    sizes = groups.sizes
    if bool((sizes < k).any()):
        g = int(torch.nonzero(sizes < k)[0])
        raise ValueError(
            f"best_at_k: k={k} exceeds the size {int(sizes[g])} of group {groups.label(g)!r}"
        )
    est = _best_at_k_sorted(groups, groups.sort(flat), k)
    if group is None and _ndim(rewards) == 1:  # a single group: a scalar, like pass_at_k
        out = finish(est, (), what="best@k")
        return out if isinstance(out, torch.Tensor) else float(out)
    return finish(est, (groups.num_groups,), what="best@k")


def _ndim(x: Numbers) -> int:
    return x.ndim if hasattr(x, "ndim") else np.ndim(x)


@dataclass
class Curve:
    """A metric averaged over prompts for several ``k``, with a bootstrap CI over prompts."""

    ks: np.ndarray
    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    num_prompts: int
    ci: float
    per_prompt: np.ndarray = field(repr=False)  # (P, len(ks))

    def as_dict(self, prefix: str) -> dict[str, float]:
        """``{f"{prefix}@{k}": mean}`` — the keys the trainer logs."""
        return {f"{prefix}@{int(k)}": float(m) for k, m in zip(self.ks, self.mean, strict=True)}


def resolve_ks(ks: str | Numbers | None, n: int) -> np.ndarray:
    """``None`` or ``"all"`` -> 1..n; ``"pow2"`` -> 1, 2, 4, ... <= n; else the given ks."""
    if ks is None or (isinstance(ks, str) and ks == "all"):
        return np.arange(1, n + 1)
    if isinstance(ks, str):
        if ks != "pow2":
            raise ValueError(f"ks must be None, 'all', 'pow2' or a sequence of ints, got {ks!r}")
        return 2 ** np.arange(int(np.floor(np.log2(n))) + 1)
    arr = _int_param("resolve_ks", "ks", ks).reshape(-1)
    if arr.size == 0:
        raise ValueError("ks is empty")
    if (arr < 1).any() or (arr > n).any():
        raise ValueError(f"every k must satisfy 1 <= k <= {n} (smallest group size)")
    return arr


def curve_options(owner: str, n_boot: object, ci: object, seed: object
                  ) -> tuple[int, float, int]:
    """``n_boot`` (an integer >= 1), ``ci`` (a real number in (0, 1)) and ``seed`` (an integer
    >= 0) of a curve, checked with :mod:`bestk._options` (bools refused); a ``ValueError``
    naming ``owner`` and the parameter otherwise."""
    n_boot = int_option(owner, "n_boot", n_boot, minimum=1)
    ci = real_option(owner, "ci", ci)
    if not 0 < ci < 1:
        raise ValueError(f"{owner} option ci must be in (0, 1), got {ci}")
    seed = int_option(owner, "seed", seed, minimum=0)
    return n_boot, ci, seed


def _bootstrap(
    per_prompt: np.ndarray, ks: np.ndarray, n_boot: int, ci: float, seed: int
) -> Curve:
    P = per_prompt.shape[0]
    rng = np.random.default_rng(seed)
    # Resampling prompts with replacement == multinomial counts; (n_boot, P) @ (P, K).
    counts = rng.multinomial(P, np.full(P, 1.0 / P), size=n_boot).astype(np.float64)
    boots = counts @ per_prompt / P
    alpha = (1 - ci) / 2
    lo, hi = np.quantile(boots, [alpha, 1 - alpha], axis=0)
    return Curve(ks, per_prompt.mean(0), lo, hi, P, ci, per_prompt)


def pass_at_k_curve(
    n: Numbers,
    c: Numbers,
    ks: str | Numbers | None = None,
    *,
    n_boot: int = 1000,
    ci: float = 0.95,
    seed: int = 0,
) -> Curve:
    """Mean unbiased pass@k over prompts for each ``k``, with a bootstrap CI over prompts.

    ``n`` (scalar or per prompt) and ``c`` (per prompt) are sample and success counts; ``ks``
    as in :func:`resolve_ks`, bounded by the smallest ``n``.
    """
    n_boot, ci, seed = curve_options("pass_at_k_curve", n_boot, ci, seed)
    c_in, n_in = _int_array("c", c), _int_array("n", n)
    c_a = c_in.reshape(-1)
    if n_in.ndim and n_in.size != c_in.size:
        raise ValueError(
            f"pass_at_k_curve: n has shape {n_in.shape} but c has shape {c_in.shape}; give one "
            "n per prompt (the shape of c) or one n for all"
        )
    n_a = np.broadcast_to(n_in.reshape(-1) if n_in.ndim else n_in, c_a.shape)
    if c_a.size == 0:
        raise ValueError("pass_at_k_curve: no prompts")
    ks_a = resolve_ks(ks, int(n_a.min()))
    per_prompt = pass_at_k(n_a[:, None], c_a[:, None], ks_a[None, :])
    return _bootstrap(np.asarray(per_prompt).reshape(c_a.size, ks_a.size), ks_a, n_boot, ci, seed)


def best_at_k_curve(
    rewards: Numbers,
    group: GroupLabels = None,
    ks: str | Numbers | None = None,
    *,
    n_boot: int = 1000,
    ci: float = 0.95,
    seed: int = 0,
) -> Curve:
    """Mean unbiased best@k over prompts for each ``k``, with a bootstrap CI over prompts.

    ``rewards``/``group`` as in :func:`best_at_k`; ``ks`` bounded by the smallest group.
    """
    n_boot, ci, seed = curve_options("best_at_k_curve", n_boot, ci, seed)
    flat, groups, _ = prepare(rewards, group)
    ks_a = resolve_ks(ks, int(groups.sizes.min()))
    s = groups.sort(flat)  # one sort serves every k
    # loop over k only; each k is vectorised over all samples and prompts
    cols = [_best_at_k_sorted(groups, s, int(k)) for k in ks_a]
    per_prompt = torch.stack(cols, 1).cpu().numpy()
    return _bootstrap(per_prompt, ks_a, n_boot, ci, seed)


def gradient_allocation(
    advantages: Numbers,
    rewards: Numbers,
    group: GroupLabels = None,
    tokens: Numbers | None = None,
    bins: Sequence[float] = PASS_RATE_BINS,
    pass_rate: Numbers | None = None,
) -> Allocation:
    """Share of the gradient magnitude ``sum |A_i| x tokens_i`` by prompt pass rate.

    The pass rate of a prompt is the mean reward of its group (the empirical pass rate on
    0/1 rewards), or ``pass_rate[g]`` when given: one value per group, in the groups' order
    (e.g. measured on other samples of the prompt, so that the bin does not depend on the
    group the advantages come from). Rewards must lie in [0, 1] and every pass rate within
    the bins: a
    ``ValueError`` names the first one outside, never a silent clamp into an end bin. Bins
    are left-closed, the last one closed on both ends (``[0,.2), [.2,.5), [.5,.7), [.7,.9),
    [.9,1]`` by default, SoftmaxGRPO Table 3).

    Returns ``{"bins": [labels], "share": [...], "prompts": [...], "samples": [...]}``;
    shares sum to 1 unless every advantage is 0 (then all shares are 0).
    """
    flat_r, groups, _ = prepare(rewards, group)
    flat_a, _, _ = prepare(advantages, None)
    flat_a = flat_a.reshape(-1)
    if flat_a.shape != flat_r.shape:
        raise ValueError(
            f"advantages have {flat_a.numel()} entries but rewards have {flat_r.numel()}"
        )
    weight = flat_a.abs()
    if tokens is not None:
        t, _, _ = prepare(tokens, None)
        t = t.reshape(-1)
        if t.shape != flat_r.shape:
            raise ValueError(f"tokens have {t.numel()} entries but rewards have {flat_r.numel()}")
        if bool((t < 0).any()):
            raise ValueError("tokens must be non-negative")
        weight = weight * t
    edges = np.asarray(bins, dtype=np.float64)
    if edges.ndim != 1 or edges.size < 2 or not np.all(np.diff(edges) > 0):
        raise ValueError(f"bins must be an increasing sequence of >= 2 edges, got {bins!r}")
    outside = torch.nonzero((flat_r < 0) | (flat_r > 1))
    if outside.numel():
        i = int(outside[0])
        raise ValueError(
            f"gradient_allocation: reward at index {i} is {float(flat_r[i])!r}; rewards must "
            "lie in [0, 1] (pass rates); rescale graded rewards first"
        )
    rate = groups.mean(flat_r).numpy()
    if pass_rate is not None:
        given, _, _ = prepare(pass_rate, None)
        if given.numel() != rate.size:
            raise ValueError(f"gradient_allocation: pass_rate has {given.numel()} entries but "
                             f"there are {rate.size} groups")
        rate = given.reshape(-1).numpy()
    off = np.flatnonzero((rate < edges[0]) | (rate > edges[-1]))
    if off.size:
        g = int(off[0])
        raise ValueError(
            f"gradient_allocation: group {groups.label(g)!r} has pass rate {rate[g]:g}, outside "
            f"the bins [{edges[0]:g}, {edges[-1]:g}]"
        )
    b = np.clip(np.searchsorted(edges, rate, side="right") - 1, 0, edges.size - 2)
    nbins = edges.size - 1
    per_group = groups.sum(weight).numpy()
    mass = np.bincount(b, weights=per_group, minlength=nbins)
    total = mass.sum()
    share = mass / total if total > 0 else np.zeros(nbins)
    labels = [
        f"[{lo:g},{hi:g}{']' if i == nbins - 1 else ')'}"
        for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:], strict=True))
    ]
    return {
        "bins": labels,
        "share": share.tolist(),
        "prompts": np.bincount(b, minlength=nbins).tolist(),
        "samples": np.bincount(b, weights=groups.sizes.numpy(), minlength=nbins)
        .astype(int)
        .tolist(),
    }
