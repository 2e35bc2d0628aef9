"""``bestk.figures.save_figure``: PNG written atomically; a failed write names the file."""

from __future__ import annotations

import errno

import pytest

from bestk.figures import save_figure


def _figure():
    from bestk._optional import pyplot

    fig, ax = pyplot().subplots()
    ax.plot([0, 1], [1, 0])
    return fig


@pytest.mark.parametrize("error", [
    OSError(errno.ENOSPC, "No space left on device"),  # write(): no file named
    OSError("encoder error -2"),  # PIL's errors carry no errno
])
def test_a_failed_write_names_the_figure_and_leaves_nothing(tmp_path, monkeypatch, error):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    def fail(self, *args, **kwargs):
        raise error

    monkeypatch.setattr(FigureCanvasAgg, "print_png", fail)
    path = tmp_path / "plot.png"
    fig = _figure()
    with pytest.raises(OSError) as e:
        save_figure(fig, path)
    assert e.value.filename == str(path), e.value
    assert list(tmp_path.iterdir()) == []
    from bestk._optional import pyplot

    assert not pyplot().fignum_exists(fig.number)  # closed, written or not


def test_a_figure_is_written(tmp_path):
    save_figure(_figure(), tmp_path / "plot.png")
    assert (tmp_path / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
