"""Ragged-group primitives on torch tensors.

Every estimator and metric in bestk works on a flat batch of ``B`` samples that belong to
``G`` groups (one group per prompt). Groups may have different sizes, their members need not
be contiguous, and their labels may be integers or arbitrary hashables (verl passes uid
strings). :class:`Groups` maps such labels to dense group indices ``0..G-1`` once, and offers
the segment-wise reductions, sorts and scans the estimators are written with.

No operation here loops in Python over groups or samples: labels are factorised with
``torch.unique`` / ``numpy.unique``, reductions use ``index_add_`` / ``scatter_reduce_``, and
sorts are a pair of stable ``argsort`` calls (or one row-wise sort when the batch is a
``(G, N)`` block of equal, contiguous groups, the common case).

Conventions
-----------
* All reductions return one value per group, in group-index order (``Groups.labels[g]`` is
  the label of group ``g``).
* Sorted layouts (:meth:`Groups.sort`) put each group's members in one contiguous segment,
  sorted within the segment; :class:`SortedGroups` carries the permutation and, per sorted
  position, its rank in the group, its group's size and its segment start.
* Arithmetic is done in the dtype of the input; the estimators call these with float64.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import torch

__all__ = ["Groups", "SortedGroups", "make_groups"]


@dataclass(frozen=True)
class SortedGroups:
    """A batch laid out group by group, each group sorted by value.

    Attributes
    ----------
    perm:
        ``(B,)`` long; sorted position ``p`` holds original sample ``perm[p]``.
    rank:
        ``(B,)`` long; 0-based rank of sorted position ``p`` inside its group.
    size:
        ``(B,)`` long; size of the group of sorted position ``p``.
    start:
        ``(B,)`` long; sorted position where that group's segment starts.
    block:
        ``(G, N)`` shape when every group is a contiguous block of the same size ``N``
        (then the sorted layout is a plain row-major ``(G, N)`` matrix), else ``None``.
    """

    perm: torch.Tensor
    rank: torch.Tensor
    size: torch.Tensor
    start: torch.Tensor
    block: tuple[int, int] | None

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """Values of ``x`` (original order) in sorted order."""
        return x[self.perm]

    def scatter(self, y: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`gather`: values given in sorted order, back in original order."""
        out = torch.empty_like(y)
        out[self.perm] = y
        return out

    def cumsum(self, y: torch.Tensor, *, reverse: bool = False, exclusive: bool = False):
        """Cumulative sum of ``y`` (given in sorted order) within each group segment.

        ``reverse=True`` sums from the end of the segment (suffix sums);
        ``exclusive=True`` leaves out the element itself (so the first element of a
        forward scan, or the last of a reverse scan, gets 0).
        """
        if self.block is not None:
            m = y.view(self.block)
            c = m.flip(1).cumsum(1).flip(1) if reverse else m.cumsum(1)
            if exclusive:
                c = c - m
            return c.reshape(-1)
        # Ragged: one global scan, minus the running total at the segment start.
        c = torch.cumsum(y, 0)
        before = (c - y)[self.start]  # total of everything before this segment
        inclusive = c - before
        if not reverse:
            return inclusive - y if exclusive else inclusive
        end = self.start + self.size - 1
        seg_total = inclusive[end]
        suffix = seg_total - inclusive + y
        return suffix - y if exclusive else suffix

    def shift(self, y: torch.Tensor, offset: int, fill: float = 0.0) -> torch.Tensor:
        """``y[p + offset]`` within the same segment (sorted order), ``fill`` past its ends."""
        pos = torch.arange(y.shape[0], device=y.device)
        target_rank = self.rank + offset
        inside = (target_rank >= 0) & (target_rank < self.size)
        src = torch.where(inside, pos + offset, pos)
        return torch.where(inside, y[src], torch.full_like(y, fill))


