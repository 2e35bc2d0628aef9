"""Speed of bestk.advantages against a plain per-group numpy loop.

Workloads (float64 rewards, median of repeated calls, one process):
* 65,536 rollouts = 4,096 groups x 16, integer group ids (contiguous, as a trainer lays them out);
* the same with verl-style uid strings (object array), shuffled so groups are not contiguous;
* 1,048,576 rollouts = 65,536 groups x 16, integer ids.

The reference is the obvious implementation: a Python loop over groups, each computed with
numpy (timed on the 65k workloads, and at 1M for argmaxrl only).

Targets (2-core CPU): argmaxrl <= 10 ms at 65k with integer ids, <= 60 ms with string uids,
<= 250 ms at 1M.

Run: ``python benchmarks/estimators.py [--repeats 15] [--markdown]``
"""

from __future__ import annotations

import argparse
import functools
import platform
import time

import numpy as np
import torch

import bestk

ESTIMATORS = [
    ("argmaxrl", {}),
    ("maxrl", {}),
    ("softmax_grpo", {"tau": 0.1}),
    ("grpo", {}),
    ("rloo", {}),
    ("reinforce", {}),
    ("pkpo", {"k": 4}),
]
TARGETS_MS = {("argmaxrl", "65k int"): 10, ("argmaxrl", "65k str"): 60, ("argmaxrl", "1M int"): 250}


# --- per-group numpy references (the "plain loop" a user would write) -----------------------
def _argmaxrl_group(r):
    order = np.argsort(-r, kind="stable")
    rs = r[order]
    d = rs - np.append(rs[1:], 0.0)
    w_sorted = np.cumsum((d / np.arange(1, len(r) + 1))[::-1])[::-1]
    w = np.empty_like(w_sorted)
    w[order] = w_sorted
    a = len(r) * w
    top2 = np.sort(r)[-2:]
    loo = np.where(r == top2[-1], top2[0], top2[-1])
    return a - loo


def _softmax_group(r, tau=0.1):
    e = np.exp((r - r.max()) / tau)
    return len(r) * e / e.sum() - 1


def _grpo_group(r):
    return (r - r.mean()) / (r.std(ddof=1) + 1e-6)


def _rloo_group(r):
    return r - (r.sum() - r) / (len(r) - 1)


def _pkpo_group(r, k=4):
    n = len(r)
    order = np.argsort(r, kind="stable")
    g = r[order]
    i = np.arange(1, n + 1)
    w = np.zeros(n)
    w[n - 1] = k / n
    for m in range(n - 1, k - 1, -1):  # recursion w_{m} = w_{m+1} (m+1-k)/m (1-based)
        w[m - 1] = w[m] * (m + 1 - k) / m
    v = np.where(i >= 2, w * (k - 1) / np.maximum(i - 1, 1), 0)
    s = w * g + (np.cumsum((v * g)[::-1])[::-1] - v * g)
    # sloo_minus_one baseline: rho_{k-1} of the group without i
    u = np.zeros(n)
    u[n - 2] = (k - 1) / (n - 1)
    for m in range(n - 2, k - 2, -1):
        u[m - 1] = u[m] * (m + 1 - (k - 1)) / m
    u_prev = np.append(0.0, u[:-1])
    rho = (np.cumsum(u * g) - u * g) + (np.cumsum((u_prev * g)[::-1])[::-1] - u_prev * g)
    a = n * (s - k / n * rho)
    out = np.empty(n)
    out[order] = a
    return out


LOOPS = {
    "argmaxrl": _argmaxrl_group,
    "maxrl": _argmaxrl_group,
    "softmax_grpo": _softmax_group,
    "grpo": _grpo_group,
    "rloo": _rloo_group,
    "reinforce": lambda r: r.copy(),
    "pkpo": _pkpo_group,
}


def loop_advantages(name, rewards, ids):
    """Python loop over groups (labels factorised with np.unique once)."""
    _, inverse = np.unique(ids, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.flatnonzero(np.diff(inverse[order])) + 1
    out = np.empty_like(rewards)
    fn = LOOPS[name]
    for idx in np.split(order, bounds):
        out[idx] = fn(rewards[idx])
    return out


def median_ms(fn, repeats):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def workloads(seed=0):
    rng = np.random.default_rng(seed)
    G, N = 4096, 16
    binary = rng.integers(0, 2, G * N).astype(np.float64)
    graded = rng.random(G * N)
    ids = np.repeat(np.arange(G), N)
    perm = rng.permutation(G * N)
    uids = np.array([f"uid-{x:08x}" for x in ids], dtype=object)[perm]
    G1 = 65536
    big_ids = np.repeat(np.arange(G1), N)
    return {
        "65k int": (graded, binary, ids),
        "65k str": (graded[perm], binary[perm], uids),
        "1M int": (rng.random(G1 * N), rng.integers(0, 2, G1 * N).astype(np.float64), big_ids),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--loop-repeats", type=int, default=3)
    args = ap.parse_args()
    wl = workloads()
    print(
        f"# bestk {bestk.__version__}, torch {torch.__version__}, numpy {np.__version__}, "
        f"{torch.get_num_threads()} threads, {platform.processor() or platform.machine()}"
    )
    print("| estimator | workload | bestk ms | numpy loop ms | speed-up | target |")
    print("|---|---|---:|---:|---:|---|")
    ok = True
    for name, opts in ESTIMATORS:
        for wname, (graded, binary, ids) in wl.items():
            r = binary if name == "maxrl" else graded
            rt = torch.from_numpy(r)
            ms = median_ms(
                functools.partial(bestk.advantages, name, rt, ids, **opts), args.repeats
            )
            do_loop = wname != "1M int" or name == "argmaxrl"
            if do_loop:
                ref = loop_advantages(name, r, ids)
                got = bestk.advantages(name, r, ids, **opts)
                if not np.allclose(got, ref, atol=1e-9):
                    raise SystemExit(f"{name} {wname}: bestk and the numpy loop disagree")
                loop_ms = median_ms(
                    functools.partial(loop_advantages, name, r, ids), args.loop_repeats
                )
                loop_txt, ratio = f"{loop_ms:.1f}", f"{loop_ms / ms:.0f}x"
            else:
                loop_txt, ratio = "-", "-"
            target = TARGETS_MS.get((name, wname))
            verdict = ""
            if target is not None:
                met = ms <= target
                ok &= met
                verdict = f"<= {target} ms: {'met' if met else 'MISSED'}"
            print(f"| {name} | {wname} | {ms:.2f} | {loop_txt} | {ratio} | {verdict} |", flush=True)
    print("\nall targets met" if ok else "\nSOME TARGETS MISSED")


if __name__ == "__main__":
    main()
