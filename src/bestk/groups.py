"""Ragged-group primitives on torch tensors.

Every estimator and metric in bestk works on a flat batch of ``B`` samples that belong to
``G`` groups (one group per prompt). Groups may have different sizes, their members need not
be contiguous, and their labels may be integers or arbitrary hashables (verl passes uid
strings). :class:`Groups` maps such labels to dense group indices ``0..G-1`` once, and offers
the segment-wise reductions, sorts and scans the estimators are written with.

No operation here loops in Python over groups or samples: labels are factorised with one
``argsort`` (integers, floats, numpy strings) or one C-level hashing pass (Python objects such
as uid strings), and a batch whose groups are contiguous blocks of one size (the common
trainer layout) is recognised in ``O(B)`` without any sort.

Guarantees
----------
* **Segment-local.** Every reduction, sort and scan of a group reads only that group's values,
  in an order fixed by the group alone: a group's result does not depend on what else is in the
  batch. On CPU (where torch's ``cumsum`` and ``index_add_`` run sequentially) this holds bit
  for bit. Scans run on a ``(rows, width)`` matrix with one group per row (a view for block
  batches; ragged groups are padded into a few such matrices, at most twice the batch in
  memory), never as a global prefix sum with subtractions.
* **Ties.** :meth:`SortedGroups.tie_canonical` gives every run of tied values the value
  computed at one canonical position of the run, so estimators built on sorts return
  bit-identical results for tied samples, whatever order the sort left them in.
* **Range.** :meth:`Groups.mean`, :meth:`Groups.std` and :meth:`Groups.standardize` work
  about the group maximum and rescale by the group's own spread, so they neither overflow nor
  lose constant groups to rounding (a constant group has deviation exactly 0);
  :meth:`Groups.pow2_scale` gives the exact power-of-two rescaling estimators use to keep
  intermediate values inside the float64 range.

Conventions
-----------
* All reductions return one value per group, in group-index order (``Groups.labels[g]`` is
  the label of group ``g``). Labels are in sorted order when they can be ordered (as
  ``numpy.unique`` gives), else in order of first appearance.
* Labels are compared as Python values (as dict keys would be): ``1``, ``1.0`` and ``True``
  are one label; ``1`` and ``"1"``, ``b"a"`` and ``"a"``, ``"a"`` and ``"a\\x00"`` are three
  pairs of different labels. (A Python list is never coerced to a numpy string array, which
  would merge such pairs.)
* Sorted layouts (:meth:`Groups.sort`) put each group's members in one contiguous segment,
  sorted within the segment; :class:`SortedGroups` carries the permutation and, per sorted
  position, its rank in the group, its group's size and its segment start. The order of tied
  values inside a segment is unspecified; nothing built on it depends on it.
* Arithmetic is done in the dtype of the input; the estimators call these with float64.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeAlias

import numpy as np
import torch

__all__ = ["Groups", "SortedGroups", "GroupLabels", "make_groups", "block_groups"]

#: Group labels as the public functions take them: ``None`` (one group), or a 1-D sequence,
#: numpy array or tensor of hashable labels (see :func:`make_groups`).
GroupLabels: TypeAlias = Sequence[Hashable] | np.ndarray | torch.Tensor | None

#: Half the largest float64: intermediate values are kept below it.
_HALF_MAX = float(np.finfo(np.float64).max) / 2
_LOG2_HALF_MAX = math.log2(_HALF_MAX)

#: A ragged batch is padded into one ``(G, max size)`` matrix when that holds at most this
#: many times ``B`` cells (plus a small constant); else into one matrix per size class.
_PAD_FACTOR = 2


def _pow2_divisor(amax: torch.Tensor, n: torch.Tensor, factor: float) -> torch.Tensor:
    """Power-of-two divisors ``2^e``, ``e >= 0``, bringing ``factor * n * amax`` below half the
    float64 range: ``exp2(max(0, ceil(log2(amax) + log2(factor n) - log2(HALF_MAX))))``
    elementwise (1 where ``amax`` is 0). ``amax`` is a group's largest ``|value|`` and ``n``
    its size, in the same dtype (used by :meth:`Rows.pow2_scale` and
    :meth:`Groups.pow2_scale`)."""
    need = torch.log2(amax) + torch.log2(factor * n) - _LOG2_HALF_MAX
    return torch.exp2(torch.ceil(torch.nan_to_num(need, neginf=0.0)).clamp_min(0))


# ------------------------------------------------------------------------------ sorted layout
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
        if max(-float(lo), float(hi)) * factor * self.shape[1] <= _HALF_MAX:
            return None
        amax = torch.maximum(first.abs(), last.abs())
        return _pow2_divisor(amax, torch.as_tensor(self.n, dtype=v.dtype), factor)

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
class _Bucket:
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
        buckets: tuple[_Bucket, ...],
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


def _argsort_rows(m: torch.Tensor) -> torch.Tensor:
    """Row-wise ascending argsort of a 2-D tensor (tie order unspecified).

    On CPU numpy's SIMD quicksort is several times faster than ``torch.sort`` on short rows;
    the tensor is shared with numpy, not copied.
    """
    if _numpy_sorts(m.device):
        return torch.from_numpy(np.argsort(m.numpy(), axis=1))
    return torch.sort(m, dim=1).indices


# ------------------------------------------------------------------------------ groups
@dataclass(frozen=True)
class _Layout:
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


class Groups:
    """Factorised group labels of a flat batch.

    Build with :func:`make_groups`. ``index[i]`` is the group of sample ``i`` and
    ``labels[g]`` the original label of group ``g``. ``from_labels`` is ``False`` when the
    groups were not given as labels (``group=None``, or the rows of a 2-D reward array).
    """

    def __init__(
        self,
        index: torch.Tensor | None,
        num_groups: int,
        labels: np.ndarray,
        block: tuple[int, int] | None = None,
        *,
        from_labels: bool = True,
        layout: _Layout | None = None,
        device: torch.device | None = None,
    ):
        if index is None and layout is None and block is None:
            raise ValueError("Groups needs an index, a block shape or a layout")
        self._index = index
        self.num_groups = int(num_groups)
        self.labels = labels
        self.from_labels = bool(from_labels)
        self._device = index.device if index is not None else torch.device(device or "cpu")
        if layout is None and block is not None:
            G, N = block
            rows = None
            if index is not None and G > 1:  # the group of each block, if not block order
                heads = index[::N]
                if not bool((heads == torch.arange(G, device=self._device)).all()):
                    rows = heads
            layout = _Layout(None, rows, torch.full((G,), N, device=self._device), block)
        self._layout_given = layout
        self._block = layout.block if layout is not None else None
        if index is not None:
            self._n = int(index.shape[0])
        elif self._block is not None:
            self._n = self._block[0] * self._block[1]
        else:
            assert layout is not None  # checked above: an index, a block or a layout
            self._n = int(layout.seg_size.sum())

    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        return f"Groups(B={len(self)}, G={self.num_groups}, uniform_block={self._block})"

    def label(self, g: int) -> Any:
        """The original label of group ``g`` as a plain Python object (for messages)."""
        v = self.labels[g]
        return v.item() if isinstance(v, np.generic) else v

    @property
    def device(self) -> torch.device:
        return self._device

    @cached_property
    def index(self) -> torch.Tensor:
        """``(B,)`` long: the group of each sample."""
        if self._index is not None:
            return self._index
        lay = self._layout
        if lay.block is not None:
            G, N = lay.block
            rows = torch.arange(G, device=self._device) if lay.seg_group is None else lay.seg_group
            return rows.repeat_interleave(N)
        seg = torch.arange(lay.seg_size.shape[0], device=self._device)
        seg_g = seg if lay.seg_group is None else lay.seg_group
        idx = seg_g.repeat_interleave(lay.seg_size)
        if lay.order is None:
            return idx
        return torch.empty_like(idx).scatter_(0, lay.order, idx)

    @cached_property
    def _layout(self) -> _Layout:
        if self._layout_given is not None:
            return self._layout_given
        order = torch.argsort(self.index, stable=True)  # no layout: an index
        return _Layout(order, None, self.sizes, None)

    # -- sizes -----------------------------------------------------------------------------
    @cached_property
    def sizes(self) -> torch.Tensor:
        """``(G,)`` number of samples in each group."""
        if self._block is not None:
            return torch.full((self.num_groups,), self._block[1], device=self._device)
        lay = self._layout_given
        if lay is not None:
            if lay.seg_group is None:
                return lay.seg_size
            out = torch.empty_like(lay.seg_size)
            out[lay.seg_group] = lay.seg_size
            return out
        return torch.bincount(self.index, minlength=self.num_groups)  # no layout: an index

    @cached_property
    def sample_sizes(self) -> torch.Tensor:
        """``(B,)`` size of the group each sample belongs to."""
        if self._block is not None:
            return torch.full((len(self),), self._block[1], device=self._device)
        return self.sizes[self.index]

    @property
    def is_uniform_block(self) -> bool:
        """True when groups are contiguous blocks of one size (a ``(G, N)`` matrix)."""
        return self._block is not None

    def broadcast(self, v: torch.Tensor) -> torch.Tensor:
        """``(B,)``: the per-group value ``v[g]`` of each sample's group."""
        if self._block is not None and self._layout.seg_group is None:
            G, N = self._block
            return v.view(G, 1).expand(G, N).reshape(-1)
        return torch.index_select(v, 0, self.index)

    def _rows_to_groups(self, per_row: torch.Tensor) -> torch.Tensor:
        seg_group = self._layout.seg_group
        if seg_group is None:
            return per_row
        out = torch.empty_like(per_row)
        out[seg_group] = per_row
        return out

    # -- reductions ------------------------------------------------------------------------
    def sum(self, x: torch.Tensor) -> torch.Tensor:
        """``(G,)`` per-group sum, accumulated sequentially in sample order.

        (Block batches use a row-wise scan, bit-identical to the sequential ``index_add_``
        of the general path, so a group's sum does not depend on the batch layout.)
        """
        if self._block is not None:
            return self._rows_to_groups(x.view(self._block).cumsum(1)[:, -1].contiguous())
        out = torch.zeros(self.num_groups, dtype=x.dtype, device=x.device)
        return out.index_add_(0, self.index, x)

    def max(self, x: torch.Tensor) -> torch.Tensor:
        """``(G,)`` per-group maximum."""
        if self._block is not None:
            return self._rows_to_groups(x.view(self._block).amax(1))
        out = torch.full((self.num_groups,), -torch.inf, dtype=x.dtype, device=x.device)
        return out.scatter_reduce_(0, self.index, x, reduce="amax", include_self=True)

    def min(self, x: torch.Tensor) -> torch.Tensor:
        """``(G,)`` per-group minimum."""
        return -self.max(-x)

    def descaled(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(x / s, s)`` with ``s`` the per-group :meth:`pow2_scale` (``factor=4``, samples
        divided by their group's divisor, exactly), or ``(x, None)`` when no group needs one."""
        scale = self.pow2_scale(x, 4.0)
        return (x, None) if scale is None else (x / self.broadcast(scale), scale)

    def _center_scaled(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        below = x - self.broadcast(self.max(x))  # <= 0, exactly 0 at the maximum
        shift = self.sum(below) / self.sizes.to(x.dtype)  # mean(x - p) = -spread
        return below - self.broadcast(shift), 0.0 - shift

    def center(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(dev, spread)``: deviations ``x_i - mean`` (``(B,)``) and, per group, the mean
        distance to the group maximum ``spread = mean(max - x)`` (``(G,)``, 0 iff the group
        is constant).

        Computed about the group maximum ``p``: ``dev = (x - p) - mean(x - p)``, so a constant
        group gets exactly 0; groups near the float64 limits are first divided by an exact
        power of two (:meth:`pow2_scale`), so nothing overflows unless the result does.
        """
        xs, scale = self.descaled(x)
        dev, spread = self._center_scaled(xs)
        if scale is None:
            return dev, spread
        return dev * self.broadcast(scale), spread * scale

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """``(G,)`` per-group mean, ``p + mean(x - p)`` about the group maximum ``p``.

        Exact for constant groups; no overflow (near the float64 limits the group is first
        divided by an exact power of two).
        """
        xs, scale = self.descaled(x)
        p = self.max(xs)
        m = p + self.sum(xs - self.broadcast(p)) / self.sizes.to(x.dtype)
        return m if scale is None else m * scale

    def _scaled_dev(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """``(z, spread, scale)``: deviations divided by the group spread (0 for constant
        groups), so ``|z| <= n`` and ``max |z| >= 1`` -- their squares neither overflow nor
        vanish; ``spread`` is in units of the per-group power-of-two ``scale`` (1.0 when no
        group needed one)."""
        xs, scale = self.descaled(x)
        dev, spread = self._center_scaled(xs)
        sp = self.broadcast(spread)
        z = dev / torch.where(sp > 0, sp, torch.ones_like(sp))
        return z, spread, 1.0 if scale is None else scale

    def std(self, x: torch.Tensor, ddof: int = 1) -> torch.Tensor:
        """``(G,)`` per-group standard deviation with ``n - ddof`` in the denominator.

        ``spread * sqrt(sum(z^2) / (n - ddof))`` with ``z`` the deviations divided by the
        group's spread: no overflow or underflow of the squares; 0 for constant groups and
        for groups with ``n <= ddof``; ``inf`` only if the std itself exceeds the float64
        range.
        """
        z, spread, scale = self._scaled_dev(x)
        return spread * self._std_of_scaled(z, ddof) * scale

    def _std_of_scaled(self, z: torch.Tensor, ddof: int) -> torch.Tensor:
        denom = (self.sizes - ddof).clamp_min(1).to(z.dtype)
        var = self.sum(z * z) / denom
        return torch.where(self.sizes > ddof, var, torch.zeros_like(var)).sqrt()

    def standardize(self, x: torch.Tensor, eps: float = 0.0, ddof: int = 1) -> torch.Tensor:
        """``(B,)`` ``(x_i - mean) / (std + eps)`` within each group (``std`` with
        ``n - ddof``), computed as ``z / (std(z) + eps / spread)`` on the deviations scaled
        by the group spread, so neither huge nor tiny groups overflow or underflow
        (``[-1.7e308, 1.7e308]`` gives ``-0.707, 0.707``).

        Constant groups and groups with ``n <= ddof`` get 0.
        """
        z, spread, scale = self._scaled_dev(x)
        std_z = self._std_of_scaled(z, ddof)
        safe = torch.where(spread > 0, spread, torch.ones_like(spread))
        # (A Python number divided by a tensor is a reciprocal times the number in torch:
        # 0 * inf = NaN for a subnormal spread. Divide tensors.)
        eps_t = torch.as_tensor(eps, dtype=z.dtype, device=z.device)
        denom = std_z + (eps_t / scale) / safe  # eps / tiny spread -> inf -> 0, the right limit
        ok = (spread > 0) & (self.sizes > ddof) & (denom > 0)
        denom = torch.where(ok, denom, torch.ones_like(denom))
        return torch.where(self.broadcast(ok), z / self.broadcast(denom), torch.zeros_like(z))

    def loo_max(self, x: torch.Tensor) -> torch.Tensor:
        """``(B,)`` leave-one-out maximum ``max_{j != i, j in group(i)} x_j``.

        Equals the group max except for a unique maximiser, which gets the second largest
        value. Samples alone in their group get ``-inf``.
        """
        gmax = self.max(x)
        is_top = x == self.broadcast(gmax)
        n_top = self.sum(is_top.to(x.dtype))
        second = self.max(torch.where(is_top, torch.full_like(x, -torch.inf), x))
        unique_top = is_top & (self.broadcast(n_top) == 1)
        return torch.where(unique_top, self.broadcast(second), self.broadcast(gmax))

    def pow2_scale(self, x: torch.Tensor, factor: float = 4.0) -> torch.Tensor | None:
        """Per-group power-of-two divisors that keep ``factor * n * max|x|`` below half the
        float64 range, or ``None`` when no group needs one (the common case).

        Dividing by a power of two is exact (barring underflow), so a computation on the
        scaled values, multiplied back, equals the unscaled one bit for bit wherever the
        latter does not overflow. Each group's divisor depends on that group alone.
        """
        if not x.numel():
            return None
        lo, hi = torch.aminmax(x)
        amax = max(-float(lo), float(hi))
        nmax = float(self.sizes.max()) if self.num_groups else 0.0
        if amax * factor * nmax <= _HALF_MAX:
            return None
        return _pow2_divisor(self.max(x.abs()), self.sizes.to(x.dtype), factor)

    # -- sorting ---------------------------------------------------------------------------
    def sort(self, x: torch.Tensor, descending: bool = False) -> SortedGroups:
        """Sort ``x`` within each group; see :class:`SortedGroups` for the layout.

        One row-wise sort: a view for block batches, otherwise the groups padded (with
        ``+inf``, after the members) into one ``(G, max size)`` matrix, or one matrix per
        power-of-two size class when that would more than double the memory. The order of
        tied values is unspecified; :meth:`Rows.tie_canonical` makes results independent of
        it.
        """
        lay = self._layout
        key = -x if descending else x
        seg_group = lay.seg_group
        if lay.block is not None:
            R, N = lay.block
            m = key.view(R, N)
            cols = _argsort_rows(m)
            vals = torch.gather(m, 1, cols)
            rows = Rows(-vals if descending else vals, N)
            return SortedGroups((_Bucket(0, R * N, rows, None),), seg_group, (R, N), cols=cols)
        return self._sort_ragged(key, descending, lay)

    def _sort_ragged(self, key, descending, lay: _Layout) -> SortedGroups:
        dev = key.device
        B = key.shape[0]
        seg_size = lay.seg_size
        S = seg_size.shape[0]
        seg_group = torch.arange(S, device=dev) if lay.seg_group is None else lay.seg_group
        order = torch.arange(B, device=dev) if lay.order is None else lay.order
        wmax = int(seg_size.max())
        if S * wmax <= _PAD_FACTOR * B + 1024:
            spans = [(0, S, wmax)]
            src = order  # the sample at each layout position: segments as the layout has them
        else:  # one matrix per power-of-two size class: padding at most doubles the batch
            seg_start0 = torch.cumsum(seg_size, 0) - seg_size  # segment starts in `order`
            cls = torch.ceil(torch.log2(seg_size.to(torch.float64))).to(torch.long)
            seg_order = torch.argsort(cls, stable=True)
            seg_size, seg_group = seg_size[seg_order], seg_group[seg_order]
            seg_start0 = seg_start0[seg_order]
            counts = torch.unique_consecutive(cls[seg_order], return_counts=True)[1].tolist()
            ends = np.cumsum(counts).tolist()
            spans = [(lo, hi, int(seg_size[lo:hi].max()))
                     for lo, hi in zip([0] + ends[:-1], ends, strict=True)]
            new_start = torch.cumsum(seg_size, 0) - seg_size
            shift = torch.repeat_interleave(seg_start0 - new_start, seg_size)
            src = torch.index_select(order, 0, torch.arange(B, device=dev) + shift)
        seg_start = torch.cumsum(seg_size, 0) - seg_size  # starts in the sorted layout
        perm = torch.empty_like(src)
        buckets = []
        for s_lo, s_hi, width in spans:
            lo = int(seg_start[s_lo])
            hi = int(seg_start[s_hi - 1] + seg_size[s_hi - 1])
            R = s_hi - s_lo
            sizes = seg_size[s_lo:s_hi]
            # cell of layout position q: q - lo + (row * width - (segment start - lo))
            row_off = torch.arange(R, device=dev) * width - (seg_start[s_lo:s_hi] - lo)
            cells = torch.arange(hi - lo, device=dev) + torch.repeat_interleave(row_off, sizes)
            kbuf = torch.full((R * width,), torch.inf, dtype=key.dtype, device=dev)
            kbuf.scatter_(0, cells, torch.index_select(key, 0, src[lo:hi]))
            m = kbuf.view(R, width)
            cols = _argsort_rows(m)
            # +inf padding sorts after every (finite) member, so each row's members stay in
            # its first `size` cells and `cells` addresses them before and after the sort;
            # the member now at cell (r, j) came from layout position cells^-1(r, cols[r, j]).
            src_cell = cols + (torch.arange(R, device=dev) * width).unsqueeze(1)
            from_pos = torch.index_select(src_cell.view(-1), 0, cells)
            from_pos = from_pos - torch.repeat_interleave(row_off, sizes)
            perm[lo:hi] = torch.index_select(src[lo:hi], 0, from_pos)
            vals = torch.gather(m, 1, cols)
            rows = Rows(-vals if descending else vals, sizes.unsqueeze(1))
            buckets.append(_Bucket(lo, hi, rows, cells))
        return SortedGroups(tuple(buckets), seg_group, None, perm=perm)


# ------------------------------------------------------------------------------ factorising
_hash = hash  # module-level so that tests can force hash collisions


@dataclass
class _Factor:
    index: torch.Tensor | None  # (B,) group ids (None when the layout is known)
    labels: np.ndarray  # (G,) labels in group order
    layout: _Layout | None  # known layout (block, or the grouping order of the factorisation)


def _block_of(a: np.ndarray) -> tuple[int, np.ndarray | None, np.ndarray] | None:
    """``(N, rows, labels)`` if ``a`` is ``G`` contiguous blocks of one size ``N >= 2`` with
    distinct labels (``rows[r]`` is the group of block ``r``, ``None`` when the blocks are
    already in sorted label order), else ``None``. ``O(B)``; no sort of the samples."""
    n = a.shape[0]
    first = np.empty((), dtype=a.dtype)
    first[()] = a[0]  # a 0-d array: a tuple label must not broadcast as a sequence
    N, stop = n, 64
    while True:  # the first label change, scanning a growing prefix
        differs = a[:stop] != first
        if not isinstance(differs, np.ndarray) or differs.dtype != np.bool_:
            return None
        if bool(differs.any()):
            N = int(np.argmax(differs))
            break
        if stop >= n:
            break
        stop *= 8
    if N < 2 or n % N:
        return None
    m = a.reshape(-1, N)
    heads = m[:, 0]
    same = m == heads[:, None]
    if not isinstance(same, np.ndarray) or same.dtype != np.bool_ or not bool(same.all()):
        return None
    if a.dtype.kind == "O":
        try:
            list(map(hash, heads))
        except TypeError as e:
            raise ValueError(f"group labels must be hashable: {e}") from None
    if heads.shape[0] == 1:
        return N, None, heads
    try:
        if bool(np.all(heads[1:] > heads[:-1])):
            return N, None, heads
        uniq, rows = np.unique(heads, return_inverse=True)
    except TypeError:  # unorderable object labels: the general path handles them
        return None
    if uniq.shape[0] != heads.shape[0]:
        return None  # a label appears in two blocks
    return N, rows.reshape(-1), uniq


def _stable_argsort(a: np.ndarray) -> np.ndarray:
    """Stable argsort; integers spanning fewer than 2^32 values use numpy's radix sort on
    16-bit digits (one or two ``O(B)`` passes instead of a comparison sort)."""
    if a.dtype.kind in "iu" and a.size:
        lo, hi = int(a.min()), int(a.max())
        span = hi - lo
        if span < 1 << 32:
            if a.dtype.kind == "i":
                d = (a.astype(np.int64) - lo).astype(np.uint64)
            else:
                d = a.astype(np.uint64) - np.uint64(lo)
            order = np.argsort(d.astype(np.uint16), kind="stable")  # low 16 bits
            if span >= 1 << 16:  # then the high 16 bits, stably: LSD radix sort
                high = (d[order] >> np.uint64(16)).astype(np.uint16)
                order = order[np.argsort(high, kind="stable")]
            return order
    return np.argsort(a, kind="stable")


def _factor_sortable(a: np.ndarray) -> _Factor:
    """Factorise an orderable 1-D array (numbers, numpy strings) with one argsort."""
    n = a.shape[0]
    order = _stable_argsort(a)
    sa = a[order]
    new = np.empty(n, dtype=bool)
    new[:1] = True
    np.not_equal(sa[1:], sa[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    seg_size = np.diff(np.append(starts, n))
    return _Factor(None, sa[starts], _Layout(torch.from_numpy(order), None,
                                             torch.from_numpy(seg_size), None))


def _factor_objects(a: np.ndarray) -> _Factor:
    """Factorise Python objects by hash, exactly (Python equality decides)."""
    items = a.tolist()
    try:
        h = np.fromiter(map(_hash, items), dtype=np.int64, count=len(items))
    except TypeError as e:
        raise ValueError(f"group labels must be hashable: {e}") from None
    f = _factor_sortable(h)
    assert f.layout is not None and f.layout.order is not None  # a sort's layout
    order = f.layout.order.numpy()
    seg_size = f.layout.seg_size.numpy()
    first = order[np.cumsum(seg_size) - seg_size]  # one member of each hash group
    reps = a[first]
    seg_of_sample = np.empty(len(items), dtype=np.int64)
    seg_of_sample[order] = np.repeat(np.arange(seg_size.shape[0]), seg_size)
    same = a == reps[seg_of_sample]
    if not (isinstance(same, np.ndarray) and same.dtype == np.bool_ and bool(same.all())):
        return _factor_dict(items)  # a hash collision, or labels unequal to themselves (nan)
    try:
        rank_of_seg = np.empty(reps.shape[0], dtype=np.int64)
        rank_of_seg[np.argsort(reps, kind="stable")] = np.arange(reps.shape[0])
    except TypeError:  # mixed, unorderable types: groups in order of first appearance
        rank_of_seg = np.argsort(np.argsort(first, kind="stable"), kind="stable")
    labels = np.empty(reps.shape[0], dtype=object)
    labels[rank_of_seg] = reps
    return _Factor(None, labels, _Layout(f.layout.order, torch.from_numpy(rank_of_seg),
                                         f.layout.seg_size, None))


def _factor_dict(items: list[Any]) -> _Factor:
    """Exact fallback: codes by first appearance through a dict (hash + Python equality)."""
    codes: dict[Any, int] = {}
    index = np.fromiter((codes.setdefault(v, len(codes)) for v in items), np.int64, len(items))
    labels = np.empty(len(codes), dtype=object)
    labels[:] = list(codes)
    try:  # sorted label order when the labels can be ordered
        ranks = np.empty(len(codes), dtype=np.int64)
        ranks[np.argsort(labels, kind="stable")] = np.arange(len(codes))
        index, labels = ranks[index], labels[np.argsort(labels, kind="stable")]
    except TypeError:
        pass
    return _Factor(torch.from_numpy(index), labels, None)


def _as_label_array(group: Any) -> np.ndarray:
    if isinstance(group, np.ndarray):
        return group
    if isinstance(group, Sequence) and not isinstance(group, (str, bytes)):
        if len(group) == 0:
            return np.zeros(0, dtype=np.int64)
        try:
            arr = np.asarray(group)
        except ValueError:  # ragged nested sequences
            arr = None
        if arr is None or arr.ndim != 1 or arr.dtype.kind in "USOV":
            # Keep Python objects as they are: numpy would turn [1, "1"] into two equal
            # strings, strip the NUL of "a\x00", or make tuples a 2-D array.
            out = np.empty(len(group), dtype=object)
            out[:] = list(group)
            return out
        return arr
    raise ValueError(
        "group must be a 1-D sequence, numpy array or tensor of labels, "
        f"got {type(group).__name__}"
    )


def _factorize_labels(group: Any) -> _Factor:
    """Map arbitrary labels to dense ids ``0..G-1`` (sorted label order) without Python loops."""
    if isinstance(group, torch.Tensor):
        if group.ndim != 1:
            raise ValueError(f"group must be 1-D, got a tensor of shape {tuple(group.shape)}")
        if group.is_complex():
            raise ValueError("group labels must be real numbers or hashables, got complex")
        if group.device.type != "cpu":
            return _factor_tensor(group)
        arr = group.numpy() if group.dtype != torch.bfloat16 else group.float().numpy()
    else:
        arr = _as_label_array(group)
    if arr.ndim != 1:
        raise ValueError(f"group must be 1-D, got shape {arr.shape}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        bad = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise ValueError(f"group label at index {bad} is not finite")
    if arr.dtype.kind == "c":
        raise ValueError("group labels must be real numbers or hashables, got complex")
    if arr.shape[0] == 0:
        return _Factor(torch.zeros(0, dtype=torch.long), arr[:0], None)
    blk = _block_of(arr)
    if blk is not None:
        N, rows, labels = blk
        G = labels.shape[0]
        seg_group = None if rows is None else torch.from_numpy(rows.astype(np.int64))
        if arr.dtype.kind == "O":
            labels = np.asarray(labels, dtype=object)
        return _Factor(None, labels, _Layout(None, seg_group, torch.full((G,), N), (G, N)))
    if arr.dtype.kind == "O":
        return _factor_objects(arr)
    try:
        return _factor_sortable(arr)
    except TypeError:
        return _factor_objects(arr.astype(object))


def _factor_tensor(group: torch.Tensor) -> _Factor:
    """Accelerator tensors: ``torch.unique`` on the device, labels back on the host."""
    if group.is_floating_point() and not bool(torch.isfinite(group).all()):
        bad = int(torch.nonzero(~torch.isfinite(group))[0])
        raise ValueError(f"group label at index {bad} is not finite")
    uniq, inverse = torch.unique(group, return_inverse=True)
    return _Factor(inverse.to(torch.long), uniq.cpu().numpy(), None)


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


def make_groups(group: GroupLabels, n: int, device: torch.device | str | None = None) -> Groups:
    """Build :class:`Groups` for a batch of ``n`` samples.

    Parameters
    ----------
    group:
        ``None`` (one group), or a length-``n`` 1-D sequence / numpy array / tensor of labels:
        integers or any hashable (strings such as verl's ``uid``). Labels compare as Python
        values: ``1`` and ``"1"`` are different groups, ``1`` and ``1.0`` the same one.
    n:
        Batch size.
    device:
        Where the index tensors live (the rewards' device).
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    if group is None:
        if n == 0:
            return Groups(torch.zeros(0, dtype=torch.long, device=device), 0,
                          np.zeros(0, dtype=np.int64), from_labels=False)
        return Groups(None, 1, np.zeros(1, dtype=np.int64), (1, n), from_labels=False,
                      device=device)
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
    f = _factorize_labels(group)
    num_groups = int(f.labels.shape[0])
    layout = f.layout
    if layout is not None:
        layout = _Layout(
            None if layout.order is None else layout.order.to(device),
            None if layout.seg_group is None else layout.seg_group.to(device),
            layout.seg_size.to(device),
            layout.block,
        )
        if layout.block is None and layout.seg_group is None and bool(
            (layout.seg_size == layout.seg_size[0]).all()
        ) and (layout.order is None  # None: the identity order
               or bool(layout.order.eq(torch.arange(n, device=device)).all())):
            layout = _Layout(None, None, layout.seg_size, (num_groups, n // num_groups))
        return Groups(None, num_groups, f.labels, from_labels=True, layout=layout, device=device)
    assert f.index is not None  # a factorisation without a layout has an index
    index = f.index.to(device)
    return Groups(index, num_groups, f.labels, _detect_block(index, num_groups))


def block_groups(num_groups: int, size: int, device: torch.device | str | None = None) -> Groups:
    """Groups for a ``(G, N)`` reward matrix flattened row-major: row ``g`` is group ``g``."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    return Groups(None, num_groups, np.arange(num_groups), (num_groups, size), from_labels=False,
                  device=device)
