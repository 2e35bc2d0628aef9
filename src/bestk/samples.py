"""Unbiased pass@k and best@k of any engine's scored samples (``bestk metrics FILE``).

A file of scored samples -- JSONL, CSV or parquet, one row per sample (or one row per prompt
whose reward cell is a list, one value per sample) -- becomes a table with, for every ``k``:

* ``pass@k = mean_p [1 - C(n_p - c_p, k) / C(n_p, k)]`` (Chen et al. 2021, eq. 1;
  :func:`bestk.metrics.pass_at_k`), ``c_p`` the samples of prompt ``p`` that succeed (reward
  1 when the rewards are 0/1, or ``reward >= threshold``);
* ``best@k = mean_p sum_{i>=k} r_(i) C(i-1, k-1) / C(n_p, k)`` over each prompt's rewards
  sorted ascending (:func:`bestk.metrics.best_at_k`), unbiased for the expected maximum of
  ``k`` draws;
* a percentile bootstrap interval over prompts (the prompts are the sampled units; the
  samples of one prompt are resampled with it).

Prompts may have different numbers of samples ``n_p``. ``k`` runs from 1 to the smallest
``n_p`` by default, so every ``k`` averages the same prompts; with ``all_k`` it runs to the
largest ``n_p``, each ``k`` over the prompts that have at least ``k`` samples (the table's
``prompts`` column says how many).
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bestk._optional import pyplot, require
from bestk._options import int_option, real_option
from bestk._records import check_regular_file, iter_jsonl
from bestk.figures import save_figure
from bestk.metrics import best_at_k, pass_at_k

__all__ = ["FORMATS", "PROMPT_KEYS", "REWARD_KEYS", "ScoredSamples", "MetricRow",
           "SampleMetrics", "file_format", "parse_where", "read_samples", "sample_metrics",
           "metrics_text", "plot_metrics"]

#: The file formats :func:`read_samples` reads, by suffix.
FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet"}
#: Column names tried, in order, when no prompt column is named.
PROMPT_KEYS = ("prompt_id", "doc_id", "prompt", "id", "question")
#: Column names tried, in order, when no reward column is named.
REWARD_KEYS = ("reward", "rewards", "correct", "score", "exact_match", "acc", "pass")

_CSV_TRUE = {"true": 1.0, "false": 0.0}


@dataclass(frozen=True)
class ScoredSamples:
    """Samples grouped by prompt: ``rewards[i]`` is a sample of prompt ``prompts[group[i]]``."""

    source: str
    prompt_key: str
    reward_key: str
    prompts: list[str]
    group: np.ndarray  # (N,) int64 prompt index of each sample
    rewards: np.ndarray  # (N,) float64, finite

    @property
    def sizes(self) -> np.ndarray:
        """``(P,)`` samples per prompt."""
        return np.bincount(self.group, minlength=len(self.prompts))

    @property
    def binary(self) -> bool:
        """Every reward is 0 or 1."""
        return bool(np.isin(self.rewards, (0.0, 1.0)).all())


def file_format(path: str | os.PathLike, fmt: str | None = None) -> str:
    """``fmt`` when given (one of :data:`FORMATS`' values), else the format of ``path``'s
    suffix; a ``ValueError`` naming the suffix otherwise."""
    known = sorted(set(FORMATS.values()))
    if fmt is not None:
        if fmt not in known:
            raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(known)}")
        return fmt
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"{path}: cannot tell the format from the suffix {suffix!r} (known: "
                         f"{', '.join(sorted(FORMATS))}); name it with --format")
    return FORMATS[suffix]


def _rows(path: Path, fmt: str) -> Iterator[dict[str, Any]]:
    if fmt == "jsonl":
        yield from (row for _, row in iter_jsonl(path))
    elif fmt == "csv":
        with path.open(encoding="utf-8", newline="") as f:
            try:
                yield from csv.DictReader(f)
            except UnicodeDecodeError as e:
                raise ValueError(f"{str(path)!r} is not UTF-8 text (byte {e.object[e.start]:#04x}"
                                 "); convert it to UTF-8") from None
    else:
        pq = require("pyarrow.parquet", extra="train")
        yield from pq.read_table(path).to_pylist()


def _lookup(row: dict[str, Any], key: str) -> tuple[bool, Any]:
    """``row[key]``, or the nested value of a dotted ``key`` (``metrics.correct``)."""
    if key in row:
        return True, row[key]
    value: Any = row
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def _pick_key(row: dict[str, Any], key: str | None, candidates: Sequence[str], what: str,
              option: str, where: str) -> str:
    if key is not None:
        if not _lookup(row, key)[0]:
            raise ValueError(f"{where}: no {what} column {key!r}; the columns are "
                             f"{', '.join(map(repr, row))}")
        return key
    for name in candidates:
        if name in row:
            return name
    raise ValueError(f"{where}: no {what} column among {', '.join(candidates)}; name it with "
                     f"{option} (the columns are {', '.join(map(repr, row))})")


def _prompt_id(value: Any, where: str) -> str:
    if value is None or isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}: the prompt id is empty")
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def _reward(value: Any, fmt: str, where: str) -> float:
    if isinstance(value, str) and fmt == "csv":
        text = value.strip()
        value = _CSV_TRUE.get(text.lower(), text)
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"{where}: the reward {text!r} is not a number") from None
    if isinstance(value, (bool, np.bool_)):
        return float(value)
    if not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{where}: the reward must be a number, a boolean or a list of them, "
                         f"got {type(value).__name__} {value!r}")
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"{where}: the reward is {out}")
    return out


def _rewards(value: Any, fmt: str, where: str) -> list[float]:
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError(f"{where}: the reward list is empty")
        return [_reward(v, fmt, f"{where} item {i}") for i, v in enumerate(value)]
    if value is None:
        raise ValueError(f"{where}: the reward is empty")
    return [_reward(value, fmt, where)]


def _matches(row: dict[str, Any], where: dict[str, str]) -> bool:
    """Every ``key: text`` of ``where`` holds: the row's value written as JSON (a string
    bare) is ``text``."""
    for key, text in where.items():
        found, value = _lookup(row, key)
        if not found:
            return False
        if (value if isinstance(value, str) else json.dumps(value)) != text:
            return False
    return True


def parse_where(items: Sequence[str]) -> dict[str, str]:
    """``["step=30", "task=add"]`` -> ``{"step": "30", "task": "add"}``; a ``ValueError``
    for an item without ``=`` or a key given twice."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--where needs KEY=VALUE, got {item!r}")
        if key in out:
            raise ValueError(f"--where names {key!r} twice")
        out[key] = text
    return out


