"""The run directory of ``bestk train``: one writer, a readable config and log, safe re-runs.

* **One writer**: :class:`~bestk.train.run.lock.RunLock` (:mod:`bestk.train.run.lock`) for
  the life of a run.
* **Config and log**: :func:`read_run_config` and :func:`read_metrics` turn a missing, empty,
  malformed or hand-edited ``config.yaml`` / ``metrics.jsonl`` into a ``ValueError`` naming
  the file (and line).
* **Re-run = resume**: :func:`inspect_run` decides whether ``DIR`` is a new run, a run to
  start over (killed before its first checkpoint), one to resume from its newest verified
  checkpoint, or a complete one, and applies the resume policy (:func:`check_resume`): a
  resumed run may change only the keys of :data:`RESUME_FREE` and :data:`RESUME_ENVIRONMENT`.
* **Only bestk's files**: a run starts only in a new or empty directory
  (:func:`check_new_run_directory`); a start-over moves only the files bestk writes
  (:data:`RUN_FILES`), each attempt into a folder of its own (:func:`keep_previous_attempt`):
  nothing bestk did not write is ever moved or deleted, no attempt is ever deleted.
* **Run identity**: every checkpoint records the identity of the run that wrote it
  (:func:`run_identity`: a digest of its config) and its step; a checkpoint of another run or
  renamed to another step is refused (:func:`check_checkpoint_identity`).
* **Temporaries**: :func:`clean_temporaries` removes what killed atomic writes left behind.
"""

from __future__ import annotations

import copy
import errno
import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bestk._atomic import is_temporary, write_text_atomic
from bestk._records import loads_finite
from bestk.train.config import ResolvedTrainConfig, TrainConfig
from bestk.train.config.io import (
    apply_overrides,
    config_from_dict,
    config_to_dict,
    parse_yaml_config,
    yaml_error_line,
)
from bestk.train.run.lock import LOCK_NAME, RunLock, directory_names
from bestk.train.runtime.files import (
    checkpoint_state,
    checksum_path,
    latest_valid_checkpoint,
    list_checkpoints,
    orphan_checksums,
)

__all__ = [
    "RunDirectory",
    "resume_config",
    "RunState",
    "RESUME_FREE",
    "RESUME_ENVIRONMENT",
    "read_run_config",
    "read_metrics",
    "drop_metrics_after",
    "check_history",
    "config_changes",
    "check_resume",
    "clean_temporaries",
    "inspect_run",
    "prepare_directory",
    "write_run_config",
    "mark_finished",
    "finished_step",
    "finished_marker",
    "set_aside",
    "keep_previous_attempt",
    "attempt_folder",
    "is_attempt_folder",
    "move_into_attempt",
    "check_new_run_directory",
    "run_identity",
    "check_checkpoint_identity",
    "PREVIOUS_ATTEMPT",
    "RUN_FILES",
    "CONFIG_HEADER",
    "is_run_config",
    "check_no_links",
    "run_files",
]


#: Keys a resumed run may change: the training trajectory (weights, optimizer, every
#: ``phase: train`` record) stays bit-identical to an uninterrupted run with the new values.
#: ``max_steps`` may not go below the step already done.
RESUME_FREE: dict[str, str] = {
    "max_steps": "extends (or ends earlier) a run; never below the step already done",
    "eval.every": "evaluations draw from their own generators and change no weight",
    "checkpoint_every": "where checkpoints are written, not what is trained",
    "keep_checkpoints": "how many checkpoints stay on disk",
    "report_to": "where records are shown live (TensorBoard, W&B), not what is trained",
    "run_name": "the run's name in W&B",
    "eval.shared_start": "where the step-0 evaluation is shared, which is the same read or "
                         "sampled (done before the first checkpoint, so never by a resume)",
}

#: Keys a resumed run may change because they describe the machine, not the experiment. The
#: continuation is then correct but bit-identical to an uninterrupted run only on the same
#: device and thread count (floating-point reductions may be ordered differently).
RESUME_ENVIRONMENT: dict[str, str] = {
    "device": "the accelerator the run continues on",
    "threads": "torch CPU threads",
}

_IGNORED = ("out",)  # a run directory may be moved or renamed

