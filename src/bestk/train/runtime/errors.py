"""How a failed file operation is worded: an ``OSError`` that names the path."""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["as_os_error"]


def as_os_error(e: Exception, path: Path) -> Exception:
    """An ``OSError`` naming ``path`` for a safetensors I/O failure ("... (os error 28) ...");
    any other exception is returned unchanged."""
    if type(e).__name__ != "SafetensorError":
        return e
    m = re.search(r"os error (\d+)", str(e))
    if m:
        code = int(m.group(1))
        return OSError(code, os.strerror(code), str(path))
    return OSError(f"cannot write checkpoint {str(path)!r}: {e}")
