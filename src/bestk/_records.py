"""Rows of a JSON-lines file, with errors that name the file and the row.

The one JSONL reader of the files users hand bestk (``bestk metrics``' samples, ``bestk
calibrate``'s reward banks): bytes are decoded here, so a file that is not UTF-8 is a
``ValueError`` naming its row and byte, never a ``UnicodeDecodeError`` traceback; blank lines
are skipped; a row that is not JSON, or not a JSON object, names its row number. Only a
regular file is read (``/dev/zero``, a FIFO or a directory is refused before any byte is), and a
line longer than :data:`MAX_LINE_BYTES` is refused naming its row, so no input makes the reader
hold more than one bounded line in memory.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["iter_jsonl", "MAX_LINE_BYTES", "check_regular_file", "loads_finite"]

#: The longest line (bytes, its newline included) :func:`iter_jsonl` reads: far above any row
#: bestk writes or reads (a reward bank's row of a few thousand rewards, a logged sample).
MAX_LINE_BYTES = 64 << 20


def check_regular_file(path: Path, what: str = "file") -> None:
    """``ValueError`` (one line naming ``path``) unless ``path`` is an existing regular file (a
    symlink to one is): a device such as ``/dev/zero``, a FIFO or a directory never ends or is
    not a file to read rows from."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ValueError(f"{what} {str(path)!r} does not exist") from None
    except OSError as e:
        raise ValueError(f"{what} {str(path)!r} cannot be read: {e.strerror}") from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a device or a pipe)"
        raise ValueError(f"{what} {str(path)!r} is {kind}; give the path of a file")


class _NotFinite(ValueError):
    """A bare ``NaN`` / ``Infinity`` / ``-Infinity`` token."""


def _refuse_constant(name: str) -> object:
    raise _NotFinite(name)


def loads_finite(raw: bytes, where: str) -> Any:
    """One line of a file bestk wrote (``metrics.jsonl``) as JSON, ``UnicodeDecodeError`` /
    ``JSONDecodeError`` as ``json`` raises them. A bare ``NaN`` / ``Infinity`` / ``-Infinity``
    token, which Python's ``json`` accepts but which is not JSON and which bestk never writes (a
    value that is not finite is written as ``null``), is a one-line ``ValueError`` naming
    ``where`` (the file and line)."""
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except _NotFinite as e:
        raise ValueError(
            f"{where} holds {e}, which is not JSON and which bestk never writes (it writes a "
            f"value that is not finite as null): edited by hand? restore the file, or write {e} "
            "as null"
        ) from None


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(row number, row)`` for every non-blank line of ``path``, rows counted from 1.

    Raises ``ValueError`` for a path that is not a regular file (:func:`check_regular_file`),
    bytes that are not UTF-8, a line longer than :data:`MAX_LINE_BYTES`, a line that is not
    JSON, or a JSON value that is not an object, each naming ``path`` (and the row).
    """
    check_regular_file(path)
    with path.open("rb") as f:
        for line_no, raw in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), 1):
            if len(raw) > MAX_LINE_BYTES:
                bound = f"{MAX_LINE_BYTES >> 20} MiB" if MAX_LINE_BYTES >= 1 << 20 else \
                    f"{MAX_LINE_BYTES} bytes"
                raise ValueError(f"{path}: row {line_no} is longer than {bound} (no newline?); "
                                 "a row is one JSON object on one line")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{str(path)!r} is not UTF-8 text (row {line_no}: byte "
                                 f"{raw[e.start]:#04x}); convert it to UTF-8") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: row {line_no}: invalid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}: row {line_no}: expected a JSON object, got "
                                 f"{type(row).__name__}")
            yield line_no, row