def read_samples(path: str | os.PathLike, *, prompt_key: str | None = None,
                 reward_key: str | None = None, fmt: str | None = None,
                 where: dict[str, str] | None = None) -> ScoredSamples:
    """The scored samples of ``path``: one row per sample, or one row per prompt with a list
    of rewards. Without ``prompt_key`` / ``reward_key`` the first of :data:`PROMPT_KEYS` /
    :data:`REWARD_KEYS` that the first row has is used; a dotted key reads a nested field.
    Rewards are numbers or booleans (in CSV: their text); anything else, a missing or empty
    cell, or a non-finite reward is a ``ValueError`` naming the file and row. ``where``
    keeps the rows whose fields equal the given text (:func:`parse_where`: a run's
    ``samples.jsonl`` holds every logged step, ``{"step": "30"}`` keeps one)."""
    path = Path(path)
    fmt = file_format(path, fmt)
    if not path.exists():
        raise ValueError(f"{path}: no such file")
    check_regular_file(path, "samples file")  # not /dev/zero, a FIFO or a directory
    index: dict[str, int] = {}
    group: list[int] = []
    rewards: list[float] = []
    keys: tuple[str, str] | None = None
    rows = 0
    for row_no, row in enumerate(_rows(path, fmt), 1):
        rows += 1
        if where and not _matches(row, where):
            continue
        at = f"{path} row {row_no}"
        if keys is None:
            keys = (_pick_key(row, prompt_key, PROMPT_KEYS, "prompt", "--prompt", at),
                    _pick_key(row, reward_key, REWARD_KEYS, "reward", "--reward", at))
        found_p, pid = _lookup(row, keys[0])
        found_r, cell = _lookup(row, keys[1])
        if not (found_p and found_r):
            raise ValueError(f"{at}: no {keys[0] if not found_p else keys[1]!r} column")
        p = index.setdefault(_prompt_id(pid, at), len(index))
        values = _rewards(cell, fmt, at)
        group.extend([p] * len(values))
        rewards.extend(values)
    if keys is None:
        raise ValueError(f"{path}: no samples (the file has no rows)" if not rows else
                         f"{path}: no row of {rows} matches --where "
                         + " ".join(f"{k}={v}" for k, v in (where or {}).items()))
    return ScoredSamples(str(path), keys[0], keys[1], list(index),
                         np.asarray(group, dtype=np.int64), np.asarray(rewards, dtype=np.float64))


