import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bestk.groups import block_groups, make_groups
from tests._reference import split_groups


def ragged_batch(seed=0, n_groups=7, max_size=6, labels="int"):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, max_size + 1, n_groups)
    lab = np.repeat(np.arange(n_groups), sizes)
    rng.shuffle(lab)
    vals = rng.integers(-3, 4, lab.size).astype(np.float64) / 2  # many ties
    if labels == "str":
        lab = np.array([f"uid-{x}" for x in lab], dtype=object)
    return vals, lab


@pytest.mark.parametrize("labels", ["int", "str"])
def test_reductions_match_loops(labels):
    vals, lab = ragged_batch(labels=labels)
    g = make_groups(lab, len(vals))
    x = torch.tensor(vals)
    ref = split_groups(vals, lab)
    for gi, label in enumerate(g.labels):
        idx, v = ref[label]
        v = np.array(v)
        assert g.sizes[gi] == len(v)
        assert g.sum(x)[gi].item() == pytest.approx(v.sum())
        assert g.mean(x)[gi].item() == pytest.approx(v.mean())
        assert g.max(x)[gi].item() == v.max()
        expected_std = v.std(ddof=1) if len(v) > 1 else 0.0
        assert g.std(x)[gi].item() == pytest.approx(expected_std, abs=1e-12)
        loo = g.loo_max(x)[idx].numpy()
        for j in range(len(idx)):
            others = np.delete(v, j)
            assert loo[j] == (others.max() if len(others) else -np.inf)


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("layout", ["ragged", "block"])
def test_sort_and_segment_scans(descending, layout):
    if layout == "block":
        vals = np.random.default_rng(1).normal(size=(5, 4)).ravel()
        g = block_groups(5, 4)
        lab = np.repeat(np.arange(5), 4)
    else:
        vals, lab = ragged_batch(seed=3)
        g = make_groups(lab, len(vals))
    assert g.is_uniform_block == (layout == "block")
    x = torch.tensor(vals)
    s = g.sort(x, descending=descending)
    xs = s.gather(x).numpy()
    gid = g.index[s.perm].numpy()
    # Segments contiguous and sorted within.
    for label_idx in np.unique(gid):
        pos = np.flatnonzero(gid == label_idx)
        assert np.all(np.diff(pos) == 1)
        seg = xs[pos]
        assert np.all(np.diff(seg) <= 0) if descending else np.all(np.diff(seg) >= 0)
        assert s.rank[pos].tolist() == list(range(len(pos)))
        y = torch.arange(len(xs), dtype=torch.float64) + 1
        fwd = s.cumsum(y).numpy()[pos]
        rev = s.cumsum(y, reverse=True).numpy()[pos]
        rev_ex = s.cumsum(y, reverse=True, exclusive=True).numpy()[pos]
        fwd_ex = s.cumsum(y, exclusive=True).numpy()[pos]
        yy = y.numpy()[pos]
        np.testing.assert_allclose(fwd, np.cumsum(yy))
        np.testing.assert_allclose(rev, np.cumsum(yy[::-1])[::-1])
        np.testing.assert_allclose(rev_ex, rev - yy)
        np.testing.assert_allclose(fwd_ex, fwd - yy)
        nxt = s.shift(torch.tensor(xs), 1, fill=-99.0).numpy()[pos]
        np.testing.assert_array_equal(nxt, np.append(seg[1:], -99.0))
    np.testing.assert_array_equal(s.scatter(s.gather(x)).numpy(), vals)


def test_block_detection_and_labels():
    g = make_groups(["b", "b", "a", "a"], 4)
    assert g.is_uniform_block and list(g.labels) == ["a", "b"]
    assert g.index.tolist() == [1, 1, 0, 0]
    g2 = make_groups([0, 1, 0, 1], 4)
    assert not g2.is_uniform_block
    g3 = make_groups(torch.tensor([5, 5, 9]), 3)
    assert g3.sizes.tolist() == [2, 1]
    g4 = make_groups(None, 3)
    assert g4.num_groups == 1 and g4.is_uniform_block
    g5 = make_groups([(1, "x"), (1, "x"), (2, "y")], 3)  # tuple labels
    assert g5.num_groups == 2


@pytest.mark.parametrize(
    "group, msg",
    [
        ([0, 1], "2 labels but rewards have 3"),
        (np.zeros((3, 1)), "1-D"),
        (torch.zeros(3, 1), "1-D"),
        ([0.0, float("nan"), 1.0], "index 1 is not finite"),
        (5, "1-D sequence"),
    ],
)
def test_bad_group_labels(group, msg):
    with pytest.raises(ValueError, match=msg):
        make_groups(group, 3)


def test_string_labels_survive_hash_collisions(monkeypatch):
    import bestk.groups as mod

    lab = np.array(["b", "a", "c", "a", "b"], dtype=object)
    monkeypatch.setattr(mod, "_hash", lambda v: 7)  # everything collides
    g = make_groups(lab, 5)
    assert list(g.labels) == ["a", "b", "c"] and g.index.tolist() == [1, 0, 2, 0, 1]


def test_unhashable_labels_are_a_value_error():
    lab = np.empty(2, dtype=object)
    lab[0], lab[1] = [1], [2]
    with pytest.raises(ValueError, match="hashable"):
        make_groups(lab, 2)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(-5, 5)), min_size=1, max_size=30))
def test_segment_sum_property(pairs):
    lab = np.array([p[0] for p in pairs])
    x = torch.tensor([float(p[1]) for p in pairs])
    g = make_groups(lab, len(lab))
    total = g.sum(x)
    for gi, label in enumerate(g.labels):
        assert total[gi].item() == x[torch.tensor(lab == label)].sum().item()
