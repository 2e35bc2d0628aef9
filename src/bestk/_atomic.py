"""Atomic file writes: a crash leaves either the old file or the new one, never a torn one.

Everything bestk persists (calibrations, checkpoints, run metadata, lab results) goes through
:func:`atomic_path`: the content is written to a temporary file in the destination directory,
flushed to disk, given the permissions the process umask asks for, then moved into place with
``os.replace`` (atomic on POSIX and Windows). :data:`JSONValue` is the type of what the JSON
files among them hold.

Every temporary bestk makes has a name only bestk makes (:func:`temporary_name`,
:func:`is_temporary`): ``.bestk-tmp-`` first, ``.bestk-tmp`` before its extension. Cleaning up
after a killed write removes those names and no other, so a user's dot-files (``.notes``,
an editor's ``.config.yaml.swp``, a ``.metrics.jsonl.bak``) are never taken for one.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeAlias

__all__ = [
    "atomic_path", "write_text_atomic", "current_umask", "respect_umask", "os_error_line",
    "temporary_name", "is_temporary", "TEMP_PREFIX", "TEMP_MARK", "JSONValue", "JSONObject",
]

#: The first characters of every temporary bestk makes.
TEMP_PREFIX = ".bestk-tmp-"
#: What every temporary bestk makes has just before its extension (or at its end).
TEMP_MARK = ".bestk-tmp"
_TEMPORARY = re.compile(re.escape(TEMP_PREFIX) + r".+" + re.escape(TEMP_MARK)
                        + r"(\.[A-Za-z0-9]+)?")


def temporary_name(name: str, tag: str = "", suffix: str = "") -> str:
    """The name of bestk's temporary for ``name``: ``.bestk-tmp-NAME[.TAG].bestk-tmp[SUFFIX]``
    (``suffix``: an extension a writer needs, ``.png``)."""
    return f"{TEMP_PREFIX}{name}{'.' + tag if tag else ''}{TEMP_MARK}{suffix}"


def is_temporary(name: str) -> bool:
    """Whether a file name is one of bestk's temporaries (:func:`temporary_name`, or what
    :func:`atomic_path` makes): the only names a clean-up after a killed write removes."""
    return _TEMPORARY.fullmatch(name) is not None

#: A JSON value as ``json.dumps`` takes it. The containers are read-only views (``Sequence``,
#: ``Mapping``), so a ``list[float]`` or a ``dict[str, list[int]]`` is one too; integer keys
#: are written as strings.
JSONValue: TypeAlias = ("None | bool | int | float | str | Sequence[JSONValue] "
                        "| Mapping[str, JSONValue] | Mapping[int, JSONValue]")
#: A JSON object (a results file, a calibration file): string keys, JSON values.
JSONObject: TypeAlias = Mapping[str, JSONValue]


def current_umask() -> int:
    """The process umask, read without changing it where the OS allows (Linux: /proc)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore (not thread-safe, but brief)
    os.umask(mask)
    return mask


def respect_umask(path: str | os.PathLike) -> None:
    """Give ``path`` (a file, or every file under a directory) mode ``0o666 & ~umask``.

    Temporary files are created ``0o600`` (``tempfile.mkstemp``, and safetensors' own
    temporaries); a file moved into place from one should get the mode any newly created
    file of the user gets.
    """
    path = Path(path)
    mode = 0o666 & ~current_umask()
    files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
    for p in files:
        os.chmod(p, mode)


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX); a no-op where directories can't be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | os.PathLike, *, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on a clean exit it replaces ``path``.

    The temporary is ``.bestk-tmp-NAME.RANDOM.bestk-tmp[SUFFIX]`` (:func:`is_temporary`;
    ``suffix``: an extension its writer needs, ``.png``).

    The caller writes the temporary file (by any means: ``write_text``, ``save_file``...).
    On exit it is fsync'ed, given mode ``0o666 & ~umask`` and renamed onto ``path``; if the
    block raises, it is removed and ``path`` is left untouched. Parent directories are created.
    An ``OSError`` of the temporary file (creating, writing, renaming it) names ``path``, the
    file the user asked for.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{path.name}.",
                                    suffix=TEMP_MARK + suffix, dir=path.parent)
    except OSError as e:  # a read-only or full directory: name the file, not the temporary
        raise _naming(e, path) from e
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        respect_umask(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.errno is not None and e.filename in (None, tmp):
            # a failed write() (ENOSPC, EIO) names no file, a failed fsync or rename the
            # temporary: name the file being written
            raise _naming(e, path) from e
        raise
    _fsync_dir(path.parent)


def _naming(e: OSError, path: Path) -> OSError:
    """``e`` (of the same class: ``IsADirectoryError`` stays one) naming ``path`` alone."""
    return type(e)(e.errno, e.strerror, str(path))


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def os_error_line(e: OSError) -> str:
    """``PATH: reason`` for an ``OSError`` (``reason`` alone when it names no file), one line."""
    reason = e.strerror
    if not reason:
        text = str(e).strip()
        reason = text.splitlines()[0] if text else type(e).__name__
    if e.filename is None:
        return reason
    text = f"{e.filename}: {reason}"
    return text + (f" (-> {e.filename2})" if e.filename2 is not None else "")
