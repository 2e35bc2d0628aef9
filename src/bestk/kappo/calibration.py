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

:class:`CalibrationKind` holds what differs between the two: one class per kind
(:class:`BinaryKind`, :class:`WinrateKind`), one instance of each in :data:`KIND_SPECS`, keyed by
the name a file, ``bestk calibrate --kind`` and ``kappo.kind`` use. ``Calibration.kind`` stays that
name (the file format is unchanged); ``Calibration.kind_spec`` is the object, and code outside
this module asks it (``cal.kind_spec.binary``, ``.metric``, ``.std_cancels``, ...) instead of
comparing names.

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
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, overload

import numpy as np
import torch

from bestk._atomic import JSONValue, atomic_path
from bestk._inputs import (
    ArrayInput,
    Numbers,
    NumbersOut,
    first_non_binary,
    rewards_to_tensor,
    to_output,
)
from bestk._options import load_path_cached
from bestk.kappo._validate import check_k, check_positive
from bestk.kappo.bank import Bank, BankMapping, bank_from_mapping, load_bank, normalise_ids
from bestk.kappo.binary import binary_calibration, dpo_beta_eff
from bestk.kappo.winrate import winrate_log_constant, winrate_table

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from bestk.groups import Groups, Labels

__all__ = [
    "Calibration", "calibrate", "load_calibration", "bank_checksum", "check_beta",
    "check_calibration_args", "SCHEMA_VERSION", "KINDS", "MIN_BETA", "CalibrationKind",
    "BinaryKind", "WinrateKind", "BINARY", "WINRATE", "KIND_SPECS", "calibration_kind",
]

SCHEMA_VERSION = 1
FORMAT = "bestk.kappo.calibration"

#: Smallest KL strength a calibration accepts. The binary solver bisects a log-odds bracket of
#: width k/beta 200 times and the win-rate transform works in beta-scaled logs; in float64
#: both break down far below this bound (first wrong values near beta = 1e-46 for k = 256 and
#: 1e-65, respectively), so 1e-30 keeps every value exact with a wide margin.
MIN_BETA = 1e-30


def check_beta(beta: object, name: str = "beta") -> float:
    """``beta`` must be a finite number >= :data:`MIN_BETA`."""
    beta = check_positive(beta, name)
    if beta < MIN_BETA:
        raise ValueError(
            f"{name} must be >= {MIN_BETA:g} (below it the calibration exceeds float64 "
            f"precision), got {beta!r}"
        )
    return beta


def bank_checksum(ids: np.ndarray, sizes: np.ndarray, values: np.ndarray) -> str:
    """SHA-256 of the bank: sorted prompt ids, bank sizes, and the rewards (float64, sorted)."""
    h = hashlib.sha256()
    h.update(b"ids:" + json.dumps(ids.tolist()).encode())
    h.update(b"sizes:" + np.ascontiguousarray(sizes, dtype="<i8").tobytes())
    h.update(b"rewards:" + np.ascontiguousarray(values, dtype="<f8").tobytes())
    return "sha256:" + h.hexdigest()


