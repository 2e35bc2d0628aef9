"""Rows of a JSON-lines file, with errors that name the file and the row.

The one JSONL reader of the files users hand bestk (``bestk metrics``' samples, ``bestk
calibrate``'s reward banks): bytes are decoded here, so a file that is not UTF-8 is a
``ValueError`` naming its row and byte, never a ``UnicodeDecodeError`` traceback; blank lines
are skipped; a row that is not JSON, or not a JSON object, names its row number.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["iter_jsonl"]


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(row number, row)`` for every non-blank line of ``path``, rows counted from 1.

    Raises ``ValueError`` for bytes that are not UTF-8, a line that is not JSON, or a JSON
    value that is not an object, each naming ``path`` and the row.
    """
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, 1):
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
