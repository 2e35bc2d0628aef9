"""Figures written to files: PNG saved atomically, shared by ``bestk compare`` and the lab."""

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
    close it."""
    plt = pyplot()

    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")
    plt.close(fig)