@dataclass(eq=False)
class Calibration:
    """A reference calibration for one (kind, k, beta); see :func:`calibrate`.

    Per-prompt arrays are aligned with ``prompt_ids`` (sorted). For ``kind="binary"`` the values
    are ``n_success``, ``p_star``, ``a_k``, ``beta_eff`` (``inf`` where a_k = 0), ``beta_log_z``
    and ``dpo_beta_eff``; for ``kind="winrate"`` the sorted ``rewards`` of each prompt (flat,
    with ``bank_sizes``) and the tables ``{M: T_0..T_M}``. ``kind`` is the kind's name (as saved);
    :attr:`kind_spec` is its :class:`CalibrationKind`, which does what differs between kinds.
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

    @property
    def kind_spec(self) -> CalibrationKind:
        """The :class:`CalibrationKind` of :attr:`kind` (:data:`KIND_SPECS`)."""
        return calibration_kind(self.kind)

    def __repr__(self) -> str:
        return (
            f"Calibration(kind={self.kind!r}, k={self.k}, beta={self.beta}, M={self.M}, "
            f"prompts={self.num_prompts})"
        )

    # -- lookups -----------------------------------------------------------------------------
    def index_of(self, prompt_ids: Labels) -> np.ndarray:
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

    def get(self, name: str, prompt_ids: Labels) -> np.ndarray:
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

    def transform_tensor(self, prompt_ids: Labels, rewards: torch.Tensor) -> torch.Tensor:
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
        return self.kind_spec.transform_rows(self, rows, rewards)

    @overload
    def transform(self, prompt_ids: Labels, rewards: torch.Tensor) -> torch.Tensor: ...

    @overload
    def transform(self, prompt_ids: Labels, rewards: ArrayInput) -> np.ndarray: ...

    def transform(self, prompt_ids: Labels, rewards: Numbers) -> NumbersOut:
        """The KAPPO adaptive reward of each (prompt, online reward) pair.

        Binary: :math:`\\tilde R = \\hat a_k(x) R` (Eq. 7; rewards must be 0/1). Win-rate:
        :math:`T_j` with :math:`j = \\#\\{r^{ref}_{x,i} \\le r\\}` (Algorithm 2). Returns a
        tensor for tensor input, else a float64 numpy array.
        """
        r, restore = _as_tensor(rewards)
        return restore(self.transform_tensor(prompt_ids, r))

    @overload
    def regression_target(self, prompt_ids: Labels, rewards: torch.Tensor) -> torch.Tensor: ...

    @overload
    def regression_target(self, prompt_ids: Labels, rewards: ArrayInput) -> np.ndarray: ...

    def regression_target(self, prompt_ids: Labels, rewards: Numbers) -> NumbersOut:
        """@k-A*PO target: :math:`\\hat a_k R - \\beta\\log\\hat Z` (binary) or :math:`T_j`
        (win-rate, :math:`Z = 1`); see :func:`bestk.kappo.kappo_apo_loss`."""
        r, restore = _as_tensor(rewards)
        out = self.transform_tensor(prompt_ids, r)
        return restore(self.kind_spec.regression_target(self, prompt_ids, out))

    # -- persistence -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, JSONValue]:
        """The calibration file's JSON object (:meth:`save`)."""

        def clean(a: np.ndarray) -> list[float | None]:
            if np.isfinite(a).all():
                return a.tolist()
            return [None if not math.isfinite(x) else x for x in a.tolist()]  # JSON has no inf

        per_prompt: dict[str, JSONValue] = {}
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
    def from_dict(cls, data: object, source: str = "<dict>") -> Calibration:
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
            ids = normalise_ids(list(data["prompt_ids"]))
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
            spec = KIND_SPECS[kind]
            for name in spec.required_values:
                if name not in values:
                    raise ValueError(f"missing values[{name!r}]")
            tables = {int(m): np.asarray(t, dtype=np.float64) for m, t in data["tables"].items()}
            spec.check_tables(tables, sizes)
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


