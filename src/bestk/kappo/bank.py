"""Reading reference banks from disk: JSONL or parquet rows -> a validated bank.

Row formats (one JSON object per line, or one parquet row):

* ``{"prompt_id": ID, "reward": R}`` -- one reference reward per row, or
* ``{"prompt_id": ID, "rewards": [R1, R2, ...]}`` -- several per row.

Rows of the same prompt are pooled; ``ID`` is an integer or a string. Every error (malformed
JSON, missing or wrong-typed field, non-finite reward, a non-0/1 reward in a binary bank, a
prompt with fewer than 2 rewards) is a one-line ``ValueError`` naming the file and row (1-based).
"""

from __future__ import annotations

import math
import os
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from pathlib import Path
from typing import TypeAlias

import numpy as np
from numpy.typing import ArrayLike

from bestk._inputs import first_non_binary
from bestk._optional import require
from bestk._records import check_regular_file, iter_jsonl

__all__ = ["Bank", "BankMapping", "bank_from_mapping", "load_bank", "normalise_ids",
           "read_bank_rows"]

#: A reference bank as a mapping: prompt id (an int, a str or any other hashable) -> its
#: reference rewards (a sequence or array of numbers).
BankMapping: TypeAlias = (Mapping[int, ArrayLike] | Mapping[str, ArrayLike]
                          | Mapping[Hashable, ArrayLike])


def normalise_ids(ids: Sequence[object]) -> np.ndarray:
    """Prompt ids as a numpy array: int64 if all ids are ints, else their ``str``."""
    if all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in ids):
        return np.asarray(ids, dtype=np.int64)
    return np.asarray([str(i) for i in ids], dtype=str)


@dataclass
class Bank:
    """A validated reference bank: rewards grouped by prompt, in prompt-id order."""


    ids: np.ndarray  # (P,) sorted unique prompt ids
    sizes: np.ndarray  # (P,) bank size per prompt
    values: np.ndarray  # (sum sizes,) rewards, grouped by prompt in id order, sorted within


def bank_from_mapping(bank: BankMapping) -> Bank:
    if not isinstance(bank, Mapping):
        raise ValueError(
            f"bank must map prompt id -> sequence of reference rewards, got {type(bank).__name__}"
        )
    if len(bank) == 0:
        raise ValueError("bank is empty (no prompts)")
    items = list(bank.items())
    keys = [key for key, _ in items]
    ids = normalise_ids(keys)
    if len(np.unique(ids)) != len(ids):
        raise ValueError("bank has duplicate prompt ids after normalising ids to strings")
    arrays = []
    for key, rewards in items:  # one-off conversion of the user's mapping (not a hot path)
        try:
            a = np.asarray(rewards, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise ValueError(f"prompt {key!r}: rewards must be numbers") from None
        arrays.append(a)
    sizes = np.fromiter((a.size for a in arrays), np.int64, len(arrays))
    values = np.concatenate(arrays) if arrays else np.zeros(0)
    owner = np.repeat(np.arange(len(keys)), sizes)
    return finish_bank(ids, owner, values, [repr(k) for k in keys])


def finish_bank(ids: np.ndarray, owner: np.ndarray, values: np.ndarray, names: list[str]) -> Bank:
    """Validate and sort a bank given per-reward owner indices into ``ids``."""
    P = len(ids)
    sizes = np.bincount(owner, minlength=P)
    small = np.flatnonzero(sizes < 2)
    if small.size:
        i = int(small[0])
        raise ValueError(
            f"prompt {names[i]} has {int(sizes[i])} reference reward(s); calibration needs >= 2"
        )
    bad = ~np.isfinite(values)
    if bad.any():
        i = int(owner[np.flatnonzero(bad)[0]])
        raise ValueError(f"prompt {names[i]} has a non-finite reference reward")
    order_ids = np.argsort(ids, kind="stable")
    rank = np.empty(P, dtype=np.int64)
    rank[order_ids] = np.arange(P)
    new_owner = rank[owner]
    perm = np.lexsort((values, new_owner))
    return Bank(ids=ids[order_ids], sizes=sizes[order_ids], values=values[perm])


def _reward_list(row: dict, where: str) -> list[float]:
    has_one, has_many = "reward" in row, "rewards" in row
    if has_one == has_many:
        raise ValueError(f"{where}: needs exactly one of 'reward' or 'rewards'")
    vals = [row["reward"]] if has_one else row["rewards"]
    if not isinstance(vals, (list, tuple)) or (has_many and len(vals) == 0):
        raise ValueError(f"{where}: 'rewards' must be a non-empty list of numbers")
    out = []
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(v):
            raise ValueError(f"{where}: reward {v!r} is not a finite number")
        out.append(float(v))
    return out


def _prompt_id(row: dict, where: str) -> int | str:
    if "prompt_id" not in row:
        raise ValueError(f"{where}: missing 'prompt_id'")
    pid = row["prompt_id"]
    if isinstance(pid, bool) or not isinstance(pid, (int, str)):
        raise ValueError(f"{where}: prompt_id must be an integer or a string, got {pid!r}")
    return pid


def _iter_parquet(path: Path):
    pq = require("pyarrow.parquet", extra="train")
    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as e:  # pyarrow raises several error types for corrupt files
        raise ValueError(f"{path}: cannot read parquet file ({e})") from None
    for i, row in enumerate(rows, 1):
        row = {k: v for k, v in row.items() if v is not None}
        yield i, row


def read_bank_rows(path: str | os.PathLike) -> tuple[list[int | str], list[float], list[int]]:
    """Flat ``(prompt ids, rewards, row numbers)`` of a JSONL or parquet bank file."""
    path = Path(path)
    check_regular_file(path, "bank file")  # missing, or /dev/zero, a FIFO, a directory
    it = _iter_parquet(path) if path.suffix.lower() in (".parquet", ".pq") else iter_jsonl(path)
    ids: list[int | str] = []
    rewards: list[float] = []
    rows: list[int] = []
    for line_no, row in it:
        where = f"{path}: row {line_no}"
        if not isinstance(row, dict):  # a parquet row is always a dict; kept for the type
            raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
        pid = _prompt_id(row, where)
        vals = _reward_list(row, where)
        ids.extend([pid] * len(vals))
        rewards.extend(vals)
        rows.extend([line_no] * len(vals))
    if not rewards:
        raise ValueError(f"{path}: bank is empty (no rows)")
    return ids, rewards, rows


def load_bank(path: str | os.PathLike, *, binary: bool = False) -> Bank:
    """Read and validate a bank file (see the module docstring); ``binary`` demands 0/1 rewards."""
    ids, rewards, rows = read_bank_rows(path)
    vals = np.asarray(rewards, dtype=np.float64)
    row_no = np.asarray(rows, dtype=np.int64)
    if binary:
        i = first_non_binary(vals)
        if i is not None:
            raise ValueError(
                f"{path}: row {row_no[i]}: reward {float(vals[i])!r} is not 0/1 (binary bank)"
            )
    norm = normalise_ids(ids)
    uniq, owner = np.unique(norm, return_inverse=True)
    owner = owner.reshape(-1)
    counts = np.bincount(owner, minlength=len(uniq))
    few = np.flatnonzero(counts < 2)
    if few.size:
        g = int(few[0])
        first_row = int(row_no[np.flatnonzero(owner == g)[0]])
        raise ValueError(
            f"{path}: row {first_row}: prompt {uniq[g].item()!r} has {int(counts[g])} reference "
            "reward(s); calibration needs >= 2"
        )
    return finish_bank(uniq, owner, vals, [repr(u) for u in uniq.tolist()])
