""":class:`Groups`: factorised group labels of a flat batch and their segment-wise operations.

Reductions (``sum``, ``max``, ``min``, ``mean``, ``std``), centring and standardising about the
group maximum, leave-one-out maxima, exact power-of-two rescaling, broadcasting back to the
samples, and :meth:`Groups.sort` into a :class:`~bestk.groups.layout.SortedGroups`. Built by
:func:`bestk.groups.make_groups` / :func:`bestk.groups.block_groups`
(:mod:`bestk.groups.labels`).
"""

from __future__ import annotations

from collections.abc import Hashable
from functools import cached_property

import numpy as np
import torch

from bestk.groups.layout import (
    HALF_MAX,
    Bucket,
    Layout,
    Rows,
    SortedGroups,
    argsort_rows,
    pow2_divisor,
)

#: A ragged batch is padded into one ``(G, max size)`` matrix when that holds at most this
#: many times ``B`` cells (plus a small constant); else into one matrix per size class.
_PAD_FACTOR = 2


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
        layout: Layout | None = None,
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
            layout = Layout(None, rows, torch.full((G,), N, device=self._device), block)
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

    def label(self, g: int) -> Hashable:
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
    def _layout(self) -> Layout:
        if self._layout_given is not None:
            return self._layout_given
        order = torch.argsort(self.index, stable=True)  # no layout: an index
        return Layout(order, None, self.sizes, None)

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

    def _scaled_dev(self, x: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor, float | torch.Tensor]:
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
        if amax * factor * nmax <= HALF_MAX:
            return None
        return pow2_divisor(self.max(x.abs()), self.sizes.to(x.dtype), factor)

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
            cols = argsort_rows(m)
            vals = torch.gather(m, 1, cols)
            rows = Rows(-vals if descending else vals, N)
            return SortedGroups((Bucket(0, R * N, rows, None),), seg_group, (R, N), cols=cols)
        return self._sort_ragged(key, descending, lay)

    def _sort_ragged(self, key, descending, lay: Layout) -> SortedGroups:
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
            cols = argsort_rows(m)
            # +inf padding sorts after every (finite) member, so each row's members stay in
            # its first `size` cells and `cells` addresses them before and after the sort;
            # the member now at cell (r, j) came from layout position cells^-1(r, cols[r, j]).
            src_cell = cols + (torch.arange(R, device=dev) * width).unsqueeze(1)
            from_pos = torch.index_select(src_cell.view(-1), 0, cells)
            from_pos = from_pos - torch.repeat_interleave(row_off, sizes)
            perm[lo:hi] = torch.index_select(src[lo:hi], 0, from_pos)
            vals = torch.gather(m, 1, cols)
            rows = Rows(-vals if descending else vals, sizes.unsqueeze(1))
            buckets.append(Bucket(lo, hi, rows, cells))
        return SortedGroups(tuple(buckets), seg_group, None, perm=perm)
