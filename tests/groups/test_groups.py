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
    import bestk.groups.labels as mod

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


# ---------------------------------------------------------------------------- hardening
@pytest.mark.parametrize(
    "labels, groups",
    [
        ([1, "1", 1], 2),  # numpy would coerce to the strings "1", "1", "1"
        ([b"a", "a"], 2),  # bytes and str never compare equal
        (["a", "a\x00"], 2),  # a numpy string array strips the trailing NUL
        ([1, 1.0, True], 1),  # Python equality: the same label, as dict keys would be
        ([(1, "x"), (1, "x"), "x"], 2),
    ],
)
def test_labels_compare_as_python_values(labels, groups):
    g = make_groups(labels, len(labels))
    assert g.num_groups == groups
    for i, lab in enumerate(labels):  # every sample's group has its own label
        assert g.label(int(g.index[i])) == lab


def test_unorderable_labels_keep_first_appearance_order():
    g = make_groups([2, "b", 2, "a", "b"], 5)
    assert [g.label(i) for i in range(g.num_groups)] == [2, "b", "a"]
    assert g.index.tolist() == [0, 1, 0, 2, 1]


@pytest.mark.parametrize(
    "lab",
    [
        np.repeat([3, 1, 2], 4),  # contiguous blocks, labels out of order
        np.repeat(np.array(["u2", "u0", "u1"], dtype=object), 4),
        torch.repeat_interleave(torch.tensor([7, 5]), 3),
    ],
)
def test_block_batches_with_unsorted_labels(lab):
    n = len(lab)
    g = make_groups(lab, n)
    assert g.is_uniform_block
    labels = list(lab.tolist() if not isinstance(lab, torch.Tensor) else lab.tolist())
    assert [g.label(i) for i in range(g.num_groups)] == sorted(set(labels))
    assert [g.label(int(i)) for i in g.index] == labels
    x = torch.arange(n, dtype=torch.float64)
    ref = split_groups(x.numpy(), labels)
    np.testing.assert_array_equal(
        g.sum(x).numpy(), [sum(ref[g.label(i)][1]) for i in range(g.num_groups)]
    )


def _scan_groups(sizes, seed=0):
    rng = np.random.default_rng(seed)
    lab = np.repeat(np.arange(len(sizes)), sizes)
    rng.shuffle(lab)
    return lab, rng.normal(size=lab.size) * 10.0 ** rng.integers(-20, 20, lab.size)


@pytest.mark.parametrize(
    "sizes",
    [
        [3, 1, 4, 1, 5],  # one padded matrix
        [1] * 200 + [700],  # one padded matrix would be 4x the batch: size classes
        [2, 1024, 3, 17, 1, 64, 65],
    ],
)
def test_scans_are_segment_local_bit_for_bit(sizes):
    """Each group's scans equal the same group scanned alone, bit for bit."""
    lab, vals = _scan_groups(sizes)
    g = make_groups(lab, lab.size)
    s = g.sort(torch.tensor(vals))
    y = torch.tensor(np.random.default_rng(1).normal(size=lab.size)) * s.values
    scans = {
        (rev, exc): s.cumsum(y, reverse=rev, exclusive=exc).numpy()
        for rev in (False, True)
        for exc in (False, True)
    }
    gid = g.index[s.perm].numpy()
    for label in np.unique(lab):
        pos = np.flatnonzero(gid == label)
        seg = y.numpy()[pos]
        assert np.all(np.diff(s.values.numpy()[pos]) >= 0)
        alone = make_groups(None, len(pos)).sort(torch.tensor(s.values.numpy()[pos]))
        for (rev, exc), got in scans.items():
            want = alone.cumsum(torch.tensor(seg), reverse=rev, exclusive=exc).numpy()
            np.testing.assert_array_equal(got[pos], want)
            # and against plain sequential sums (exact here only up to rounding)
            ref = np.cumsum(seg[::-1])[::-1] if rev else np.cumsum(seg)
            if exc:
                ref = np.append(ref[1:], 0.0) if rev else np.append(0.0, ref[:-1])
            np.testing.assert_allclose(got[pos], ref, rtol=1e-12, atol=1e-12 * np.abs(seg).sum())


def test_size_class_layout_bounds_memory():
    lab, vals = _scan_groups([1] * 300 + [1000])
    s = make_groups(lab, lab.size).sort(torch.tensor(vals))
    cells = sum(b.rows.shape[0] * b.rows.shape[1] for b in s.buckets)
    assert len(s.buckets) > 1 and cells <= 2 * lab.size + 1024