# Every other key is refused on resume. Among them ``algorithm`` and ``kappo.*`` (k, beta, the
# bank, the calibration file, the @k-DPO pairs and labels) define what the run trains: its
# calibration.json and bank were made for them. ``rollout.n: null`` is stored resolved (the
# algorithm's default), so the same command resumes a run whatever default it picked.


# -- config.yaml ------------------------------------------------------------------------------
class RunDirectory:
    """The run directory ``out`` of one run, held from :meth:`open` to :meth:`release` (its
    :class:`RunLock`)."""

    def __init__(self, out: Path):
        self.out = out
        self._created = False
        self._lock: RunLock | None = None

    def open(self, cfg: ResolvedTrainConfig, mode: str, stored: TrainConfig | None,
             say: Callable[[str, str], None]) -> RunState:
        """Create the directory if needed, take its lock, remove temporary files an
        interrupted write left (``say``-ing so) and decide what to do with it
        (:func:`inspect_run` in ``mode``; its warnings and notes ``say``-ed). A directory
        that holds files but no bestk run is refused before anything is touched
        (:func:`check_new_run_directory`). A complete run in a directory that cannot be written
        (its lock cannot be taken: read-only media) is inspected without the lock: it is only
        read; any other run there raises the lock's ``OSError``."""
        check_new_run_directory(self.out, mode)
        check_no_links(self.out)
        self._created = not self.out.exists()
        self._lock = RunLock(prepare_directory(self.out))
        try:
            self._lock.acquire()
        except OSError as e:  # read-only media: a complete run is reported, never written
            state = _complete_unlocked(cfg, mode, stored, e)
        else:
            removed = clean_temporaries(self.out)
            if removed:
                say("note", f"removed {len(removed)} temporary file(s) left by an interrupted "
                    f"write: {', '.join(p.name for p in removed[:4])}")
            state = inspect_run(cfg, mode, stored)
        for msg in state.warnings:
            say("warning", msg)
        for msg in state.notes:
            say("note", msg)
        return state

    def begin(self, cfg: ResolvedTrainConfig, *, restart: bool, say: Callable[[str, str], None]
              ) -> None:
        """Write ``config.yaml`` of a run that starts; one that starts over first keeps the
        files of the attempt before it (:func:`keep_previous_attempt`, ``say``-ing where):
        starting over never truncates what the last attempt wrote."""
        kept = keep_previous_attempt(self.out) if restart else None
        if kept is not None:
            say("note", f"the files of the attempt started over are kept in {kept}")
        write_run_config(self.out, cfg)

    def discard_if_unused(self) -> None:
        """Remove the directory when this run created it and wrote nothing but its lock (a run
        refused or failed before it started leaves no trace)."""
        if self._created and self._lock is not None and self._lock.held and \
                {p.name for p in self.out.iterdir()} <= {".lock"}:
            shutil.rmtree(self.out, ignore_errors=True)

    def release(self) -> None:
        """Release the lock (idempotent)."""
        if self._lock is not None:
            self._lock.release()


def _complete_unlocked(cfg: ResolvedTrainConfig, mode: str, stored: TrainConfig | None,
                       error: OSError) -> RunState:
    """The state of a complete run in a directory that cannot be written (read-only media, no
    permission: its lock ``error``): a complete run is only read, so it is inspected without
    the lock; any other run (one to start or continue) re-raises ``error``."""
    if error.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
        raise error
    state = inspect_run(cfg, mode, stored)
    if state.kind != "complete":
        raise error
    return state