@dataclass(frozen=True)
class MetricRow:
    """One ``k``: the prompts with at least ``k`` samples, and the mean and interval of pass@k
    (``None`` without a notion of success) and best@k over them."""

    k: int
    prompts: int
    pass_at_k: float | None
    pass_lo: float | None
    pass_hi: float | None
    best_at_k: float
    best_lo: float
    best_hi: float


@dataclass(frozen=True)
class SampleMetrics:
    """What ``bestk metrics`` reports: the file's shape, how success was read, the rows."""

    source: str
    prompt_key: str
    reward_key: str
    num_prompts: int
    num_samples: int
    n_min: int
    n_max: int
    binary: bool
    threshold: float | None
    ci: float
    n_boot: int
    seed: int
    rows: list[MetricRow]

    def as_dict(self) -> dict[str, Any]:
        """The JSON ``bestk metrics --json`` writes."""
        return asdict(self)


def _interval(values: np.ndarray, weights: np.ndarray, ci: float) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (``(P,)``) under resampled
    prompt counts ``weights`` (``(B, P)``)."""
    boots = weights @ values / values.size
    alpha = (1 - ci) / 2
    lo, hi = np.quantile(boots, [alpha, 1 - alpha])
    return float(lo), float(hi)


def _success(samples: ScoredSamples, threshold: float | None) -> np.ndarray | None:
    if threshold is not None:
        return samples.rewards >= threshold
    return samples.rewards == 1.0 if samples.binary else None


def sample_metrics(samples: ScoredSamples, *, all_k: bool = False,
                   threshold: float | None = None, ci: float = 0.95, n_boot: int = 1000,
                   seed: int = 0) -> SampleMetrics:
    """pass@k and best@k of ``samples`` for ``k = 1..min n_p`` (``all_k``: ``..max n_p``,
    each ``k`` over the prompts with ``n_p >= k``), each with a ``ci`` percentile bootstrap
    interval over prompts from ``n_boot`` resamples (seeded by ``seed`` and ``k``).

    pass@k counts a sample as a success when its reward is at least ``threshold``; without
    one, only 0/1 rewards have pass@k (then equal to best@k) and other rewards report
    ``None``."""
    n_boot = int_option("sample_metrics", "n_boot", n_boot, minimum=1)
    seed = int_option("sample_metrics", "seed", seed, minimum=0)
    ci = real_option("sample_metrics", "ci", ci)
    if not 0 < ci < 1:
        raise ValueError(f"sample_metrics option ci must be in (0, 1), got {ci}")
    if threshold is not None:
        threshold = real_option("sample_metrics", "threshold", threshold)
    sizes = samples.sizes
    success = _success(samples, threshold)
    counts = None if success is None else np.bincount(samples.group, weights=success,
                                                      minlength=sizes.size)
    rows = []
    for k in range(1, int(sizes.max() if all_k else sizes.min()) + 1):
        keep = sizes >= k
        weights = np.random.default_rng([seed, k]).multinomial(
            int(keep.sum()), np.full(int(keep.sum()), 1.0 / keep.sum()), size=n_boot)
        in_keep = keep[samples.group]
        best = np.asarray(best_at_k(samples.rewards[in_keep], k, samples.group[in_keep]),
                          dtype=np.float64)
        p_mean = p_lo = p_hi = None
        if counts is not None:
            per = np.asarray(pass_at_k(sizes[keep], counts[keep].round().astype(np.int64), k),
                             dtype=np.float64)
            p_mean, (p_lo, p_hi) = float(per.mean()), _interval(per, weights, ci)
        rows.append(MetricRow(k, int(keep.sum()), p_mean, p_lo, p_hi, float(best.mean()),
                              *_interval(best, weights, ci)))
    return SampleMetrics(samples.source, samples.prompt_key, samples.reward_key,
                         len(samples.prompts), int(samples.rewards.size), int(sizes.min()),
                         int(sizes.max()), samples.binary, threshold, ci, n_boot, seed, rows)


def _cell(mean: float | None, lo: float | None, hi: float | None) -> str:
    return "-" if mean is None else f"{mean:.4f} [{lo:.4f}, {hi:.4f}]"


def metrics_text(m: SampleMetrics) -> str:
    """The table ``bestk metrics`` prints: a header saying what was read, one line per ``k``
    (plain text, so a pipe or a file reads it as a terminal does)."""
    success = ("0/1 rewards: pass@k = best@k" if m.binary and m.threshold is None else
               "pass@k needs 0/1 rewards or --threshold" if m.threshold is None else
               f"success: reward >= {m.threshold:g}")
    lines = [f"{m.source}: {m.num_prompts} prompts, {m.num_samples} samples, "
             f"{m.n_min}..{m.n_max} per prompt (prompt: {m.prompt_key!r}, reward: "
             f"{m.reward_key!r}; {success})",
             f"unbiased estimates, {m.ci:.0%} bootstrap intervals over prompts "
             f"({m.n_boot} resamples)",
             f"{'k':>4} {'prompts':>8}  {'pass@k [interval]':<26}  best@k [interval]"]
    for r in m.rows:
        lines.append(f"{r.k:>4} {r.prompts:>8}  {_cell(r.pass_at_k, r.pass_lo, r.pass_hi):<26}"
                     f"  {_cell(r.best_at_k, r.best_lo, r.best_hi)}")
    return "\n".join(lines) + "\n"


def plot_metrics(m: SampleMetrics, path: str | os.PathLike) -> None:
    """pass@k (where defined) and best@k against ``k`` with their intervals, as a PNG."""
    plt = pyplot(who="bestk metrics --plot")
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ks = [r.k for r in m.rows]
    series: list[tuple[str, list[tuple[float | None, float | None, float | None]]]] = [
        ("best@k", [(r.best_at_k, r.best_lo, r.best_hi) for r in m.rows])]
    if m.rows[0].pass_at_k is not None and not (m.binary and m.threshold is None):
        series.append(("pass@k", [(r.pass_at_k, r.pass_lo, r.pass_hi) for r in m.rows]))
    elif m.binary and m.threshold is None:
        series = [("pass@k = best@k", series[0][1])]
    for label, vals in series:
        mean, lo, hi = (np.asarray(v, dtype=float) for v in zip(*vals, strict=True))
        ax.plot(ks, mean, marker="o", ms=3, label=label)
        ax.fill_between(ks, lo, hi, alpha=0.25)
    ax.set_xlabel("k")
    ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    ax.set_ylabel("unbiased estimate")
    ax.set_title(f"{Path(m.source).name}: {m.num_prompts} prompts, {m.ci:.0%} intervals",
                 fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)