class Groups:
    """Factorised group labels of a flat batch.

    Build with :func:`make_groups`. ``index[i]`` is the group of sample ``i`` and
    ``labels[g]`` the original label of group ``g``.
    """

    def __init__(
        self,
        index: torch.Tensor,
        num_groups: int,
        labels: np.ndarray,
        block: tuple[int, int] | None = None,
    ):
        self.index = index
        self.num_groups = int(num_groups)
        self.labels = labels
        self._block = block

    def __len__(self) -> int:
        return int(self.index.shape[0])

    def __repr__(self) -> str:
        return f"Groups(B={len(self)}, G={self.num_groups}, uniform_block={self._block})"

    def label(self, g: int) -> Any:
        """The original label of group ``g`` as a plain Python object (for messages)."""
        v = self.labels[g]
        return v.item() if isinstance(v, np.generic) else v

    # -- sizes -----------------------------------------------------------------------------
    @cached_property
    def sizes(self) -> torch.Tensor:
        """``(G,)`` number of samples in each group."""
        if self._block is not None:
            return torch.full((self.num_groups,), self._block[1], device=self.index.device)
        return torch.bincount(self.index, minlength=self.num_groups)

    @cached_property
    def sample_sizes(self) -> torch.Tensor:
        """``(B,)`` size of the group each sample belongs to."""
        return self.sizes[self.index]

    @property
    def is_uniform_block(self) -> bool:
        """True when groups are contiguous blocks of one size (a ``(G, N)`` matrix)."""
        return self._block is not None

    # -- reductions ------------------------------------------------------------------------
    def sum(self, x: torch.Tensor) -> torch.Tensor:
        """``(G,)`` per-group sum."""
        out = torch.zeros(self.num_groups, dtype=x.dtype, device=x.device)
        return out.index_add_(0, self.index, x)

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """``(G,)`` per-group mean."""
        return self.sum(x) / self.sizes.to(x.dtype)

    def std(self, x: torch.Tensor, ddof: int = 1) -> torch.Tensor:
        """``(G,)`` per-group standard deviation with ``n - ddof`` in the denominator.

        Computed from deviations about the group mean (two-pass, no cancellation). Groups with
        ``n <= ddof`` get 0.
        """
        dev = x - self.mean(x)[self.index]
        denom = (self.sizes - ddof).clamp_min(1).to(x.dtype)
        var = self.sum(dev * dev) / denom
        var = torch.where(self.sizes > ddof, var, torch.zeros_like(var))
        return var.sqrt()

    def max(self, x: torch.Tensor) -> torch.Tensor:
        """``(G,)`` per-group maximum."""
        out = torch.full((self.num_groups,), -torch.inf, dtype=x.dtype, device=x.device)
        return out.scatter_reduce_(0, self.index, x, reduce="amax", include_self=True)

    def loo_max(self, x: torch.Tensor) -> torch.Tensor:
        """``(B,)`` leave-one-out maximum ``max_{j != i, j in group(i)} x_j``.

        Equals the group max except for a unique maximiser, which gets the second largest
        value. Samples alone in their group get ``-inf``.
        """
        gmax = self.max(x)
        is_top = x == gmax[self.index]
        n_top = self.sum(is_top.to(x.dtype))
        second = self.max(torch.where(is_top, torch.full_like(x, -torch.inf), x))
        unique_top = is_top & (n_top[self.index] == 1)
        return torch.where(unique_top, second[self.index], gmax[self.index])

    # -- sorting ---------------------------------------------------------------------------
    def sort(self, x: torch.Tensor, descending: bool = False) -> SortedGroups:
        """Sort ``x`` within each group; see :class:`SortedGroups` for the layout.

        Ties keep their original relative order (stable), but every estimator built on this
        gives tied values identical results whatever their order.
        """
        B = x.shape[0]
        dev = x.device
        if self._block is not None:
            G, N = self._block
            _, inner = torch.sort(x.view(G, N), dim=1, descending=descending, stable=True)
            base = torch.arange(G, device=dev).unsqueeze(1) * N
            perm = (inner + base).reshape(-1)
            rank = torch.arange(N, device=dev).repeat(G)
            size = torch.full((B,), N, device=dev, dtype=torch.long)
            start = base.expand(G, N).reshape(-1)
            return SortedGroups(perm, rank, size, start, (G, N))
        by_value = torch.argsort(x, descending=descending, stable=True)
        by_group = torch.argsort(self.index[by_value], stable=True)
        perm = by_value[by_group]
        sizes = self.sizes
        starts = torch.cumsum(sizes, 0) - sizes
        gid = self.index[perm]
        start = starts[gid]
        rank = torch.arange(B, device=dev) - start
        return SortedGroups(perm, rank, sizes[gid], start, None)


_hash = np.frompyfunc(hash, 1, 1)


