"""Group labels to dense group indices: :func:`make_groups`, :func:`block_groups`.

Labels are factorised with one ``argsort`` (integers, floats, numpy strings) or one C-level
hashing pass (Python objects such as uid strings), and a batch whose groups are contiguous
blocks of one size is recognised in ``O(B)`` without any sort; no Python loop over groups or
samples. Labels compare as Python values (:mod:`bestk.groups`, "Conventions").
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import torch

from bestk.groups.core import Groups
from bestk.groups.layout import Layout

#: Group labels as the public functions take them: ``None`` (one group), or a 1-D sequence,
#: numpy array or tensor of hashable labels (see :func:`make_groups`).
GroupLabels: TypeAlias = Sequence[Hashable] | np.ndarray | torch.Tensor | None
#: Labels that must be given (prompt ids): a 1-D sequence, numpy array or tensor of hashables.
Labels: TypeAlias = Sequence[Hashable] | np.ndarray | torch.Tensor


_hash = hash  # module-level so that tests can force hash collisions


@dataclass
class _Factor:
    index: torch.Tensor | None  # (B,) group ids (None when the layout is known)
    labels: np.ndarray  # (G,) labels in group order
    layout: Layout | None  # known layout (block, or the grouping order of the factorisation)


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
    return _Factor(None, sa[starts], Layout(torch.from_numpy(order), None,
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
    return _Factor(None, labels, Layout(f.layout.order, torch.from_numpy(rank_of_seg),
                                         f.layout.seg_size, None))


def _factor_dict(items: list[Hashable]) -> _Factor:
    """Exact fallback: codes by first appearance through a dict (hash + Python equality)."""
    codes: dict[Hashable, int] = {}
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


def _as_label_array(group: object) -> np.ndarray:
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


def factorize_labels(group: Labels) -> _Factor:
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
        return _Factor(None, labels, Layout(None, seg_group, torch.full((G,), N), (G, N)))
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
    f = factorize_labels(group)
    num_groups = int(f.labels.shape[0])
    layout = f.layout
    if layout is not None:
        layout = Layout(
            None if layout.order is None else layout.order.to(device),
            None if layout.seg_group is None else layout.seg_group.to(device),
            layout.seg_size.to(device),
            layout.block,
        )
        if layout.block is None and layout.seg_group is None and bool(
            (layout.seg_size == layout.seg_size[0]).all()
        ) and (layout.order is None  # None: the identity order
               or bool(layout.order.eq(torch.arange(n, device=device)).all())):
            layout = Layout(None, None, layout.seg_size, (num_groups, n // num_groups))
        return Groups(None, num_groups, f.labels, from_labels=True, layout=layout, device=device)
    assert f.index is not None  # a factorisation without a layout has an index
    index = f.index.to(device)
    return Groups(index, num_groups, f.labels, _detect_block(index, num_groups))


def block_groups(num_groups: int, size: int, device: torch.device | str | None = None) -> Groups:
    """Groups for a ``(G, N)`` reward matrix flattened row-major: row ``g`` is group ``g``."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    return Groups(None, num_groups, np.arange(num_groups), (num_groups, size), from_labels=False,
                  device=device)