class CalibrationKind(ABC):
    """A calibration kind: which rewards its bank holds, what a calibration of it stores, and
    how it turns an online reward into KAPPO's adaptive reward.

    One subclass per kind (:class:`BinaryKind`, :class:`WinrateKind`), one instance of each in
    :data:`KIND_SPECS`. Everything that depends on the kind is here: code elsewhere asks the
    object (``cal.kind_spec`` or :func:`calibration_kind`), never compares kind names.
    """

    #: The name in calibration files, ``bestk calibrate --kind`` and ``kappo.kind``.
    name: ClassVar[str]
    #: Its rewards are 0/1 successes and it targets pass@k (Algorithm 1), else any finite
    #: rewards and max@k (Algorithm 2). @k-DPO's (success, failure) pairs need a binary kind.
    binary: ClassVar[bool]
    #: The @k metric it targets, as bestk's metric names spell it: ``"pass"`` (pass@k) or
    #: ``"best"`` (best@k, the expected max of k rewards: max@k).
    metric: ClassVar[str]
    #: Its adaptive reward is a per-prompt multiple of the reward, which dividing a group by
    #: its reward std cancels (KAPPO Eq. 139): std-normalised GRPO loses it.
    std_cancels: ClassVar[bool]
    #: Per-prompt values (``Calibration.values``) a calibration of this kind must hold.
    required_values: ClassVar[tuple[str, ...]]

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    @abstractmethod
    def bank_values(self, rewards: np.ndarray,
                    success: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """What a calibration of this kind sees of raw ``rewards`` (float64): the 0/1
        ``success(rewards)`` or the rewards themselves."""

    @abstractmethod
    def build(self, bank: Bank, k: int, beta: float) -> Calibration:
        """The calibration of a validated bank (k and beta checked)."""

    def check_tables(self, tables: dict[int, np.ndarray], sizes: np.ndarray) -> None:
        """``ValueError`` if a loaded file lacks tables this kind needs (none by default)."""
        return None

    @abstractmethod
    def transform_rows(self, cal: Calibration, rows: np.ndarray,
                       rewards: torch.Tensor) -> torch.Tensor:
        """The adaptive reward of finite float64 ``rewards`` at calibration ``rows``."""

    def regression_target(self, cal: Calibration, prompt_ids: Labels,
                          adaptive: torch.Tensor) -> torch.Tensor:
        """@k-A*PO's target from the adaptive reward: minus :math:`\\beta\\log\\hat Z(x)`
        where the optimum's partition function is not 1."""
        return adaptive

    @abstractmethod
    def grpo_advantages(self, cal: Calibration, rows: np.ndarray, groups: Groups,
                        rewards: torch.Tensor, eps: float) -> torch.Tensor:
        """@k-GRPO advantages (``kappo_grpo``) of float64 ``rewards`` grouped by ``groups``,
        ``rows`` the calibration row of each group."""

    @abstractmethod
    def summary_rows(self, cal: Calibration) -> list[tuple[str, str]]:
        """(quantity, value) rows describing ``cal`` (``bestk calibrate``'s table)."""


class BinaryKind(CalibrationKind):
    r"""0/1 rewards, pass@k (Algorithm 1): per prompt N(x) successes of M, and from
    :math:`\hat q = N/M` the multiplier :math:`\hat a_k`, :math:`\beta\log\hat Z` and
    @k-DPO's :math:`\beta_{eff}` (Eq. 149). Adaptive reward :math:`\hat a_k(x) R` (Eq. 7)."""

    name = "binary"
    binary = True
    metric = "pass"
    std_cancels = True
    required_values = ("n_success", "a_k", "beta_log_z")

    def bank_values(self, rewards: np.ndarray,
                    success: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        return success(rewards).astype(np.float64)

    def build(self, bank: Bank, k: int, beta: float) -> Calibration:
        b = bank
        checksum = bank_checksum(b.ids, b.sizes, b.values)
        owner = np.repeat(np.arange(len(b.ids)), b.sizes)
        bad = first_non_binary(b.values)
        if bad is not None:
            i, v = int(owner[bad]), b.values[bad]
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
        return Calibration(self.name, k, beta, b.ids, b.sizes, checksum, values)

    def transform_rows(self, cal: Calibration, rows: np.ndarray,
                       rewards: torch.Tensor) -> torch.Tensor:
        _check_binary(rewards)
        a = torch.from_numpy(cal.values["a_k"][rows]).to(rewards)
        return a * rewards

    def regression_target(self, cal: Calibration, prompt_ids: Labels,
                          adaptive: torch.Tensor) -> torch.Tensor:
        return adaptive - torch.from_numpy(cal.get("beta_log_z", prompt_ids)).to(adaptive)

    def grpo_advantages(self, cal: Calibration, rows: np.ndarray, groups: Groups,
                        rewards: torch.Tensor, eps: float) -> torch.Tensor:
        # Eq. 140: a_k after standardising, which would cancel it (Eq. 139). 0/1 rewards are
        # checked by bestk.advantages.
        a_k = torch.from_numpy(cal.values["a_k"][rows]).to(rewards)
        return groups.broadcast(a_k) * groups.standardize(rewards, eps, ddof=1)

    def summary_rows(self, cal: Calibration) -> list[tuple[str, str]]:
        n = cal.values["n_success"]
        a = cal.values["a_k"]
        qs = np.quantile(a, [0.0, 0.5, 1.0])
        d = cal.values["dpo_beta_eff"]
        return [
            ("prompts with N = 0 (a_k = k)", f"{int((n == 0).sum()):,}"),
            ("prompts with N = M", f"{int((n == cal.bank_sizes).sum()):,}"),
            ("mean reference pass rate", f"{float((n / cal.bank_sizes).mean()):.4f}"),
            ("a_k min / median / max", " / ".join(f"{x:.4g}" for x in qs)),
            ("@k-DPO beta_eff min / max", f"{d.min():.4g} / {d.max():.4g}"),
        ]


class WinrateKind(CalibrationKind):
    r"""Finite rewards of any value, max@k (Algorithm 2): the sorted reference rewards of each
    prompt and the shared table :math:`T_0..T_M`; adaptive reward :math:`T_j`,
    :math:`j = \#\{\text{reference rewards} \le r\}` (Eq. 146), with :math:`Z = 1`."""

    name = "winrate"
    binary = False
    metric = "best"
    std_cancels = False
    required_values = ("rewards",)

    def bank_values(self, rewards: np.ndarray,
                    success: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        return np.asarray(rewards, dtype=np.float64)

    def build(self, bank: Bank, k: int, beta: float) -> Calibration:
        b = bank
        checksum = bank_checksum(b.ids, b.sizes, b.values)
        tables = {int(m): winrate_table(int(m), k, beta) for m in np.unique(b.sizes)}
        return Calibration(
            self.name, k, beta, b.ids, b.sizes, checksum, {"rewards": b.values}, tables,
            log_c=winrate_log_constant(k, beta),
        )

    def check_tables(self, tables: dict[int, np.ndarray], sizes: np.ndarray) -> None:
        for m in np.unique(sizes):
            if int(m) not in tables or tables[int(m)].shape != (int(m) + 1,):
                raise ValueError(f"missing or malformed win-rate table for M={int(m)}")

    def transform_rows(self, cal: Calibration, rows: np.ndarray,
                       rewards: torch.Tensor) -> torch.Tensor:
        j = cal._win_index(rows, rewards)
        sizes = cal.bank_sizes[rows]
        out = torch.empty_like(rewards)
        for m in np.unique(sizes):  # one table per distinct bank size (usually exactly one)
            sel = torch.from_numpy(sizes == m).to(rewards.device)
            t = torch.from_numpy(cal.tables[int(m)]).to(rewards)
            out[sel] = t[j[sel]]
        return out

    def grpo_advantages(self, cal: Calibration, rows: np.ndarray, groups: Groups,
                        rewards: torch.Tensor, eps: float) -> torch.Tensor:
        s = cal.transform_rows(rows[groups.index.cpu().numpy()], rewards)
        return groups.standardize(s, eps, ddof=1)

    def summary_rows(self, cal: Calibration) -> list[tuple[str, str]]:
        rows = [(f"T_0 / T_M (M={m})", f"{t[0]:.5g} / {t[-1]:.5g}")
                for m, t in sorted(cal.tables.items())]
        return [*rows, ("log C", f"{cal.log_c:.6g}")]


BINARY = BinaryKind()
WINRATE = WinrateKind()
#: Kind name -> its :class:`CalibrationKind` (the names calibration files store).
KIND_SPECS: dict[str, CalibrationKind] = {kind.name: kind for kind in (BINARY, WINRATE)}
#: The kind names.
KINDS = tuple(KIND_SPECS)


def calibration_kind(kind: object, what: str = "calibration kind") -> CalibrationKind:
    """The :class:`CalibrationKind` named ``kind`` (an instance is returned as is);
    ``ValueError`` naming ``what`` and the valid names otherwise."""
    if isinstance(kind, CalibrationKind):
        return kind
    if not isinstance(kind, str) or kind not in KIND_SPECS:
        raise ValueError(f"unknown {what} {kind!r}; valid: {', '.join(KINDS)}")
    return KIND_SPECS[kind]


def _check_binary(rewards: torch.Tensor) -> None:
    i = first_non_binary(rewards)
    if i is not None:
        raise ValueError(
            f"reward at index {i} is {rewards[i].item()!r}; a binary calibration needs 0/1 rewards"
        )


def _as_tensor(rewards: Numbers) -> tuple[torch.Tensor, Callable[[torch.Tensor], NumbersOut]]:
    """Flat float64 rewards and the function giving a result back in the caller's type."""
    t, dtype = rewards_to_tensor(rewards)
    return t.reshape(-1), lambda a: to_output(a, dtype, "transformed rewards")


def calibrate(bank: Bank | BankMapping | str | os.PathLike, k: int, beta: float,
              kind: str | CalibrationKind = "binary") -> Calibration:
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
        ``"binary"`` (Algorithm 1) or ``"winrate"`` (Algorithm 2), or its
        :class:`CalibrationKind`.
    """
    k, beta = check_calibration_args(k, beta, kind)
    spec = calibration_kind(kind)
    if isinstance(bank, (str, os.PathLike)):
        b = load_bank(bank, binary=spec.binary)
    else:
        b = bank if isinstance(bank, Bank) else bank_from_mapping(bank)
    return spec.build(b, k, beta)


def check_calibration_args(k: object, beta: object, kind: object, *,
                           names: tuple[str, str, str] = ("k", "beta", "calibration kind"),
                           ) -> tuple[int, float]:
    """The checks of :func:`calibrate`'s ``k``, ``beta`` and ``kind`` (``ValueError`` naming
    each by ``names``, e.g. ``("--k", "--beta", "--kind")`` on the command line); returns
    ``(k, beta)`` as ``int`` and ``float``."""
    k = check_k(k, names[0])
    beta = check_beta(beta, names[1])
    calibration_kind(kind, names[2])
    return k, beta


def load_calibration(value: object) -> Calibration:
    """A :class:`Calibration` from itself or from the path of a ``bestk calibrate`` file.

    A file is loaded once per (absolute path, modification time, size) and cached
    (:func:`bestk._options.load_path_cached`), so a trainer or a reward function calling this
    every step reads it once, and a rewritten file is read again. ``ValueError`` for anything
    else, or a file that cannot be read.
    """
    if isinstance(value, Calibration):
        return value
    if not isinstance(value, (str, os.PathLike)):
        raise ValueError(
            "a calibration must be a path to a `bestk calibrate` file or a "
            f"bestk.kappo.Calibration, got {type(value).__name__}"
        )
    path = os.path.abspath(os.fspath(value))
    try:
        os.stat(path)
    except OSError as e:
        raise ValueError(f"calibration file {path!r} cannot be read: {e.strerror}") from None
    return load_path_cached(Calibration.load, path)

