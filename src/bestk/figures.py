"""Figures written to files: PNG saved atomically, shared by ``bestk train``'s end plots,
``bestk compare``, ``bestk plot`` and the lab."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from bestk._atomic import atomic_path
from bestk._optional import pyplot

if TYPE_CHECKING:  # pragma: no cover - matplotlib is optional
    from matplotlib.figure import Figure

__all__ = ["save_figure"]


def save_figure(fig: Figure, path: str | os.PathLike, dpi: int = 110) -> None:
    """Save a matplotlib figure as PNG atomically (:func:`bestk._atomic.atomic_path`) and
    close it (written or not).

    A failed write (a full disk, a read-only directory, an I/O error) is an ``OSError`` naming
    ``path``, the file asked for, never the temporary or no file at all; ``path`` is then left
    as it was."""
    plt = pyplot()

    try:
        with atomic_path(path, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=dpi, format="png")
    except OSError as e:
        if e.filename == str(path):
            raise
        reason = e.strerror or (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise OSError(e.errno, f"cannot write the figure: {reason}", str(path)) from e
    finally:
        plt.close(fig)
