"""The directory of a comparison (``bestk compare --out DIR``): the promises ``bestk train``
makes for a run directory, kept for a grid of runs.

* **One writer.** :class:`CompareDirectory` holds ``DIR/.lock`` (:class:`RunLock`) for the
  life of the comparison: a second ``bestk compare`` on ``DIR``, or one into the ``--out`` of
  a running ``bestk train``, is refused in one line while the first holds it.
* **Only bestk's files.** A comparison starts only in a new or empty directory or in a grid of
  its own, never inside another grid (:func:`check_compare_directory`; nor does a ``bestk
  train`` run): a file it did not write anywhere in the grid's layout -- a user's
  ``precious.txt`` in a seed's folder, a ``compare.md`` of their own, a ``bestk train`` run
  with checkpoints where a seed's run would go -- is refused before anything is touched, naming
  what is there.
* **No finished run lost.** The grid's settings are recorded in ``compare.json`` when it
  starts (:func:`grid_record`); a re-run whose base config or methods differ is refused,
  naming the keys (:func:`check_same_grid`). ``--no-resume`` keeps the grid it starts over:
  every file of the earlier grid moves into ``DIR/previous-attempt/`` (``-2/``, ...) first
  (:func:`keep_previous_grid`); a run of the grid whose key changed (its SFT weights came out
  different) is moved beside itself (``seed0.previous-attempt/``), never deleted
  (:func:`set_run_aside`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bestk._atomic import is_temporary, write_text_atomic
from bestk.train.config import TrainConfig
from bestk.train.config.io import config_from_dict, config_to_dict
from bestk.train.run.directory import (
    PREVIOUS_ATTEMPT,
    RUN_FILES,
    attempt_folder,
    config_changes,
    is_attempt_folder,
    is_run_config,
    move_into_attempt,
    prepare_directory,
)
from bestk.train.run.lock import LOCK_NAME, RunLock, directory_names
from bestk.train.run.nesting import check_outside_grids, grid_record_of

__all__ = ["CompareDirectory", "check_compare_directory",
           "check_same_grid", "grid_record",
           "keep_previous_grid", "set_run_aside", "COMPARE_FILES", "RUN_EXTRA"]

#: What a comparison writes at the top of its directory (folders end in ``/``).
COMPARE_FILES = ("compare.json", "results.json", "compare.md", "compare.png", "_sft/", "_start/",
                 "_bank/", "_calibration/", "sweep/", LOCK_NAME)
#: What a comparison adds to a run directory beside :data:`RUN_FILES`.
RUN_EXTRA = ("config.yaml", LOCK_NAME, ".finished", "run.key", "result.json")
#: Folders of a grid: a method's (``grpo/``: ``seed0/``, ...), or a validation rate's
#: (``lr0.001/``: method folders), named so.
_SEED = re.compile(r"seed[0-9]+")
_ASIDE = re.compile(rf"seed[0-9]+\.{PREVIOUS_ATTEMPT}(-[0-9]+)?")
_RATE = re.compile(r"lr[0-9.e+-]+")


def _foreign_in_run(run: Path, prefix: str) -> list[str]:
    """What in the seed folder ``run`` is not a comparison run's: files bestk does not write,
    or a ``bestk train`` run that got somewhere (checkpoints, a final model) without the
    comparison's ``run.key``."""
    names = directory_names(run)
    bad = [f"{prefix}{n}" for n in sorted(names) if n not in (*RUN_FILES, *RUN_EXTRA)
           and not is_temporary(n) and not is_attempt_folder(n)]
    if "config.yaml" in names and "run.key" not in names and (
            not is_run_config(run) or names & {"checkpoints", "final", ".finished"}):
        bad.append(f"{prefix} (a bestk train run, not one of a comparison's)")
    return bad


def _foreign_in_method(folder: Path, prefix: str) -> list[str]:
    bad: list[str] = []
    for n in sorted(directory_names(folder)):
        path = folder / n
        if _SEED.fullmatch(n) and path.is_dir() and not path.is_symlink():
            bad += _foreign_in_run(path, f"{prefix}{n}/")
        elif not (_ASIDE.fullmatch(n) and path.is_dir()) and not is_temporary(n):
            bad.append(f"{prefix}{n}")
    return bad


def _foreign(out: Path, also: Sequence[str]) -> list[str]:
    """What in ``out`` a comparison did not write (``also``: names its caller keeps there)."""
    names = directory_names(out)
    ours = {n.rstrip("/"): n.endswith("/") for n in (*COMPARE_FILES, *also)}
    mine = "compare.json" in names and grid_record_of(out) is not None
    if "config.yaml" in names and is_run_config(out):
        return [f"a bestk train run ({', '.join(sorted(names)[:4])})"]
    bad: list[str] = []
    for n in sorted(names):
        path = out / n
        if n in ours and (path.is_dir() and not path.is_symlink()) == ours[n]:
            if n in ("results.json", "compare.md", "compare.png", "compare.json") and not mine:
                bad.append(n)  # a summary without the grid's record: someone else's file
            continue
        if is_temporary(n) or (is_attempt_folder(n) and path.is_dir()):
            continue
        if not path.is_dir() or path.is_symlink():
            bad.append(n)
        elif _RATE.fullmatch(n):
            for m in sorted(directory_names(path)):
                bad += _foreign_in_method(path / m, f"{n}/{m}/") if (path / m).is_dir() \
                    else [f"{n}/{m}"]
        else:
            bad += _foreign_in_method(path, f"{n}/")
    return bad


