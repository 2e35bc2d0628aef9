"""The sorted layouts of a batch: padded ``(rows, width)`` matrices, one group per row.

:class:`Rows` is one such matrix with the row-wise operations the estimators are written with
(scans, shifts, gathers, tie canonicalisation, exact power-of-two rescaling);
:class:`SortedGroups` is a whole batch sorted group by group, as one or a few :class:`Rows`
(a view for block batches; ragged groups padded by size class). :class:`Layout` says how a
batch's groups sit in it. The guarantees (segment-local, ties, range) are the package's
(:mod:`bestk.groups`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

#: Half the largest float64: intermediate values are kept below it.
HALF_MAX = float(np.finfo(np.float64).max) / 2
_LOG2_HALF_MAX = math.log2(HALF_MAX)


def pow2_divisor(amax: torch.Tensor, n: torch.Tensor, factor: float) -> torch.Tensor:
    """Power-of-two divisors ``2^e``, ``e >= 0``, bringing ``factor * n * amax`` below half the
    float64 range: ``exp2(max(0, ceil(log2(amax) + log2(factor n) - log2(HALF_MAX))))``
    elementwise (1 where ``amax`` is 0). ``amax`` is a group's largest ``|value|`` and ``n``
    its size, in the same dtype (used by :meth:`Rows.pow2_scale` and
    :meth:`Groups.pow2_scale`)."""
    need = torch.log2(amax) + torch.log2(factor * n) - _LOG2_HALF_MAX
    return torch.exp2(torch.ceil(torch.nan_to_num(need, neginf=0.0)).clamp_min(0))


class Rows:
    """One padded matrix of a sorted layout: ``R`` groups, one per row, each sorted
    (ascending; descending for ``Groups.sort(descending=True)``) in its first ``size`` cells;
    the cells after them are padding.

    Estimators write their per-group math on these ``(R, W)`` matrices (row-wise scans,
    shifts and gathers: segment-local by construction). Padding cells hold ``+inf`` in
    :attr:`values` (``-inf`` for descending sorts) and arbitrary values in derived matrices;
    forward scans never read them, :meth:`rcumsum` zeroes them first.

    Attributes
    ----------
    values: ``(R, W)`` the sorted values.
    size: ``(R, 1)`` long group sizes (a Python ``int`` when every row is full).
    """

    def __init__(self, values: torch.Tensor, size: torch.Tensor | int):
        self.values = values
        self.size = size
        self.uniform = isinstance(size, int)

    @property
    def shape(self) -> tuple[int, int]:
        r, w = self.values.shape
        return r, w

    @cached_property
    def n(self) -> torch.Tensor | float:
        """``(R, 1)`` group sizes in the values' dtype (a float for full rows)."""
        return float(self.size) if isinstance(self.size, int) else self.size.to(self.values.dtype)

    @cached_property
    def _columns(self) -> dict[str, torch.Tensor]:
        if self.uniform:  # constants of (N, dtype, device), built once per process
            return _uniform_columns(self.size, self.values.dtype, self.values.device)
        return _columns_of(self.shape[1], self.values.dtype, self.values.device, self.size)

    @cached_property
    def col(self) -> torch.Tensor:
        """``(1, W)`` long: the 0-based rank of each column."""
        return self._columns["col"]

    @cached_property
    def rank(self) -> torch.Tensor:
        """``(1, W)`` the 1-based rank ``i`` of each column, in the values' dtype."""
        return self._columns["rank"]

    @cached_property
    def n_over_remaining(self) -> torch.Tensor:
        """``N / (N - i + 1)`` at each column, in the values' dtype."""
        return self._columns["n_over_remaining"]

    @cached_property
    def valid(self) -> torch.Tensor | None:
        """``(R, W)`` bool: the cell holds a group member (``None`` when all do)."""
        return None if self.uniform else self.col < self.size

    @cached_property
    def is_last(self) -> torch.Tensor:
        """``(R, W)`` (or ``(1, W)``) bool: the cell is its group's last (largest) member."""
        return self.col == self.size - 1

    def prev(self, y: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
        """``y`` of the previous cell in the row (``fill`` in column 0)."""
        out = torch.empty_like(y)
        out[:, :1] = fill
        out[:, 1:] = y[:, :-1]
        return out

    def next(self, y: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
        """``y`` of the next cell in the row, ``fill`` after each group's last member."""
        out = torch.empty_like(y)
        out[:, -1:] = fill
        out[:, :-1] = y[:, 1:]
        if not self.uniform:
            out = torch.where(self.is_last, torch.full_like(out, fill), out)
        return out

    def cumsum(self, y: torch.Tensor, *, exclusive: bool = False) -> torch.Tensor:
        """Prefix sums along each row (sequential on CPU); ``exclusive`` leaves out the cell
        itself by shifting, not by subtracting."""
        return (self.prev(y) if exclusive else y).cumsum(1)

    def rcumsum(self, y: torch.Tensor, *, exclusive: bool = False) -> torch.Tensor:
        """Suffix sums along each row over the group's members only."""
        if self.valid is not None:
            y = torch.where(self.valid, y, torch.zeros_like(y))
        if exclusive:
            y = self.next(y)
        return y.flip(1).cumsum(1).flip(1)

    def at(self, y: torch.Tensor, offset_from_end: int = 0) -> torch.Tensor:
        """``(R, 1)``: ``y`` at column ``size - 1 - offset_from_end`` of each row (clamped to
        column 0)."""
        if isinstance(self.size, int):
            j = max(self.size - 1 - offset_from_end, 0)
            return y[:, j : j + 1]
        return torch.gather(y, 1, (self.size - 1 - offset_from_end).clamp_min(0))

    def pow2_scale(self, factor: float = 4.0) -> torch.Tensor | None:
        """``(R, 1)`` power-of-two divisors keeping ``factor * n * max|values|`` of each row
        below half the float64 range, or ``None`` when no row needs one (the common case).

        Reads only the first and last member of each row (the extremes of a sorted row). See
        :meth:`Groups.pow2_scale`; dividing a row by its divisor is exact.
        """
        v = self.values
        first, last = v[:, :1], self.at(v)  # the extremes of each (sorted) row
        # (ascending rows: the smallest first, the largest last; descending: the reverse)
        lo, hi = torch.aminmax(torch.cat([first, last], 1))
        if max(-float(lo), float(hi)) * factor * self.shape[1] <= HALF_MAX:
            return None
        amax = torch.maximum(first.abs(), last.abs())
        return pow2_divisor(amax, torch.as_tensor(self.n, dtype=v.dtype), factor)

    def scaled(self, scale: torch.Tensor) -> Rows:
        """The same rows with their values divided by ``scale`` (``(R, 1)``)."""
        return Rows(self.values / scale, self.size)

    def apply_descaled(self, fn: Callable[[Rows], torch.Tensor], factor: float = 4.0):
        """``fn(rows)`` computed on the rows divided by their :meth:`pow2_scale` divisors
        (when some row needs one) and multiplied back in place, so ``fn`` keeps
        ``factor * n * max|values|`` inside the float64 range; ``fn(self)`` otherwise.

        ``fn``'s result must be a new tensor (it is scaled in place), ``(R, W)`` or
        broadcastable against the ``(R, 1)`` divisors.
        """
        scale = self.pow2_scale(factor)
        if scale is None:
            return fn(self)
        return fn(self.scaled(scale)).mul_(scale)

    def zero_singletons(self, a: torch.Tensor) -> torch.Tensor:
        """``a`` (``(R, W)``) with the rows of groups of size 1 set to 0."""
        if isinstance(self.size, int):
            return a if self.size > 1 else torch.zeros_like(a)
        return torch.where(self.size > 1, a, torch.zeros_like(a))

    def total(self, y: torch.Tensor) -> torch.Tensor:
        """``(R,)`` sum of ``y`` over each group's members, left to right."""
        return self.at(y.cumsum(1)).reshape(-1)

    def tie_canonical(self, y: torch.Tensor) -> torch.Tensor:
        """``y`` with each run of tied values given the value at the run's first cell, so
        tied members get bit-identical results whatever the sort left in between."""
        v = self.values
        tied = v[:, 1:] == v[:, :-1]  # padding cells tie only with padding
        return self.canonical_runs(y, tied)

    def tied_prefix_sums(self, t: torch.Tensor, tied: Callable[[], torch.Tensor]):
        """In-place row prefix sums of ``t`` whose increments are exactly 0 inside every run
        of tied values (``tied()`` gives the ``(R, W - 1)`` tie mask when needed).

        On CPU torch's ``cumsum`` adds left to right, so adding the exact zeros keeps every
        member of a tie run bit-identical and nothing else is done. Other devices may scan
        in a tree, so there the runs are canonicalised (:meth:`canonical_runs`).
        """
        c = t.cumsum_(1)
        return c if _sequential_scans(c.device) else self.canonical_runs(c, tied())

    def canonical_runs(self, y: torch.Tensor, tied: torch.Tensor) -> torch.Tensor:
        """:meth:`tie_canonical` given ``tied[:, j] = values[:, j + 1] == values[:, j]``."""
        if not bool(tied.any()):
            return y
        new_run = torch.ones_like(y, dtype=torch.bool)
        new_run[:, 1:] = ~tied
        first = torch.cummax(torch.where(new_run, self.col, torch.zeros_like(self.col)), 1)
        return torch.gather(y, 1, first.values)


@functools.lru_cache(maxsize=64)
def _uniform_columns(n: int, dtype: torch.dtype, device: torch.device) -> dict[str, torch.Tensor]:
    return _columns_of(n, dtype, device, n)


def _columns_of(width, dtype, device, size) -> dict[str, torch.Tensor]:
    """Per-column constants of a padded ``(R, width)`` layout with row sizes ``size``:
    ``col`` (0-based), ``rank`` (1-based, in ``dtype``) and ``n_over_remaining =
    size / (size - col)`` (in ``dtype``)."""
    col = torch.arange(width, device=device).unsqueeze(0)
    remaining = (size - col).to(dtype)
    n = torch.as_tensor(size, device=device).to(dtype)
    return {"col": col, "rank": (col + 1).to(dtype), "n_over_remaining": n / remaining}


@dataclass(frozen=True)
class Bucket:
    """Sorted positions ``lo..hi``, laid out as the padded matrix ``rows``; ``cells`` maps
    each position to its flat cell (``row * width + rank``), ``None`` without padding."""

    lo: int
    hi: int
    rows: Rows
    cells: torch.Tensor | None

    @property
    def padded_cells(self) -> torch.Tensor:
        """``cells`` of a bucket of a ragged layout (a block layout's has none)."""
        if self.cells is None:
            raise ValueError("a block layout's bucket has no cell map")
        return self.cells


class SortedGroups:
    """A batch laid out group by group, each group sorted by value.

    Built by :meth:`Groups.sort`. The layout is one or a few padded matrices (:class:`Rows`,
    one group per row); estimators compute on those with :meth:`map_rows`,
    :meth:`scatter_rows` and :meth:`row_totals`. The flat views below are kept for user
    code.

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
        ``(R, N)`` when every group is a contiguous block of the same size ``N`` (then the
        sorted layout is a plain row-major ``(R, N)`` matrix, one group per row), else
        ``None``.
    values:
        ``(B,)`` the sorted values themselves (``x[perm]``).
    seg_group:
        ``(S,)`` long; the group index of each segment (row), in layout order.
    """

    def __init__(
        self,
        buckets: tuple[Bucket, ...],
        seg_group: torch.Tensor | None,
        block: tuple[int, int] | None,
        perm: torch.Tensor | None = None,
        cols: torch.Tensor | None = None,
    ):
        self.buckets = buckets
        self._seg_group = seg_group  # None: row r is group r
        self.block = block
        self._perm = perm
        self._cols = cols  # block: (R, N) column of each sorted cell in its row

    @cached_property
    def seg_group(self) -> torch.Tensor:
        if self._seg_group is not None:
            return self._seg_group
        rows = sum(b.rows.shape[0] for b in self.buckets)
        return torch.arange(rows, device=self.buckets[0].rows.values.device)

    # -- padded-matrix interface -----------------------------------------------------------
    def map_rows(self, fn: Callable[[Rows], torch.Tensor]) -> torch.Tensor:
        """``(B,)`` in sorted order: ``fn`` applied to each padded matrix, members kept."""
        if self.block is not None:
            return fn(self.buckets[0].rows).reshape(-1)
        parts = [torch.index_select(fn(b.rows).reshape(-1), 0, b.padded_cells)
                 for b in self.buckets]
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def scatter_rows(self, fn: Callable[[Rows], torch.Tensor], *, consume: bool = False):
        """``(B,)`` in the original sample order: ``fn`` applied to each padded matrix.

        ``consume=True`` writes the result over the sorted values of a block layout instead
        of a new buffer (one allocation less); this layout must not be used afterwards, and
        ``fn``'s result must not be a view of the values.
        """
        if self._cols is not None:
            rows = self.buckets[0].rows
            y = fn(rows)
            out = rows.values if consume and y.dtype == rows.values.dtype else torch.empty_like(y)
            return out.scatter_(1, self._cols, y).view(-1)
        return self.scatter(self.map_rows(fn))

    def row_totals(self, fn: Callable[[Rows], torch.Tensor], num_groups: int) -> torch.Tensor:
        """``(G,)`` per-group sums of ``fn(rows)`` over each group's members, summed left to
        right in sorted order (a function of the group's sorted values alone)."""
        per_row = [b.rows.total(fn(b.rows)) for b in self.buckets]
        t = per_row[0] if len(per_row) == 1 else torch.cat(per_row)
        out = t.new_zeros(num_groups)
        out[self.seg_group] = t
        return out

    # -- flat views ------------------------------------------------------------------------
    @cached_property
    def values(self) -> torch.Tensor:
        return self.map_rows(lambda rows: rows.values)

    @cached_property
    def perm(self) -> torch.Tensor:
        if self._perm is not None:
            return self._perm
        assert self.block is not None and self._cols is not None  # no perm: a block layout
        R, N = self.block
        base = (torch.arange(R, device=self._cols.device) * N).unsqueeze(1)
        return (self._cols + base).reshape(-1)

    @cached_property
    def rank(self) -> torch.Tensor:
        return self.map_rows(lambda rows: rows.col.expand(rows.shape))

    @cached_property
    def size(self) -> torch.Tensor:
        def sizes(rows: Rows) -> torch.Tensor:
            if isinstance(rows.size, int):
                return torch.full(rows.shape, rows.size, device=rows.values.device)
            return rows.size.expand(rows.shape)

        return self.map_rows(sizes)

    @cached_property
    def start(self) -> torch.Tensor:
        return torch.arange(self.rank.shape[0], device=self.rank.device) - self.rank

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """Values of ``x`` (original order) in sorted order."""
        return x[self.perm]

    def scatter(self, y: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`gather`: values given in sorted order, back in original order."""
        if self._cols is not None:
            assert self.block is not None  # cols: a block layout
            R, N = self.block
            return torch.empty_like(y).view(R, N).scatter_(1, self._cols, y.view(R, N)).view(-1)
        return torch.empty_like(y).scatter_(0, self.perm, y)

    def _on_rows(self, y: torch.Tensor, fn: Callable[[Rows, torch.Tensor], torch.Tensor]):
        """Apply ``fn(rows, matrix)`` to a flat sorted-order ``y`` laid out like the values
        (0 in padding cells)."""
        if self.block is not None:
            return fn(self.buckets[0].rows, y.view(self.block)).reshape(-1)
        out = torch.empty_like(y)
        for b in self.buckets:
            R, W = b.rows.shape
            buf = y.new_zeros(R * W)
            buf[b.cells] = y[b.lo : b.hi]
            out[b.lo : b.hi] = fn(b.rows, buf.view(R, W)).reshape(-1)[b.cells]
        return out

    def cumsum(self, y: torch.Tensor, *, reverse: bool = False, exclusive: bool = False):
        """Cumulative sum of ``y`` (given in sorted order) within each group segment.

        ``reverse=True`` sums from the end of the segment (suffix sums);
        ``exclusive=True`` leaves out the element itself (so the first element of a
        forward scan, or the last of a reverse scan, gets 0) by shifting, not subtracting.
        Each segment is scanned on its own, so its result does not depend on the others.
        """
        if reverse:
            return self._on_rows(y, lambda rows, m: rows.rcumsum(m, exclusive=exclusive))
        return self._on_rows(y, lambda rows, m: rows.cumsum(m, exclusive=exclusive))

    def shift(self, y: torch.Tensor, offset: int, fill: float = 0.0) -> torch.Tensor:
        """``y[p + offset]`` within the same segment (sorted order), ``fill`` past its ends."""
        if offset == 0:
            return y
        pos = torch.arange(y.shape[0], device=y.device)
        target_rank = self.rank + offset
        inside = (target_rank >= 0) & (target_rank < self.size)
        src = torch.where(inside, pos + offset, pos)
        return torch.where(inside, y[src], torch.full_like(y, fill))

    def tie_canonical(self, y: torch.Tensor) -> torch.Tensor:
        """``y`` (sorted order) with every run of tied values given the value at the run's
        first position: tied samples get bit-identical results whatever their order."""
        return self._on_rows(y, lambda rows, m: rows.tie_canonical(m))


def _sequential_scans(device: torch.device) -> bool:
    """Whether ``cumsum`` adds left to right on ``device`` (torch's CPU kernel does)."""
    return device.type == "cpu"


def _numpy_sorts(device: torch.device) -> bool:
    """Whether to sort with numpy (CPU tensors, shared with numpy without a copy)."""
    return device.type == "cpu"


def argsort_rows(m: torch.Tensor) -> torch.Tensor:
    """Row-wise ascending argsort of a 2-D tensor (tie order unspecified).

    On CPU numpy's SIMD quicksort is several times faster than ``torch.sort`` on short rows;
    the tensor is shared with numpy, not copied.
    """
    if _numpy_sorts(m.device):
        return torch.from_numpy(np.argsort(m.numpy(), axis=1))
    return torch.sort(m, dim=1).indices


@dataclass(frozen=True)
class Layout:
    """How a batch's groups sit in it.

    ``order`` lists the samples with each group's members contiguous (``None``: identity),
    ``seg_group`` the group of each such segment (``None``: segment ``s`` is group ``s``) and
    ``seg_size`` their sizes. ``block`` is ``(G, N)`` when ``order`` is the identity and every
    segment has size ``N``.
    """

    order: torch.Tensor | None
    seg_group: torch.Tensor | None
    seg_size: torch.Tensor
    block: tuple[int, int] | None
