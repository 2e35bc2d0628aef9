"""``bestk._options.load_path_cached``: a file-valued option is loaded once per (loader, absolute
path, modification time, size), through ``bestk.advantages`` and ``resolve_options`` alike."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

import bestk
from bestk import _options
from bestk._options import PATH_CACHE_SIZE, load_path_cached
from bestk.estimators import resolve_options


class CountingLoader:
    """A JSON loader that counts its calls (one instance per test: its own cache entries)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, path):
        self.calls += 1
        with open(path) as f:
            return {str(k): float(v) for k, v in json.load(f).items()}


def write(path, data, *, mtime_ns=None):
    path.write_text(json.dumps(data))
    if mtime_ns is not None:
        os.utime(path, ns=(mtime_ns, mtime_ns))


@pytest.fixture
def scaled():
    """An estimator with a path-valued option ``scales`` whose loader counts its calls."""
    loader = CountingLoader()

    @bestk.register_estimator("test_path_scaled", needs_prompt_ids=True,
                              path_options={"scales": loader})
    def scaled_centred(rewards, groups, *, scales):
        s = [scales.get(str(label), 1.0) for label in groups.labels.tolist()]
        return groups.broadcast(torch.tensor(s, dtype=rewards.dtype)) * groups.center(rewards)[0]

    yield loader
    bestk.ESTIMATORS.pop("test_path_scaled", None)


def test_advantages_load_a_path_option_once_and_again_after_a_rewrite(scaled, tmp_path):
    path = tmp_path / "scales.json"
    write(path, {"a": 2.0, "b": 0.5})
    r, ids = [1.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"]
    for _ in range(3):
        a = bestk.advantages("test_path_scaled", r, group=ids, scales=str(path))
        np.testing.assert_allclose(a, [1.0, -1.0, 0.0, 0.0])
    assert scaled.calls == 1
    # the same file by another spelling (a PathLike, a relative path) is the same entry
    bestk.advantages("test_path_scaled", r, group=ids, scales=path)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        bestk.advantages("test_path_scaled", r, group=ids, scales="scales.json")
    finally:
        os.chdir(cwd)
    assert scaled.calls == 1
    # rewritten: other content, a later modification time -> loaded again, the new values used
    st = os.stat(path)
    write(path, {"a": 3.0, "b": 0.5}, mtime_ns=st.st_mtime_ns + 10**9)
    a = bestk.advantages("test_path_scaled", r, group=ids, scales=str(path))
    np.testing.assert_allclose(a, [1.5, -1.5, 0.0, 0.0])
    assert scaled.calls == 2
    bestk.advantages("test_path_scaled", r, group=ids, scales=str(path))
    assert scaled.calls == 2
    # same modification time, another size -> loaded again
    write(path, {"a": 30.0, "b": 0.5}, mtime_ns=st.st_mtime_ns + 10**9)
    a = bestk.advantages("test_path_scaled", r, group=ids, scales=str(path))
    np.testing.assert_allclose(a, [15.0, -15.0, 0.0, 0.0])
    assert scaled.calls == 3


def test_resolve_options_shares_the_cache_and_keeps_loader_errors(scaled, tmp_path):
    path = tmp_path / "s.json"
    write(path, {"x": 1.0})
    first = resolve_options("test_path_scaled", {"scales": str(path)})["scales"]
    again = resolve_options("test_path_scaled", {"scales": str(path)})["scales"]
    assert first is again and scaled.calls == 1
    bestk.advantages("test_path_scaled", [1.0, 0.0], group=["x", "x"], scales=str(path))
    assert scaled.calls == 1
    missing = tmp_path / "missing.json"
    for _ in range(2):  # not cached: the loader's own error each time
        with pytest.raises(ValueError, match=r"cannot load scales '.*missing\.json': .*No such"):
            resolve_options("test_path_scaled", {"scales": str(missing)})
    assert scaled.calls == 3
    write(missing, {"x": 2.0})
    assert resolve_options("test_path_scaled", {"scales": str(missing)})["scales"] == {"x": 2.0}


def test_the_cache_is_bounded_and_keyed_by_loader(tmp_path):
    loader, other = CountingLoader(), CountingLoader()
    paths = [tmp_path / f"{i}.json" for i in range(PATH_CACHE_SIZE + 1)]
    for i, p in enumerate(paths):
        write(p, {"i": i})
    for p in paths:
        load_path_cached(loader, p)
    assert loader.calls == PATH_CACHE_SIZE + 1
    assert len(_options._PATH_CACHE) <= PATH_CACHE_SIZE
    load_path_cached(loader, paths[-1])  # the most recent: still cached
    assert loader.calls == PATH_CACHE_SIZE + 1
    assert load_path_cached(loader, paths[0]) == {"i": 0.0}  # the oldest was evicted
    assert loader.calls == PATH_CACHE_SIZE + 2
    load_path_cached(other, paths[-1])  # another loader of the same file: its own entry
    assert other.calls == 1
    # a rewritten file replaces its entry instead of adding one
    n = len(_options._PATH_CACHE)
    st = os.stat(paths[-1])
    write(paths[-1], {"i": -1}, mtime_ns=st.st_mtime_ns + 10**9)
    assert load_path_cached(other, paths[-1]) == {"i": -1.0} and other.calls == 2
    assert len(_options._PATH_CACHE) == n


def test_kappo_calibration_files_are_read_once(tmp_path, monkeypatch):
    from bestk.kappo import Calibration, calibrate, load_calibration

    path = calibrate({"p": [0, 1, 1], "q": [0, 0, 1]}, k=2, beta=0.1).save(tmp_path / "c.json")
    calls = []
    original = Calibration.load.__func__

    def counting(cls, p):
        calls.append(p)
        return original(cls, p)

    monkeypatch.setattr(Calibration, "load", classmethod(counting))
    r, ids = [1.0, 0.0, 1.0, 0.0], ["p", "p", "q", "q"]
    for _ in range(3):
        bestk.advantages("kappo_grpo", r, group=ids, calibration=str(path))
        load_calibration(path)
    assert len(calls) == 1
    st = os.stat(path)
    calibrate({"p": [0, 1, 1], "q": [1, 0, 1]}, k=2, beta=0.1).save(path)
    os.utime(path, ns=(st.st_mtime_ns + 10**9, st.st_mtime_ns + 10**9))
    cal = load_calibration(path)
    assert len(calls) == 2 and cal.get("n_success", ["q"]).tolist() == [2]
