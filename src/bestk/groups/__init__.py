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

Modules
-------
* :mod:`bestk.groups.labels` -- labels to group indices: :func:`make_groups` (factorising
  labels of any hashable kind without a Python loop, recognising block batches),
  :func:`block_groups`, :data:`GroupLabels`;
* :mod:`bestk.groups.core` -- :class:`Groups`: the segment-wise reductions (``sum``,
  ``mean``, ``std``, ``standardize``, ``loo_max``, ...) and :meth:`Groups.sort`;
* :mod:`bestk.groups.layout` -- the sorted layouts: :class:`Rows` (one group per row of a
  padded matrix, with the row-wise scans, shifts and tie canonicalisation estimators are
  written with) and :class:`SortedGroups`.
"""

from __future__ import annotations

from bestk.groups.core import Groups
from bestk.groups.labels import GroupLabels, Labels, block_groups, make_groups
from bestk.groups.layout import Rows as Rows  # for the estimators: not in __all__
from bestk.groups.layout import SortedGroups

__all__ = ["Groups", "SortedGroups", "GroupLabels", "Labels", "make_groups", "block_groups"]
