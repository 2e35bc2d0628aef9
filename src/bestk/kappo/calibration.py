r"""Reference calibration: a per-prompt bank of M reference rewards -> a saved, reusable file.

Before training, sample M completions per training prompt from the reference policy and score
them (the paper uses M = 30). :func:`calibrate` turns that bank into a :class:`Calibration`:

* ``kind="binary"`` (Algorithm 1): per prompt the success count N(x) and, from
  :math:`\hat q = N/M`, :math:`\hat p^*`, the reward multiplier :math:`\hat a_k`, the A*PO offset
  :math:`\beta\log\hat Z` (boundaries of Eq. 148) and the @k-DPO coefficient
  :math:`\min\{\beta/a_k(N/(M+0.5)), 2\}` (Eq. 149);
* ``kind="winrate"`` (Algorithm 2): the sorted reference rewards of each prompt and the shared
  table :math:`T_0..T_M` (:func:`bestk.kappo.winrate_table`); an online reward r becomes
  :math:`T_j`, :math:`j = \#\{\text{reference rewards} \le r\}` (inclusive empirical CDF, Eq. 146).

:meth:`Calibration.save` writes versioned JSON atomically (temp file + ``os.replace``) with the
schema version, kind, k, beta, M, a SHA-256 checksum of the bank and the per-prompt values;
:meth:`Calibration.load` validates it. Lookups are vectorised (``searchsorted`` on the sorted
prompt ids and, for win-rate, on the per-prompt sorted banks); a prompt id missing from the
calibration is a ``ValueError`` naming it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bestk._atomic import atomic_path
from bestk.kappo._validate import check_k, check_positive
from bestk.kappo.binary import binary_calibration, dpo_beta_eff
from bestk.kappo.winrate import winrate_log_constant, winrate_table

__all__ = [
    "Calibration", "calibrate", "bank_checksum", "check_beta", "SCHEMA_VERSION", "KINDS",
    "MIN_BETA",
]

SCHEMA_VERSION = 1
FORMAT = "bestk.kappo.calibration"
KINDS = ("binary", "winrate")

#: Smallest KL strength a calibration accepts. The binary solver bisects a log-odds bracket of
#: width k/beta 200 times and the win-rate transform works in beta-scaled logs; in float64
#: both break down far below this bound (first wrong values near beta = 1e-46 for k = 256 and
#: 1e-65, respectively), so 1e-30 keeps every value exact with a wide margin.
MIN_BETA = 1e-30


def check_beta(beta: Any, name: str = "beta") -> float:
    """``beta`` must be a finite number >= :data:`MIN_BETA`."""
    beta = check_positive(beta, name)
    if beta < MIN_BETA:
        raise ValueError(
            f"{name} must be >= {MIN_BETA:g} (below it the calibration exceeds float64 "
            f"precision), got {beta!r}"
        )
    return beta


def _normalise_ids(ids: list[Any]) -> np.ndarray:
    """Prompt ids as a numpy array: int64 if all ids are ints, else their ``str``."""
    if all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in ids):
        return np.asarray(ids, dtype=np.int64)
    return np.asarray([str(i) for i in ids], dtype=str)


def bank_checksum(ids: np.ndarray, sizes: np.ndarray, values: np.ndarray) -> str:
    """SHA-256 of the bank: sorted prompt ids, bank sizes, and the rewards (float64, sorted)."""
    h = hashlib.sha256()
    h.update(b"ids:" + json.dumps(ids.tolist()).encode())
    h.update(b"sizes:" + np.ascontiguousarray(sizes, dtype="<i8").tobytes())
    h.update(b"rewards:" + np.ascontiguousarray(values, dtype="<f8").tobytes())
    return "sha256:" + h.hexdigest()


@dataclass
class _Bank:
    ids: np.ndarray  # (P,) sorted unique prompt ids
    sizes: np.ndarray  # (P,) bank size per prompt
    values: np.ndarray  # (sum sizes,) rewards, grouped by prompt in id order, sorted within


def _bank_from_mapping(bank: Mapping[Any, Any]) -> _Bank:
    if not isinstance(bank, Mapping):
        raise ValueError(
            f"bank must map prompt id -> sequence of reference rewards, got {type(bank).__name__}"
        )
    if len(bank) == 0:
        raise ValueError("bank is empty (no prompts)")
    keys = list(bank.keys())
    ids = _normalise_ids(keys)
    if len(np.unique(ids)) != len(ids):
        raise ValueError("bank has duplicate prompt ids after normalising ids to strings")
    arrays = []
    for key in keys:  # one-off conversion of the user's mapping (not a training hot path)
        try:
            a = np.asarray(bank[key], dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise ValueError(f"prompt {key!r}: rewards must be numbers") from None
        arrays.append(a)
    sizes = np.fromiter((a.size for a in arrays), np.int64, len(arrays))
    values = np.concatenate(arrays) if arrays else np.zeros(0)
    owner = np.repeat(np.arange(len(keys)), sizes)
    return _finish_bank(ids, owner, values, [repr(k) for k in keys])


def _finish_bank(ids: np.ndarray, owner: np.ndarray, values: np.ndarray, names: list[str]) -> _Bank:
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
    return _Bank(ids=ids[order_ids], sizes=sizes[order_ids], values=values[perm])


@dataclass(eq=False)
class Calibration:
    """A reference calibration for one (kind, k, beta); see :func:`calibrate`.

    Per-prompt arrays are aligned with ``prompt_ids`` (sorted). For ``kind="binary"`` the values
    are ``n_success``, ``p_star``, ``a_k``, ``beta_eff`` (``inf`` where a_k = 0), ``beta_log_z``
    and ``dpo_beta_eff``; for ``kind="winrate"`` the sorted ``rewards`` of each prompt (flat,
    with ``bank_sizes``) and the tables ``{M: T_0..T_M}``.
    """

    kind: str
    k: int
    beta: float
    prompt_ids: np.ndarray
    bank_sizes: np.ndarray
    checksum: str
    values: dict[str, np.ndarray] = field(default_factory=dict)
    tables: dict[int, np.ndarray] = field(default_factory=dict)
    log_c: float | None = None
    _padded: torch.Tensor | None = field(default=None, repr=False, compare=False)

    # -- basic info --------------------------------------------------------------------------
    @property
    def M(self) -> int | list[int]:
        """Bank size (an int when every prompt has the same size, else the sorted sizes)."""
        u = np.unique(self.bank_sizes)
        return int(u[0]) if u.size == 1 else [int(x) for x in u]

    @property
    def num_prompts(self) -> int:
        return int(self.prompt_ids.shape[0])

    def __repr__(self) -> str:
        return (
            f"Calibration(kind={self.kind!r}, k={self.k}, beta={self.beta}, M={self.M}, "
            f"prompts={self.num_prompts})"
        )

    # -- lookups -----------------------------------------------------------------------------
    def index_of(self, prompt_ids: Any) -> np.ndarray:
        """Row of each prompt id (vectorised); ``ValueError`` naming the first missing id."""
        if isinstance(prompt_ids, torch.Tensor):
            prompt_ids = prompt_ids.detach().cpu().numpy()
        q = np.asarray(prompt_ids)
        if q.ndim == 0:
            q = q.reshape(1)
        if q.ndim != 1:
            raise ValueError(f"prompt ids must be 1-D, got shape {q.shape}")
        table = self.prompt_ids
        order = None
        if table.dtype.kind == "i" and q.dtype.kind in "iu":
            qq = q.astype(np.int64)
        else:
            if table.dtype.kind == "i":  # compare as strings: sort the stringified ids
                table = table.astype(str)
                order = np.argsort(table, kind="stable")
                table = table[order]
            if q.dtype.kind == "O":
                qq = np.asarray([str(x) for x in q], dtype=str)
            else:
                qq = q.astype(str)
        pos = np.searchsorted(table, qq)
        pos_c = np.minimum(pos, len(table) - 1)
        found = table[pos_c] == qq
        if not found.all():
            missing = q[np.flatnonzero(~found)[0]]
            missing = missing.item() if hasattr(missing, "item") else missing
            raise ValueError(
                f"prompt {missing!r} is not in the calibration ({self.num_prompts} prompts, "
                f"checksum {self.checksum[:19]}...)"
            )
        return pos_c if order is None else order[pos_c]

    def get(self, name: str, prompt_ids: Any) -> np.ndarray:
        """Per-prompt value ``name`` (e.g. ``"a_k"``) for each id in ``prompt_ids``."""
        if name not in self.values:
            raise ValueError(
                f"calibration of kind {self.kind!r} has no value {name!r}; "
                f"available: {', '.join(sorted(self.values))}"
            )
        return self.values[name][self.index_of(prompt_ids)]

    def _win_index(self, rows: np.ndarray, rewards: torch.Tensor) -> torch.Tensor:
        """j = #{reference rewards of the prompt <= r} for each sample (inclusive CDF)."""
        if self._padded is None:
            starts = np.concatenate([[0], np.cumsum(self.bank_sizes)[:-1]])
            m_max = int(self.bank_sizes.max())
            ref = np.full((self.num_prompts, m_max), np.inf)
            col = np.arange(self.values["rewards"].size) - np.repeat(starts, self.bank_sizes)
            ref[np.repeat(np.arange(self.num_prompts), self.bank_sizes), col] = self.values[
                "rewards"
            ]
            self._padded = torch.from_numpy(ref)
        ref_t = self._padded.to(rewards.device)
        rows_t = torch.from_numpy(rows).to(rewards.device)
        uniq, inv = torch.unique(rows_t, return_inverse=True)
        sub = ref_t[uniq][inv]  # (B, m_max) rows of the samples' prompts, +inf padded
        return torch.searchsorted(sub, rewards.unsqueeze(1).contiguous(), right=True).squeeze(1)

    def transform_tensor(self, prompt_ids: Any, rewards: torch.Tensor) -> torch.Tensor:
        """:meth:`transform` on a float64 1-D tensor (no output conversion)."""
        rows = self.index_of(prompt_ids)
        if rewards.shape[0] != rows.shape[0]:
            raise ValueError(
                f"{rewards.shape[0]} rewards but {rows.shape[0]} prompt ids: lengths must match"
            )
        return self.transform_rows(rows, rewards)

    def transform_rows(self, rows: np.ndarray, rewards: torch.Tensor) -> torch.Tensor:
        """:meth:`transform` given calibration rows (from :meth:`index_of`) and a float64 tensor."""
        if not bool(torch.isfinite(rewards).all()):
            i = int(torch.nonzero(~torch.isfinite(rewards))[0])
            raise ValueError(f"reward at index {i} is {rewards[i].item()} (must be finite)")
        if self.kind == "binary":
            _check_binary(rewards)
            a = torch.from_numpy(self.values["a_k"][rows]).to(rewards)
            return a * rewards
        j = self._win_index(rows, rewards)
        sizes = self.bank_sizes[rows]
        out = torch.empty_like(rewards)
        for m in np.unique(sizes):  # one table per distinct bank size (usually exactly one)
            sel = torch.from_numpy(sizes == m).to(rewards.device)
            t = torch.from_numpy(self.tables[int(m)]).to(rewards)
            out[sel] = t[j[sel]]
        return out

    def transform(self, prompt_ids: Any, rewards: Any) -> Any:
        """The KAPPO adaptive reward of each (prompt, online reward) pair.

        Binary: :math:`\\tilde R = \\hat a_k(x) R` (Eq. 7; rewards must be 0/1). Win-rate:
        :math:`T_j` with :math:`j = \\#\\{r^{ref}_{x,i} \\le r\\}` (Algorithm 2). Returns a
        tensor for tensor input, else a float64 numpy array.
        """
        r, restore = _as_tensor(rewards)
        return restore(self.transform_tensor(prompt_ids, r))

    def regression_target(self, prompt_ids: Any, rewards: Any) -> Any:
        """@k-A*PO target: :math:`\\hat a_k R - \\beta\\log\\hat Z` (binary) or :math:`T_j`
        (win-rate, :math:`Z = 1`); see :func:`bestk.kappo.kappo_apo_loss`."""
        r, restore = _as_tensor(rewards)
        out = self.transform_tensor(prompt_ids, r)
        if self.kind == "binary":
            out = out - torch.from_numpy(self.get("beta_log_z", prompt_ids)).to(out)
        return restore(out)

    # -- persistence -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        def clean(a: np.ndarray) -> list[Any]:
            if np.isfinite(a).all():
                return a.tolist()
            return [None if not math.isfinite(x) else x for x in a.tolist()]  # JSON has no inf

        per_prompt: dict[str, Any] = {}
        for name, arr in self.values.items():
            per_prompt[name] = arr.tolist() if arr.dtype.kind == "i" else clean(arr)
        return {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "kind": self.kind,
            "k": self.k,
            "beta": self.beta,
            "M": self.M,
            "bank_checksum": self.checksum,
            "num_prompts": self.num_prompts,
            "prompt_ids": self.prompt_ids.tolist(),
            "bank_sizes": self.bank_sizes.tolist(),
            "log_C": self.log_c,
            "tables": {str(m): t.tolist() for m, t in self.tables.items()},
            "values": per_prompt,
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write versioned JSON atomically (temp file in the same directory + ``os.replace``)."""
        path = Path(path)
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(self.to_dict(), allow_nan=False))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> Calibration:
        """Read a file written by :meth:`save`; ``ValueError`` on a malformed or foreign file."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ValueError(f"calibration file {str(path)!r} does not exist") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"calibration file {str(path)!r} is not valid JSON: {e}") from None
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> Calibration:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"{source} is not a bestk calibration file (format != {FORMAT!r})")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(
                f"{source}: unsupported calibration schema_version {version!r} "
                f"(this bestk reads {SCHEMA_VERSION})"
            )
        try:
            kind = data["kind"]
            if kind not in KINDS:
                raise ValueError(f"unknown kind {kind!r}")
            k = check_k(data["k"])
            beta = check_beta(data["beta"], "beta")
            ids = _normalise_ids(list(data["prompt_ids"]))
            sizes = np.asarray(data["bank_sizes"], dtype=np.int64)
            if sizes.shape != ids.shape:
                raise ValueError("bank_sizes and prompt_ids have different lengths")
            if ids.size == 0 or (ids[1:] <= ids[:-1]).any():
                raise ValueError("prompt_ids must be non-empty, sorted and unique")
            values: dict[str, np.ndarray] = {}
            for name, lst in data["values"].items():
                arr = np.asarray(
                    [np.inf if v is None else v for v in lst],
                    dtype=np.int64 if name in ("n_success",) else np.float64,
                )
                expected = sizes.sum() if name == "rewards" else ids.size
                if arr.shape != (expected,):
                    raise ValueError(f"values[{name!r}] has length {arr.size}, expected {expected}")
                values[name] = arr
            needed = ("n_success", "a_k", "beta_log_z") if kind == "binary" else ("rewards",)
            for name in needed:
                if name not in values:
                    raise ValueError(f"missing values[{name!r}]")
            tables = {int(m): np.asarray(t, dtype=np.float64) for m, t in data["tables"].items()}
            if kind == "winrate":
                for m in np.unique(sizes):
                    if int(m) not in tables or tables[int(m)].shape != (int(m) + 1,):
                        raise ValueError(f"missing or malformed win-rate table for M={int(m)}")
            log_c = data.get("log_C")
        except (KeyError, TypeError) as e:
            raise ValueError(f"{source}: malformed calibration file ({e!r})") from None
        except ValueError as e:
            raise ValueError(f"{source}: malformed calibration file: {e}") from None
        return cls(
            kind=kind, k=k, beta=beta, prompt_ids=ids, bank_sizes=sizes,
            checksum=str(data.get("bank_checksum", "")), values=values, tables=tables,
            log_c=None if log_c is None else float(log_c),
        )


