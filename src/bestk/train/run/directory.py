"""The run directory of ``bestk train``: one writer, a readable config and log, safe re-runs.

* **One writer**: :class:`RunLock` holds an exclusive ``flock`` on ``DIR/.lock`` (which stores
  the holder's pid) for the life of a run; a second writer gets
  :class:`RunDirectoryBusy` naming that pid. The kernel drops the lock when the process
  dies, so a ``kill -9`` never leaves a stale lock.
* **Config and log**: :func:`read_run_config` and :func:`read_metrics` turn a missing, empty,
  malformed or hand-edited ``config.yaml`` / ``metrics.jsonl`` into a ``ValueError`` naming
  the file (and line).
* **Re-run = resume**: :func:`inspect_run` decides whether ``DIR`` is a new run, a run to
  start over (killed before its first checkpoint), one to resume from its newest verified
  checkpoint, or a complete one, and applies the resume policy (:func:`check_resume`): a
  resumed run may change only the keys of :data:`RESUME_FREE` and :data:`RESUME_ENVIRONMENT`.
* **Temporaries**: :func:`clean_temporaries` removes what killed atomic writes left behind.
"""

from __future__ import annotations

import copy
import errno
import json
import os
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bestk._atomic import write_text_atomic
from bestk.train.config import (
    ResolvedTrainConfig,
    TrainConfig,
    apply_overrides,
    config_from_dict,
    config_to_dict,
    parse_yaml_config,
    yaml_error_line,
)
from bestk.train.run.checkpoint import (
    checksum_path,
    latest_valid_checkpoint,
    list_checkpoints,
    orphan_checksums,
)

__all__ = [
    "RunDirectory",
    "resume_config",
    "RunLock",
    "RunDirectoryBusy",
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
    "set_aside",
    "keep_previous_attempt",
    "PREVIOUS_ATTEMPT",
]

LOCK_NAME = ".lock"

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


class RunDirectoryBusy(ValueError):
    """Another process holds the run directory's lock."""