def check_compare_directory(out: str | os.PathLike[str], also: Sequence[str] = ()) -> None:
    """Refuse, in one line and touching nothing, an ``out`` that holds anything a comparison
    did not write (module docstring); a missing or empty ``out`` is a new grid."""
    check_outside_grids(out)
    out = Path(out)
    if not out.is_dir():
        return
    bad = _foreign(out, also)
    if bad:
        shown = ", ".join(bad[:4]) + (f" and {len(bad) - 4} more" if len(bad) > 4 else "")
        raise ValueError(
            f"--out {str(out)!r} holds files that are not a bestk comparison's: {shown}; "
            "bestk compare writes only into a new or empty directory or a grid of its own, "
            "and never moves or deletes files it did not write: choose another --out")


def grid_record(base: TrainConfig, methods: Sequence[Mapping[str, object]]) -> dict[str, Any]:
    """What identifies a grid for :func:`check_same_grid`: its base config and its methods
    (each ``{"label", "estimator", "options", "overrides", "control_of"}``)."""
    return {"base": config_to_dict(base), "methods": [dict(m) for m in methods]}


def check_same_grid(out: str | os.PathLike[str], record: Mapping[str, Any]) -> None:
    """Refuse, in one line, a grid whose base config or a method of the same label differs
    from the one ``out/compare.json`` records, once a run of it has started: its runs would be
    redone and the finished ones replaced. Methods and seeds may be added; a grid recorded by
    an older bestk (no base config) is not checked here (its runs are keyed one by one)."""
    out = Path(out)
    old = grid_record_of(out)
    if old is None or "base" not in old or not _has_runs(out):
        return  # no record to hold to, or no run that other settings would replace
    changes = [f"{k}: {_show(a)} -> {_show(b)}" for k, a, b in config_changes(
        config_from_dict(old["base"]), config_from_dict(record["base"]))]
    before = {m.get("label"): m for m in old["methods"] if isinstance(m, dict)}
    for m in record["methods"]:
        was = before.get(m["label"])
        if was is not None and json.dumps(was, sort_keys=True, default=str) != json.dumps(
                m, sort_keys=True, default=str):
            changes.append(f"method {m['label']!r}: {_show(was)} -> {_show(m)}")
    if changes:
        shown = "; ".join(changes[:3]) + (f" and {len(changes) - 3} more" if len(changes) > 3
                                          else "")
        raise ValueError(
            f"--out {str(out)!r} holds a grid with other settings ({shown}): its finished runs "
            "would be replaced; continue it with its own settings, start it over with "
            "--no-resume (its files are kept in previous-attempt/), or choose another --out")


def _has_runs(out: Path) -> bool:
    """Whether a run of the grid in ``out`` has started (a seed folder with its ``run.key``)."""
    return any(True for pattern in ("*/seed*/run.key", "lr*/*/seed*/run.key",
                                    "sweep/lr*/*/seed*/run.key") for _ in out.glob(pattern))


def _show(v: object) -> str:
    text = json.dumps(v, default=str) if not isinstance(v, str) else repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def keep_previous_grid(out: str | os.PathLike[str], also: Sequence[str] = ()) -> Path | None:
    """Move every file of the grid in ``out`` (what :func:`check_compare_directory` accepts,
    but the lock, the caller's ``also`` names and earlier attempts) into a folder of its own
    (``previous-attempt/``, ``-2/``, ...) before the grid starts over; ``None``: nothing to
    keep."""
    out = Path(out)
    skip = {LOCK_NAME, *(n.rstrip("/") for n in also)}
    return move_into_attempt(out, [out / n for n in sorted(directory_names(out))
                                   if n not in skip and not is_attempt_folder(n)
                                   and not is_temporary(n)])


def set_run_aside(run: str | os.PathLike[str]) -> Path:
    """Move the seed folder ``run`` to ``seedS.previous-attempt`` (``-2``, ...) beside it,
    whole: a run the grid redoes keeps what it had."""
    run = Path(run)
    dest = attempt_folder(run.parent, f"{run.name}.{PREVIOUS_ATTEMPT}")
    os.replace(run, dest)
    return dest


class CompareDirectory:
    """``out`` held by one comparison, from :meth:`open` to :meth:`release` (its lock)."""

    def __init__(self, out: str | os.PathLike[str], also: Sequence[str] = ()):
        self.out, self.also = Path(out), tuple(also)
        self.record: dict[str, Any] = {}  # compare.json as open() wrote it
        self._lock: RunLock | None = None

    def open(self, record: Mapping[str, Any] | None, *, resume: bool = True) -> Path | None:
        """Check ``out`` (:func:`check_compare_directory`), take its lock, check the grid
        against ``record`` (:func:`check_same_grid`, when resuming) or keep the earlier grid
        (:func:`keep_previous_grid`, when not), and record ``record`` in ``compare.json``.
        Returns where an earlier grid was kept, if it was."""
        check_compare_directory(self.out, self.also)
        self._lock = RunLock(prepare_directory(self.out))
        self._lock.acquire()
        try:
            check_compare_directory(self.out, self.also)  # again, holding the lock
            kept = None
            if record is not None and resume:
                check_same_grid(self.out, record)
            elif not resume:
                kept = keep_previous_grid(self.out, self.also)
            if record is not None:  # the methods of every grid run here, by label
                old = grid_record_of(self.out) or {}
                methods = {m["label"]: m for m in old.get("methods", [])
                           if isinstance(m, dict) and "label" in m}
                methods.update({m["label"]: m for m in record["methods"]})
                self.record = {**old, **record, "methods": list(methods.values())}
                write_text_atomic(self.out / "compare.json",
                                  json.dumps(self.record, indent=1, default=str))
        except BaseException:
            self.release()
            raise
        return kept

    def release(self) -> None:
        """Release the lock (idempotent)."""
        if self._lock is not None:
            self._lock.release()

    def __enter__(self) -> CompareDirectory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