def read_run_config(directory: str | os.PathLike[str]) -> TrainConfig:
    """The :class:`TrainConfig` of the run in ``directory`` (its ``config.yaml``).

    A missing, empty, non-YAML, non-mapping or unknown-key file raises a one-line
    ``ValueError`` naming it.
    """
    directory = Path(directory)
    path = directory / "config.yaml"
    if not path.is_file():
        raise ValueError(f"{str(directory)!r} is not a run directory (no config.yaml there)")
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not a text file; it should hold the run's config") from None
    if not text.strip():
        raise ValueError(
            f"{path} is empty; it should hold the run's config (restore it, or start a new run "
            "with another --out)"
        )
    try:
        data = parse_yaml_config(text)
    except yaml.YAMLError as e:
        raise ValueError(f"{path} is not valid YAML: {yaml_error_line(e)}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a mapping of config keys, got {type(data).__name__}")
    try:
        return config_from_dict(data)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def resume_config(directory: str | os.PathLike[str],
                  overrides: Mapping[str, object] | list[str] | None = None
                  ) -> tuple[TrainConfig, TrainConfig]:
    """``(config, stored)`` to continue the run in ``directory``: its ``config.yaml`` (read
    once: ``stored``) with ``overrides`` applied (a nested dict, e.g. ``{"max_steps": 200}``,
    or ``key=value`` strings as ``--set`` takes them) and ``out`` set to ``directory``. What
    the overrides may change is checked later, against ``stored``
    (:func:`check_resume`)."""
    stored = read_run_config(directory)
    cfg = copy.deepcopy(stored)
    if isinstance(overrides, Mapping):
        cfg = config_from_dict(overrides, base=cfg)
    elif overrides:
        apply_overrides(cfg, list(overrides))
    cfg.out = str(directory)
    return cfg, stored


#: The first line of every config.yaml bestk writes: what tells a run's config from a user's
#: own config.yaml in a folder given as --out (:func:`is_run_config`).
CONFIG_HEADER = ("# bestk run config: written by bestk train; re-run the same command (or "
                 "bestk train --resume DIR) to continue the run\n")


def write_run_config(directory: str | os.PathLike[str], cfg: TrainConfig) -> None:
    """Write ``cfg`` as ``directory/config.yaml`` atomically, under :data:`CONFIG_HEADER`."""
    write_text_atomic(Path(directory) / "config.yaml",
                      CONFIG_HEADER + yaml.safe_dump(config_to_dict(cfg), sort_keys=False))


def is_run_config(directory: str | os.PathLike[str]) -> bool:
    """Whether ``directory/config.yaml`` is a bestk run's: it starts with
    :data:`CONFIG_HEADER`, or (a run of a bestk that wrote no header) the directory holds the
    run's log or checkpoints too. A user's own config.yaml in a project folder given as
    ``--out`` is neither, and is never taken for a run stopped early."""
    directory = Path(directory)
    try:
        with (directory / "config.yaml").open("rb") as f:
            if f.readline() == CONFIG_HEADER.encode():
                return True
    except OSError:
        return False
    return (directory / "metrics.jsonl").is_file() or (directory / "checkpoints").is_dir()


# -- metrics.jsonl ----------------------------------------------------------------------------
_STEP_KEY = {"sft": "sft_step", "train": "step", "eval": "step"}


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _check_record(row: object, where: str) -> None:
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected a JSON object, got {json.dumps(row)[:60]}")
    phase = row.get("phase")
    if phase not in _STEP_KEY:
        raise ValueError(f"{where}: 'phase' must be sft, train or eval, got {phase!r}")
    key = _STEP_KEY[phase]
    step = row.get(key)
    if not (isinstance(step, int) and not isinstance(step, bool) and step >= 0):
        raise ValueError(f"{where}: {key!r} must be an integer >= 0, got {step!r}")
    for k, v in row.items():
        if k != "phase" and v is not None and not _is_number(v):
            raise ValueError(f"{where}: {k!r} must be a number, got {v!r}")