def _check_binary(rewards: torch.Tensor) -> None:
    bad = (rewards != 0) & (rewards != 1)
    if bool(bad.any()):
        i = int(torch.nonzero(bad)[0])
        raise ValueError(
            f"reward at index {i} is {rewards[i].item()!r}; a binary calibration needs 0/1 rewards"
        )


def _as_tensor(rewards: Any):
    if isinstance(rewards, torch.Tensor):
        dtype = rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype()
        t = rewards.detach().to(torch.float64).reshape(-1)
        return t, lambda a: a.to(dtype)
    arr = np.asarray(rewards, dtype=np.float64).reshape(-1)
    t = torch.from_numpy(arr)
    return t, lambda a: a.cpu().numpy()


def calibrate(bank: Any, k: int, beta: float, kind: str = "binary") -> Calibration:
    """Build a :class:`Calibration` from a reference bank.

    Parameters
    ----------
    bank:
        Mapping prompt id -> sequence of M reference rewards (at least 2 per prompt; sizes may
        differ between prompts). Ids are ints, or anything else (stored as ``str``). Binary
        banks must hold 0/1 rewards. A path (``str`` / ``PathLike``) to a JSONL or parquet
        bank file is read with :func:`bestk.kappo.bank.load_bank`.
    k, beta:
        Objective parameter (integer >= 1) and KL strength (> 0).
    kind:
        ``"binary"`` (Algorithm 1) or ``"winrate"`` (Algorithm 2).
    """
    k = check_k(k)
    beta = check_beta(beta, "beta")
    if kind not in KINDS:
        raise ValueError(f"unknown calibration kind {kind!r}; valid: {', '.join(KINDS)}")
    if isinstance(bank, (str, os.PathLike)):
        from bestk.kappo.bank import load_bank  # bank.py imports this module

        b = load_bank(bank, binary=kind == "binary")
    else:
        b = bank if isinstance(bank, _Bank) else _bank_from_mapping(bank)
    return _calibrate_bank(b, k, beta, kind)