def test_tie_canonical_gives_tied_values_one_result():
    lab = np.array([0, 0, 0, 1, 1, 0, 1])
    x = torch.tensor([2.0, 1.0, 2.0, 5.0, 5.0, 2.0, 5.0])
    s = make_groups(lab, 7).sort(x)
    y = torch.arange(7, dtype=torch.float64)  # different at every position
    out = s.scatter(s.tie_canonical(y)).numpy()
    assert out[0] == out[2] == out[5] and out[3] == out[4] == out[6] and out[1] != out[0]


def test_center_mean_std_standardize_are_exact_for_constant_groups_and_never_overflow():
    g = make_groups([0, 0, 0, 1, 1, 2, 2], 7)
    x = torch.tensor([0.1, 0.1, 0.1, -1.7e308, 1.7e308, 1e-310, 3e-310], dtype=torch.float64)
    assert g.mean(x)[0].item() == 0.1  # sum/n would give 0.10000000000000002
    assert g.mean(x)[1].item() == 0.0
    dev, spread = g.center(x)
    assert dev[:3].tolist() == [0.0, 0.0, 0.0] and spread[0].item() == 0.0
    np.testing.assert_allclose(dev[3:5].numpy(), [-1.7e308, 1.7e308], rtol=1e-15)
    std = g.std(x)
    assert std[0].item() == 0.0 and std[1].item() == np.inf  # the std itself overflows
    np.testing.assert_allclose(std[2].item(), 2e-310 / 2**0.5, rtol=1e-6)
    np.testing.assert_allclose(g.std(x / 2)[1].item(), 1.7e308 / 2**0.5, rtol=1e-15)
    z = g.standardize(x)  # eps = 0
    np.testing.assert_allclose(z.numpy(), [0, 0, 0, -0.5**0.5, 0.5**0.5, -0.5**0.5, 0.5**0.5],
                               rtol=1e-6)


def test_pow2_scale_is_none_unless_needed_and_exact():
    g = make_groups([0, 0, 1, 1], 4)
    f64 = torch.float64
    assert g.pow2_scale(torch.tensor([1e300, 2.0, 3.0, 4.0], dtype=f64)) is None
    sc = g.pow2_scale(torch.tensor([1.7e308, -1e308, 3.0, 4.0], dtype=f64))
    assert sc[1].item() == 1.0 and sc[0].item() > 1.0
    assert np.log2(sc[0].item()).is_integer()


def test_accelerator_code_paths_agree_with_the_cpu_ones(monkeypatch):
    """The branches taken on devices without numpy sorts or sequential scans (torch.sort,
    explicit tie canonicalisation, torch.unique factorisation) give the same advantages."""
    import bestk
    import bestk.groups.labels as labels_mod
    import bestk.groups.layout as mod

    rng = np.random.default_rng(8)
    lab = rng.permutation(np.repeat(np.arange(40), rng.integers(1, 30, 40)))
    r = rng.integers(0, 4, lab.size).astype(np.float64)  # many ties
    cases = [("argmaxrl", {}), ("argmaxrl", {"baseline": "none"}), ("pkpo", {"k": 1}),
             ("maxrl", {})]
    want = {}
    for name, opts in cases:
        x = (r > 1).astype(np.float64) if name == "maxrl" else r
        want[name, str(opts)] = bestk.advantages(name, x, lab, **opts)
    monkeypatch.setattr(mod, "_sequential_scans", lambda device: False)
    monkeypatch.setattr(mod, "_numpy_sorts", lambda device: False)
    for name, opts in cases:
        x = (r > 1).astype(np.float64) if name == "maxrl" else r
        got = bestk.advantages(name, x, lab, **opts)
        np.testing.assert_allclose(got, want[name, str(opts)], rtol=1e-13, atol=1e-13)
        for v in np.unique(x):  # ties still bit-identical
            for g in np.unique(lab):
                tied = got[(lab == g) & (x == v)]
                assert np.all(tied == tied[:1])
    f = labels_mod._factor_tensor(torch.tensor(lab))
    np.testing.assert_array_equal(f.labels, np.unique(lab))
    np.testing.assert_array_equal(f.index.numpy(), np.searchsorted(np.unique(lab), lab))