def _factorize_hashable(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Factorise string / object labels by their hash, exactly.

    Hashing is one C-level pass; ``numpy.unique`` then runs on int64 instead of comparing
    Python objects. Every sample is checked against its group's representative, so a hash
    collision between different labels cannot merge groups (it falls back to sorting the
    labels). Groups are returned in sorted label order, as ``numpy.unique`` would give.
    """
    h = _hash(arr).astype(np.int64)
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    reps = arr[first]
    if not bool(np.all(arr == reps[inverse])):  # a hash collision between different labels
        uniq, inverse = np.unique(arr, return_inverse=True)
        return inverse.reshape(-1), uniq
    order = np.argsort(reps, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank[inverse], reps[order]


def _factorize_labels(group: Any, n: int, device: torch.device) -> tuple[torch.Tensor, np.ndarray]:
    """Map arbitrary labels to dense ids ``0..G-1`` (sorted label order) without Python loops."""
    if isinstance(group, torch.Tensor):
        if group.ndim != 1:
            raise ValueError(f"group must be 1-D, got a tensor of shape {tuple(group.shape)}")
        if group.is_floating_point() or group.is_complex():
            if not torch.isfinite(group).all():
                bad = int(torch.nonzero(~torch.isfinite(group))[0])
                raise ValueError(f"group label at index {bad} is not finite")
        uniq, inverse = torch.unique(group, return_inverse=True)
        return inverse.to(device=device, dtype=torch.long), uniq.cpu().numpy()
    if isinstance(group, np.ndarray):
        arr = group
    elif isinstance(group, Sequence) and not isinstance(group, (str, bytes)):
        arr = np.asarray(group) if len(group) else np.zeros(0, dtype=np.int64)
        if arr.ndim != 1:  # e.g. tuples as labels -> object array of tuples
            arr = np.empty(len(group), dtype=object)
            arr[:] = list(group)
    else:
        raise ValueError(
            "group must be a 1-D sequence, numpy array or tensor of labels, "
            f"got {type(group).__name__}"
        )
    if arr.ndim != 1:
        raise ValueError(f"group must be 1-D, got shape {arr.shape}")
    if arr.dtype.kind in "iub":
        t = torch.from_numpy(np.ascontiguousarray(arr).astype(np.int64, copy=False))
        uniq, inverse = torch.unique(t, return_inverse=True)
        return inverse.to(device), uniq.numpy()
    if arr.dtype.kind == "f":
        if not np.isfinite(arr).all():
            bad = int(np.flatnonzero(~np.isfinite(arr))[0])
            raise ValueError(f"group label at index {bad} is not finite")
    try:
        if arr.dtype.kind in "USO":
            inverse, uniq = _factorize_hashable(arr)
        else:
            uniq, inverse = np.unique(arr, return_inverse=True)
    except TypeError:
        # Unorderable mixed labels: fall back to first-appearance codes via a dict.
        codes: dict[Any, int] = {}
        try:
            inverse = np.fromiter(
                (codes.setdefault(v, len(codes)) for v in arr), np.int64, len(arr)
            )
        except TypeError as e:
            raise ValueError(f"group labels must be hashable: {e}") from None
        uniq = np.empty(len(codes), dtype=object)
        uniq[:] = list(codes)
    inverse = torch.from_numpy(np.asarray(inverse, dtype=np.int64).reshape(-1))
    return inverse.to(device), uniq


def _detect_block(index: torch.Tensor, num_groups: int) -> tuple[int, int] | None:
    """``(G, N)`` if the groups are contiguous blocks of equal size ``N``, else ``None``."""
    B = index.shape[0]
    if num_groups == 0 or B % num_groups:
        return None
    N = B // num_groups
    rows = index.view(num_groups, N)
    if bool((rows == rows[:, :1]).all()):
        # Equal sizes follow from contiguity + G distinct labels in G blocks.
        return (num_groups, N)
    return None


def make_groups(group: Any, n: int, device: torch.device | str | None = None) -> Groups:
    """Build :class:`Groups` for a batch of ``n`` samples.

    Parameters
    ----------
    group:
        ``None`` (one group), or a length-``n`` 1-D sequence / numpy array / tensor of labels:
        integers or any hashable (strings such as verl's ``uid``).
    n:
        Batch size.
    device:
        Where the index tensors live (the rewards' device).
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    if group is None:
        index = torch.zeros(n, dtype=torch.long, device=device)
        return Groups(index, 1 if n else 0, np.zeros(1, dtype=np.int64), (1, n) if n else None)
    length = group.shape[0] if hasattr(group, "shape") and len(group.shape) else None
    if length is None:
        try:
            length = len(group)
        except TypeError:
            raise ValueError(
                f"group must be a 1-D sequence of labels, got {type(group).__name__}"
            ) from None
    if length != n:
        raise ValueError(f"group has {length} labels but rewards have {n} samples")
    index, labels = _factorize_labels(group, n, device)
    num_groups = int(labels.shape[0])
    return Groups(index, num_groups, labels, _detect_block(index, num_groups))


def block_groups(num_groups: int, size: int, device: torch.device | str | None = None) -> Groups:
    """Groups for a ``(G, N)`` reward matrix flattened row-major: row ``g`` is group ``g``."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    index = torch.arange(num_groups, device=device).repeat_interleave(size)
    return Groups(index, num_groups, np.arange(num_groups), (num_groups, size))
