"""Atomic file writes: a crash leaves either the old file or the new one, never a torn one.

Everything bestk persists (calibrations, checkpoints, run metadata, lab results) goes through
:func:`atomic_path`: the content is written to a temporary file in the destination directory,
flushed to disk, then moved into place with ``os.replace`` (atomic on POSIX and Windows).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_path", "write_text_atomic"]


@contextmanager
def atomic_path(path: str | os.PathLike, *, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on a clean exit it replaces ``path``.

    The caller writes the temporary file (by any means: ``write_text``, ``save_file``...).
    On exit it is fsync'ed and renamed onto ``path``; if the block raises, it is removed and
    ``path`` is left untouched. Parent directories are created.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