def read_metrics(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl``; ``[]`` when the file does not exist.

    A torn last line (no newline: a write cut short by a crash) is skipped. Every other line
    that is not a well-formed record (a JSON object with a ``phase`` of sft / train / eval, an
    integer step and numeric values, none of them a bare ``NaN`` / ``Infinity``) raises
    ``ValueError`` naming the file and line.
    """
    p = Path(path)
    if not p.is_file():
        return []
    data = p.read_bytes()
    lines = data.split(b"\n")
    torn = lines.pop()  # b"" when the file ends with a newline
    rows = []
    for i, raw in enumerate(lines, start=1):
        where = f"{p} line {i}"
        try:
            row = loads_finite(raw, where)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ValueError(f"{where} is not a JSON record: {raw[:40]!r}") from None
        _check_record(row, where)
        rows.append(row)
    if torn.strip():
        where = f"{p} line {len(lines) + 1}"
        try:
            row = loads_finite(torn, where)
        except (UnicodeDecodeError, json.JSONDecodeError):
            return rows  # cut short by a crash
        _check_record(row, where)
        rows.append(row)
    return rows


def drop_metrics_after(path: str | os.PathLike[str], step: int) -> None:
    """Rewrite ``metrics.jsonl`` without the records of the RL steps after ``step`` (a run
    resumed from the checkpoint of ``step`` redoes them), atomically."""
    rows = [r for r in read_metrics(path) if r["phase"] == "sft" or r["step"] <= step]
    write_text_atomic(Path(path), "".join(json.dumps(r, allow_nan=False) + "\n" for r in rows))


def check_history(rows: list[dict[str, Any]], step: int, path: str | os.PathLike[str]) -> None:
    """The log holds what checkpoint ``step`` continues: the step-0 evaluation and exactly one
    training record for each of the steps 1..``step`` (raises ``ValueError`` otherwise)."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(
            f"{p} is missing, but the run's checkpoint (step {step}) continues it; restore the "
            "file, or start a new run with another --out"
        )
    steps = [r["step"] for r in rows if r["phase"] == "train" and r["step"] <= step]
    problems = []
    if not any(r["phase"] == "eval" and r["step"] == 0 for r in rows):
        problems.append("the step-0 evaluation")
    missing = sorted(set(range(1, step + 1)) - set(steps))
    if missing:
        problems.append(f"the training records of {len(missing)} of the steps 1..{step}")
    if len(steps) != len(set(steps)):
        problems.append("a single training record per step (some are repeated)")
    if problems:
        raise ValueError(
            f"{p} lacks {' and '.join(problems)}, which the checkpoint of step {step} "
            "continues (edited or truncated?); restore the file, or start a new run with "
            "another --out"
        )


# -- resume policy ----------------------------------------------------------------------------
_MISSING = object()