class RunLock:
    """An exclusive lock on a run directory (``DIR/.lock``, holding the holder's pid).

    ``fcntl.flock`` on POSIX (``msvcrt.locking`` on Windows): it belongs to the open file, so
    it is released by :meth:`release`, when this object is garbage-collected, or by the
    kernel when the process dies.

    A lock file this lock created in a directory the run then wrote nothing to (a refused
    ``--out .``, a config error found under the lock) is removed on :meth:`release`: a refused
    command leaves no trace. Otherwise the file stays (its content is meaningful only while
    locked).
    """

    def __init__(self, directory: str | os.PathLike[str]):
        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self._fd: int | None = None
        self._found: set[str] | None = None  # names in the directory when this lock created it

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> RunLock:
        """Take the lock or raise :class:`RunDirectoryBusy` naming the holder's pid."""
        if self._fd is not None:
            return self
        while True:
            found: set[str] | None = _names(self.directory)
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:
                fd, found = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666), None
            try:
                _lock_fd(fd)
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK, errno.EDEADLK):
                    os.close(fd)
                    raise
                holder = _read_pid(fd)
                os.close(fd)
                who = f"pid {holder}" if holder is not None else "pid unknown"
                raise RunDirectoryBusy(
                    f"run directory {str(self.directory)!r} is in use by another bestk process "
                    f"({who}); two writers would mix their runs: wait for it to finish, or "
                    "choose another --out"
                ) from None
            if _is_file_at(fd, self.path):
                break
            # its previous holder removed the file between our open and our lock: lock the
            # file now at the path (or create it) instead
            _unlock_fd(fd)
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        self._found = found
        return self

    def release(self) -> None:
        """Drop the lock; remove the lock file if this lock created it and nothing else was
        written to the directory meanwhile."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                if self._found is not None and _names(self.directory) <= {*self._found,
                                                                          LOCK_NAME}:
                    self.path.unlink(missing_ok=True)  # still held: no one else can take it
            except OSError:
                pass
            finally:
                try:
                    _unlock_fd(fd)
                finally:
                    os.close(fd)

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # at interpreter exit modules may already be gone; the OS unlocks
            pass


if sys.platform != "win32":  # POSIX
    import fcntl

    def _lock_fd(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def _unlock_fd(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)

else:  # pragma: no cover - Windows
    import msvcrt

    _WIN_LOCK_OFFSET = 1 << 20  # lock a byte past the pid so others can still read it

    def _lock_fd(fd: int) -> None:
        os.lseek(fd, _WIN_LOCK_OFFSET, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)

    def _unlock_fd(fd: int) -> None:
        os.lseek(fd, _WIN_LOCK_OFFSET, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)


def _names(directory: Path) -> set[str]:
    """The names in ``directory`` (empty when it cannot be listed)."""
    try:
        return set(os.listdir(directory))
    except OSError:
        return set()


def _is_file_at(fd: int, path: Path) -> bool:
    """Whether the open file ``fd`` is the file at ``path`` (not one removed since)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return os.path.samestat(os.fstat(fd), st)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None


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
        (:func:`inspect_run` in ``mode``; its warnings and notes ``say``-ed)."""
        self._created = not self.out.exists()
        self._lock = RunLock(prepare_directory(self.out))
        self._lock.acquire()
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


def write_run_config(directory: str | os.PathLike[str], cfg: TrainConfig) -> None:
    """Write ``cfg`` as ``directory/config.yaml`` atomically."""
    write_text_atomic(
        Path(directory) / "config.yaml", yaml.safe_dump(config_to_dict(cfg), sort_keys=False)
    )


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
    integer step and numeric values) raises ``ValueError`` naming the file and line.
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
            row = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ValueError(f"{where} is not a JSON record: {raw[:40]!r}") from None
        _check_record(row, where)
        rows.append(row)
    if torn.strip():
        try:
            row = json.loads(torn.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return rows  # cut short by a crash
        _check_record(row, f"{p} line {len(lines) + 1}")
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
_TOP_TEMPORARIES = (".final-tmp", ".final-old")
_TOP_TEMP_PREFIXES = (".config.yaml.", ".metrics.jsonl.", ".report.md.", ".calibration.json.",
                      ".bank.jsonl.", ".bank_tokens.safetensors.")


def clean_temporaries(directory: str | os.PathLike[str]) -> list[Path]:
    """Remove what killed atomic writes left in a run directory (call it holding the lock):
    ``checkpoints/.*`` (checkpoint and safetensors temporaries), checksum files whose
    checkpoint never landed, ``.final-tmp`` / ``.final-old`` and ``.config.yaml.*`` /
    ``.metrics.jsonl.*`` / ``.report.md.*`` and those of the KAPPO reference files
    (``.calibration.json.*``, ``.bank.jsonl.*``, ``.bank_tokens.safetensors.*``). Returns the
    removed paths."""
    directory = Path(directory)
    removed: list[Path] = []
    candidates: list[Path] = []
    if directory.is_dir():
        candidates += [p for p in directory.iterdir()
                       if p.name in _TOP_TEMPORARIES or p.name.startswith(_TOP_TEMP_PREFIXES)]
    ckpt = directory / "checkpoints"
    if ckpt.is_dir():
        candidates += [p for p in ckpt.iterdir() if p.name.startswith(".")]
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
    ``warnings`` what went wrong (damaged checkpoints).
    """

    kind: str
    step: int = 0
    checkpoint: Path | None = None
    damaged: list[tuple[Path, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


_RUN_FILES = ("metrics.jsonl", "checkpoints", "final", "report.md", "calibration.json")
_FINISHED = ".finished"


def mark_finished(directory: str | os.PathLike[str], step: int) -> None:
    """Record that ``final/`` and the report of ``directory`` are those of ``step`` (the last
    act of a run; a run extended later is complete again only once it is re-marked)."""
    write_text_atomic(Path(directory) / _FINISHED, f"{int(step)}\n")


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


def inspect_run(cfg: ResolvedTrainConfig, mode: str = "auto", stored: TrainConfig | None = None
                ) -> RunState:
    """Decide what to do with the run directory ``cfg.out`` for a run configured by ``cfg``.

    ``mode``: ``"auto"`` (new run, or continue the one there), ``"resume"`` (there must be a
    run) or ``"new"`` (there must not be one). ``stored``: the directory's ``config.yaml`` when
    the caller has read it already (a resume), so it is read once. Raises a one-line
    ``ValueError`` when the directory holds a different run (:func:`check_resume`), a run
    without a usable config, log or checkpoint. Reads only; call it holding the lock.
    """
    if cfg.out is None:
        raise ValueError("inspect_run needs a resolved config (out is null)")
    out = Path(cfg.out)
    where = str(out)
    if not (out / "config.yaml").exists():
        if mode == "resume":
            raise ValueError(f"--resume {where!r}: no config.yaml there (not a run directory)")
        found = [n for n in _RUN_FILES if (out / n).exists()]
        if found:
            raise ValueError(
                f"{where!r} holds run files ({', '.join(found)}) but no config.yaml; choose "
                "another --out (or empty it)"
            )
        return RunState("new")
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
                return RunState("complete", finished, notes=notes)
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
                                          "first checkpoint: starting it over"])
    checkpoint, damaged = latest_valid_checkpoint(ckpt_dir)
    if checkpoint is None:
        why = "; ".join(f"{p.name}: {reason}" for p, reason in damaged)
        raise ValueError(
            f"no valid checkpoint in {ckpt_dir} ({why}); restore one, or start a new run with "
            "another --out"
        )
    step = int(checkpoint.name[5:12])
    notes = check_resume(stored, cfg, step, where)
    check_history(read_metrics(out / "metrics.jsonl"), step, out / "metrics.jsonl")
    warnings = [
        f"checkpoint {p.name} is damaged ({reason}); set aside as {p.name}.damaged"
        for p, reason in damaged
    ]
    if damaged:
        warnings.append(f"resuming from the newest valid checkpoint, {checkpoint.name}")
    complete = step >= cfg.max_steps and finished == step
    return RunState("complete" if complete else "resume", step, checkpoint, damaged, notes,
                    warnings)