def _calibrate_bank(b: _Bank, k: int, beta: float, kind: str) -> Calibration:
    beta = check_beta(beta, "beta")
    checksum = bank_checksum(b.ids, b.sizes, b.values)
    owner = np.repeat(np.arange(len(b.ids)), b.sizes)
    if kind == "binary":
        nonbin = (b.values != 0) & (b.values != 1)
        if nonbin.any():
            i = int(owner[np.flatnonzero(nonbin)[0]])
            v = b.values[np.flatnonzero(nonbin)[0]]
            raise ValueError(
                f"prompt {b.ids[i].item()!r} has reward {float(v)!r}; a binary bank needs 0/1 "
                "rewards"
            )
        n = np.bincount(owner, weights=b.values, minlength=len(b.ids)).round().astype(np.int64)
        # Solve once per distinct (N, M) pair (at most M+1 of them), then scatter.
        pairs, inv = np.unique(np.stack([n, b.sizes], 1), axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        cal = binary_calibration(pairs[:, 0] / pairs[:, 1], k, beta)
        dpo = dpo_beta_eff(pairs[:, 0], pairs[:, 1], k, beta)
        values = {
            "n_success": n,
            "p_star": cal.p_star[inv],
            "a_k": cal.a_k[inv],
            "beta_eff": cal.beta_eff[inv],
            "beta_log_z": cal.beta_log_z[inv],
            "dpo_beta_eff": dpo[inv],
        }
        return Calibration(kind, k, beta, b.ids, b.sizes, checksum, values)
    tables = {int(m): winrate_table(int(m), k, beta) for m in np.unique(b.sizes)}
    return Calibration(
        kind, k, beta, b.ids, b.sizes, checksum, {"rewards": b.values}, tables,
        log_c=winrate_log_constant(k, beta),
    )