def _flatten(d: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    """Dotted leaf keys of a nested dict (an empty mapping contributes no key)."""
    flat: dict[str, object] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            flat.update(_flatten(v, key + "."))
        else:
            flat[key] = v
    return flat


def config_changes(old: TrainConfig, new: TrainConfig) -> list[tuple[str, object, object]]:
    """``[(dotted key, old value, new value), ...]`` of every differing leaf (mappings such as
    ``task.options`` are compared key by key), ``out`` excluded."""
    a, b = _flatten(config_to_dict(old)), _flatten(config_to_dict(new))
    changes = []
    for key in [*a, *(k for k in b if k not in a)]:
        if key in _IGNORED:
            continue
        va, vb = a.get(key, _MISSING), b.get(key, _MISSING)
        if va != vb or type(va) is not type(vb) and not (_is_number(va) and _is_number(vb)):
            changes.append((key, va, vb))
    return changes


def _show(v: object) -> str:
    text = "(unset)" if v is _MISSING else repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def check_resume(old: TrainConfig, new: TrainConfig, step: int, directory: str) -> list[str]:
    """Apply the resume policy to a run at ``step`` whose stored config is ``old``.

    Raises ``ValueError`` (one line naming every refused key with its old and new value) when
    ``new`` changes a key outside :data:`RESUME_FREE` / :data:`RESUME_ENVIRONMENT`, or lowers
    ``max_steps`` below ``step``; otherwise returns notes describing the allowed changes.
    """
    changes = config_changes(old, new)
    allowed = {**RESUME_FREE, **RESUME_ENVIRONMENT}
    refused = [c for c in changes if c[0] not in allowed]
    if refused:
        shown = ", ".join(f"{k} ({_show(a)} -> {_show(b)})" for k, a, b in refused[:6])
        more = f" and {len(refused) - 6} more" if len(refused) > 6 else ""
        raise ValueError(
            f"run directory {directory!r} holds a run with another config: {shown}{more}; "
            "a run continues only with the config it started with (may change: "
            f"{', '.join(allowed)}); use another --out for a new run"
        )
    if new.max_steps < step:
        raise ValueError(
            f"max_steps {new.max_steps} is below the {step} steps run {directory!r} has done: a "
            "run cannot be shortened (its model at the end is in final/)"
        )
    notes = []
    for key, a, b in changes:
        note = f"{key}: {_show(a)} -> {_show(b)}"
        if key in RESUME_ENVIRONMENT:
            note += (" (the continuation is bit-identical to an uninterrupted run only on the "
                     "same device and threads)")
        notes.append(note)
    return notes


# -- temporaries ------------------------------------------------------------------------------
def clean_temporaries(directory: str | os.PathLike[str]) -> list[Path]:
    """Remove what killed atomic writes left in a run directory (call it holding the lock): the
    temporaries of bestk's writes at its top and in ``checkpoints/`` -- names only bestk makes
    (:func:`bestk._atomic.is_temporary`: ``.bestk-tmp-...bestk-tmp``), never another file,
    dot-files included -- and checksum files whose checkpoint never landed. Returns the
    removed paths."""
    directory = Path(directory)
    removed: list[Path] = []
    candidates: list[Path] = []
    if directory.is_dir():
        candidates += [p for p in directory.iterdir() if is_temporary(p.name)]
    ckpt = directory / "checkpoints"
    if ckpt.is_dir():
        candidates += [p for p in ckpt.iterdir() if is_temporary(p.name)]
        candidates += orphan_checksums(ckpt)
    for p in candidates:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink(missing_ok=True)
        removed.append(p)
    return removed


# -- what a run directory holds -----------------------------------------------------------------
@dataclass
class RunState:
    """What :func:`inspect_run` found.

    ``kind``: ``"new"`` (nothing there yet), ``"restart"`` (a run killed before its first
    checkpoint: start it over), ``"resume"`` (continue from ``checkpoint`` at ``step``) or
    ``"complete"`` (``step == max_steps`` and ``final/`` and the report written for it, as
    :func:`mark_finished` records). ``damaged`` lists the newer checkpoints that failed
    verification, with why; ``notes`` say what was noticed (allowed config changes),
    ``warnings`` what went wrong (damaged checkpoints). ``identity`` is the run's
    (:func:`run_identity`), which its checkpoints record.
    """

    kind: str
    step: int = 0
    checkpoint: Path | None = None
    damaged: list[tuple[Path, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    identity: dict[str, Any] = field(default_factory=dict)


_FINISHED = ".finished"

#: What bestk writes at the top of a run directory besides ``config.yaml`` and the lock: the
#: log, samples, checkpoints, final model, report and plots, the KAPPO reference files, the
#: live-logging folders, the completion marker, and ``bestk compare``'s run key and result.
#: A start-over moves exactly these (those present) into its attempt folder; nothing else in
#: a run directory is bestk's, so nothing else is moved or deleted.
RUN_FILES = ("metrics.jsonl", "samples.jsonl", "checkpoints", "final", "report.md", "passk.png",
             "bestk.png", "training.png", "calibration.json", "bank.jsonl",
             "bank_tokens.safetensors", "tensorboard", "wandb", _FINISHED, "run.key",
             "result.json")


def mark_finished(directory: str | os.PathLike[str], step: int) -> None:
    """Record that ``final/`` and the report of ``directory`` are those of ``step`` (the last
    act of a run; a run extended later is complete again only once it is re-marked)."""
    write_text_atomic(Path(directory) / _FINISHED, f"{int(step)}\n")


def finished_marker(directory: str | os.PathLike[str]) -> int | None:
    """The step of ``directory``'s completion marker, whether or not ``final/`` is there
    (``None``: no readable marker)."""
    return _marked_step(Path(directory))


def _marked_step(directory: Path) -> int | None:
    """The step of ``directory``'s completion marker, whatever else is there (``None``: no
    readable marker)."""
    try:
        text = (directory / _FINISHED).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def finished_step(directory: str | os.PathLike[str]) -> int | None:
    """The step :func:`mark_finished` recorded, if ``final/`` is there too; else ``None``."""
    directory = Path(directory)
    step = _marked_step(directory)
    if step is None or not (directory / "final" / "config.json").is_file():
        return None
    return step


def prepare_directory(directory: str | os.PathLike[str]) -> Path:
    """Create the run directory (``ValueError`` if the path, or a parent, is an existing
    file)."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"--out {str(directory)!r} is a file, not a directory")
    for parent in directory.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"--out {str(directory)!r} cannot be a directory: its parent "
                                 f"{str(parent)!r} is a file")
            break
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def run_files(directory: str | os.PathLike[str]) -> list[tuple[str, Path]]:
    """``(what, path)`` for every file and folder bestk writes in the run ``directory``
    (``config.yaml``, its lock and marker, :data:`RUN_FILES`, earlier attempts): the paths an
    output option of a command that reads the run may not name (``bestk eval --run DIR
    --json DIR/config.yaml`` would leave a run that can neither resume nor be evaluated)."""
    directory = Path(directory)
    names = ["config.yaml", LOCK_NAME, _FINISHED, *RUN_FILES]
    names += sorted(n for n in directory_names(directory) if is_attempt_folder(n))
    return [(f"a file of the run {str(directory)!r}", directory / n) for n in names]


def check_no_links(directory: str | os.PathLike[str]) -> None:
    """Refuse, in one line, a run directory whose ``config.yaml`` or one of :data:`RUN_FILES`
    (``final/``, ``checkpoints/``, ...) is a symbolic link: bestk replaces them by renames and
    removes the old ones, which would break the link or write through it into another folder
    (a ``final/`` linked to a publish folder)."""
    directory = Path(directory)
    for name in ("config.yaml", *RUN_FILES):
        path = directory / name
        if path.is_symlink():
            raise ValueError(
                f"{str(path)!r} is a symbolic link (to {os.readlink(path)!r}); bestk replaces "
                f"{name} in place and will not write through a link or remove it: remove the "
                "link (copy the run's files where you want them after it ends)")


def is_attempt_folder(name: str) -> bool:
    """Whether ``name`` is one :func:`attempt_folder` makes (``previous-attempt``, ``-2``...)."""
    return re.fullmatch(rf"{PREVIOUS_ATTEMPT}(-[0-9]+)?", name) is not None


def check_new_run_directory(directory: str | os.PathLike[str], mode: str = "auto") -> None:
    """Refuse, in one line and touching nothing, a ``directory`` without a run's
    ``config.yaml`` (:func:`is_run_config`: a user's own config.yaml is not one) that holds
    anything but what bestk writes before it (its lock, the temporaries of a killed first
    write): bestk starts a run only in a new or empty directory, and never moves or deletes a
    file it did not write. Files of a bestk run without its config, and ``mode`` ``"resume"``
    (there must be a run), are refused too. Nothing to check when a run's config is there."""
    directory = Path(directory)
    if not directory.is_dir() or (directory / "config.yaml").exists() and \
            is_run_config(directory):
        return
    where = str(directory)
    if mode == "resume":
        what = "its config.yaml is not a bestk run's" if (directory / "config.yaml").exists() \
            else "no config.yaml there"
        raise ValueError(f"--resume {where!r}: {what} (not a run directory)")
    names = sorted(n for n in directory_names(directory) if n != LOCK_NAME and not is_temporary(n))
    ours = [n for n in names if n in RUN_FILES or is_attempt_folder(n)]
    users_config = "config.yaml" in names
    if ours and not users_config:
        raise ValueError(
            f"{where!r} holds run files ({', '.join(ours)}) but no config.yaml; choose "
            "another --out (or empty it)"
        )
    if names:
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        why = "its config.yaml is not a run's" if users_config else "no config.yaml"
        raise ValueError(
            f"--out {where!r} is not empty and is not a bestk run ({why}): it holds {shown}; "
            "bestk starts a run only in a new or empty directory and never moves or deletes "
            "files it did not write: choose another --out"
        )


def _canonical(v: object) -> object:
    """``v`` as JSON compares it across a YAML round trip: integral floats as ints, tuples as
    lists."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, (list, tuple)):
        return [_canonical(x) for x in v]
    if isinstance(v, Mapping):
        return {str(k): _canonical(x) for k, x in v.items()}
    return v


def run_identity(cfg: TrainConfig) -> dict[str, Any]:
    """The identity of the run ``cfg`` configures, as its checkpoints record it:
    ``{"digest": 16 hex digits, "config": {dotted key: value}}``, over every key that defines
    its trajectory (all but :data:`RESUME_FREE`, :data:`RESUME_ENVIRONMENT` and ``out``, so
    an allowed change on resume keeps it)."""
    skip = {*RESUME_FREE, *RESUME_ENVIRONMENT, *_IGNORED}
    config = {k: _canonical(v) for k, v in _flatten(config_to_dict(cfg)).items()
              if k not in skip}
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return {"digest": hashlib.sha256(text.encode()).hexdigest()[:16], "config": config}


def check_checkpoint_identity(checkpoint: Path, identity: Mapping[str, Any]) -> list[str]:
    """Refuse (a one-line ``ValueError`` naming both) a checkpoint that is not this run's at the
    step its name says: its state holds another step (renamed, its checksum recomputed), or the
    identity of a run with another config (copied from it; :func:`run_identity`). Keys only one
    of the two configs has (a bestk version that added or removed one) are not compared.
    Returns a note for a checkpoint written before checkpoints recorded their run (its step is
    checked, its config cannot be)."""
    named = int(checkpoint.name[5:12])
    state = checkpoint_state(checkpoint)
    if state.get("step") != named:
        raise ValueError(
            f"checkpoint {str(checkpoint)!r} holds step {state.get('step')} but is named for "
            f"step {named} (renamed?); restore the run's own checkpoint of step {named}, or "
            "delete it to resume from the one before"
        )
    theirs = state.get("run")
    if theirs is None:
        return [f"checkpoint {checkpoint.name} records no run identity (written by an older "
                "bestk): its step is checked, its config cannot be"]
    if not isinstance(theirs, dict) or not isinstance(theirs.get("config"), dict):
        raise ValueError(f"checkpoint {str(checkpoint)!r} holds an unreadable run identity")
    if theirs.get("digest") == identity["digest"]:
        return []
    ours, their_cfg = identity["config"], theirs["config"]
    differ = [(k, their_cfg[k], v) for k, v in ours.items()
              if k in their_cfg and _canonical(their_cfg[k]) != v]
    if not differ:
        return [f"checkpoint {checkpoint.name} was written with config keys this bestk no "
                "longer or not yet has; the keys both have match"]
    shown = ", ".join(f"{k} ({_show(a)} there, {_show(b)} here)" for k, a, b in differ[:4])
    more = f" and {len(differ) - 4} more" if len(differ) > 4 else ""
    raise ValueError(
        f"checkpoint {str(checkpoint)!r} belongs to another run (copied from it?): it records "
        f"config digest {theirs.get('digest')}, this run's is config digest "
        f"{identity['digest']}: {shown}{more}; restore the run's own checkpoint (or move this "
        "one out of checkpoints/ to continue from the one before), or start a new run with "
        "another --out"
    )


def inspect_run(cfg: ResolvedTrainConfig, mode: str = "auto", stored: TrainConfig | None = None
                ) -> RunState:
    """Decide what to do with the run directory ``cfg.out`` for a run configured by ``cfg``.

    ``mode``: ``"auto"`` (new run, or continue the one there), ``"resume"`` (there must be a
    run) or ``"new"`` (there must not be one). ``stored``: the directory's ``config.yaml`` when
    the caller has read it already (a resume), so it is read once. Raises a one-line
    ``ValueError`` when the directory holds a different run (:func:`check_resume`), a run
    without a usable config, log or checkpoint, files that are not a bestk run's
    (:func:`check_new_run_directory`), or a checkpoint of another run or step
    (:func:`check_checkpoint_identity`). Reads only; call it holding the lock.
    """
    if cfg.out is None:
        raise ValueError("inspect_run needs a resolved config (out is null)")
    out = Path(cfg.out)
    where = str(out)
    identity = run_identity(cfg)
    if not (out / "config.yaml").exists() or not is_run_config(out):
        check_new_run_directory(out, mode)
        return RunState("new", identity=identity)
    if stored is None:
        stored = read_run_config(out)
    if mode == "new":
        raise ValueError(
            f"run directory {where!r} already holds a run; continue it (same config, or "
            "--resume) or choose another --out"
        )
    ckpt_dir = out / "checkpoints"
    if ckpt_dir.exists() and not ckpt_dir.is_dir():
        raise ValueError(f"{str(ckpt_dir)!r} is a file, not the run's checkpoint directory; "
                         "move it away (or choose another --out)")
    finished = finished_step(out)
    if not list_checkpoints(ckpt_dir):
        if finished is not None:  # final/ and its marker: complete, whatever else is missing
            notes = check_resume(stored, cfg, finished, where)
            if finished >= cfg.max_steps:
                return RunState("complete", finished, notes=notes, identity=identity)
            raise ValueError(
                f"run {where!r} finished at step {finished} and its checkpoints are gone, so "
                f"it cannot continue to max_steps={cfg.max_steps}; start a new run with "
                "another --out (its final/ model can be a warm start: --set model.path=...)"
            )
        marked = _marked_step(out)
        if marked is not None:  # finished once, but neither final/ nor a checkpoint is left
            model = "final/ model" if not (out / "final").exists() else \
                "final/ model (final/config.json)"
            raise ValueError(
                f"run {where!r} finished at step {marked} (its {_FINISHED} marker says so), but "
                f"its {model} and its checkpoints/ are gone: there is nothing to report or "
                "continue from; restore final/ (or a checkpoint), or start a new run with "
                "another --out"
            )
        notes = check_resume(stored, cfg, 0, where)
        return RunState("restart", notes=[*notes, f"{where!r} holds a run stopped before its "
                                          "first checkpoint: starting it over"],
                        identity=identity)
    checkpoint, damaged = latest_valid_checkpoint(ckpt_dir)
    if checkpoint is None:
        why = "; ".join(f"{p.name}: {reason}" for p, reason in damaged)
        raise ValueError(
            f"no valid checkpoint in {ckpt_dir} ({why}); restore one, or start a new run with "
            "another --out"
        )
    step = int(checkpoint.name[5:12])
    notes = check_resume(stored, cfg, 0, where)  # the config first: refused keys named
    notes += check_checkpoint_identity(checkpoint, identity)  # this run's, at the step named
    check_resume(stored, cfg, step, where)  # only then is its step the steps done
    check_history(read_metrics(out / "metrics.jsonl"), step, out / "metrics.jsonl")
    warnings = [
        f"checkpoint {p.name} is damaged ({reason}); set aside as {p.name}.damaged"
        for p, reason in damaged
    ]
    if damaged:
        warnings.append(f"resuming from the newest valid checkpoint, {checkpoint.name}")
    complete = step >= cfg.max_steps and finished == step
    return RunState("complete" if complete else "resume", step, checkpoint, damaged, notes,
                    warnings, identity)


#: where a restarted run keeps the files of the attempt it starts over (see
#: :func:`keep_previous_attempt`)
PREVIOUS_ATTEMPT = "previous-attempt"


def attempt_folder(directory: str | os.PathLike[str], name: str = PREVIOUS_ATTEMPT) -> Path:
    """Where the next start-over of the run in ``directory`` keeps the attempt it starts over:
    ``previous-attempt/``, or, that one taken, the first free ``previous-attempt-2/``,
    ``-3/``, ... (``name``: another first name, ``seed0.previous-attempt``)."""
    directory = Path(directory)
    dest, i = directory / name, 1
    while os.path.lexists(dest):
        i += 1
        dest = directory / f"{name}-{i}"
    return dest


def move_into_attempt(directory: str | os.PathLike[str], paths: list[Path]) -> Path | None:
    """Move ``paths`` (entries of ``directory``) into a new :func:`attempt_folder` of it;
    ``None`` when there is nothing to move."""
    if not paths:
        return None
    dest = attempt_folder(directory)
    dest.mkdir()
    for p in paths:
        os.replace(p, dest / p.name)
    return dest


def keep_previous_attempt(directory: str | os.PathLike[str]) -> Path | None:
    """Move the files a run stopped before its first checkpoint left (those of
    :data:`RUN_FILES`: ``metrics.jsonl``, ``final/``, reports, calibration, logs; not the
    ``checkpoints/`` folder, nor ``config.yaml`` or the lock) into a folder of their own
    (:func:`attempt_folder`) before the run starts over, so that starting over never
    truncates, overwrites or deletes data, an earlier attempt's included, and moves no file
    bestk did not write. Returns the folder, or ``None`` when there was nothing to keep."""
    directory = Path(directory)
    return move_into_attempt(directory, [
        directory / n for n in RUN_FILES if n != "checkpoints" and os.path.lexists(directory / n)
        and not (n == "metrics.jsonl" and (directory / n).stat().st_size == 0)])


def set_aside(damaged: list[tuple[Path, str]]) -> None:
    """Rename damaged checkpoints to ``*.damaged`` (out of the rotation, kept for a look) and
    drop their checksum files."""
    for p, _ in damaged:
        if p.exists():
            os.replace(p, p.with_name(p.name + ".damaged"))
        checksum_path(p).unlink(missing_ok=True)