#: where a restarted run keeps the files of the attempt it starts over (see
#: :func:`keep_previous_attempt`)
PREVIOUS_ATTEMPT = "previous-attempt"


def keep_previous_attempt(directory: str | os.PathLike[str]) -> Path | None:
    """Move the files a run stopped before its first checkpoint left (``metrics.jsonl``,
    ``final/``, reports, calibration, logs: everything but ``config.yaml``, the lock and this
    folder) into ``DIR/previous-attempt/`` before the run starts over, so that starting over
    never truncates or overwrites data: an older ``previous-attempt/`` is replaced only by a
    newer attempt's files. Returns the folder, or ``None`` when there was nothing to keep."""
    directory = Path(directory)
    keep = [p for p in directory.iterdir()
            if p.name not in ("config.yaml", ".lock", PREVIOUS_ATTEMPT, "checkpoints")
            and not (p.name == "metrics.jsonl" and p.stat().st_size == 0)]
    if not keep:
        return None
    dest = directory / PREVIOUS_ATTEMPT
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir()
    for p in keep:
        os.replace(p, dest / p.name)
    return dest


def set_aside(damaged: list[tuple[Path, str]]) -> None:
    """Rename damaged checkpoints to ``*.damaged`` (out of the rotation, kept for a look) and
    drop their checksum files."""
    for p, _ in damaged:
        if p.exists():
            os.replace(p, p.with_name(p.name + ".damaged"))
        checksum_path(p).unlink(missing_ok=True)
