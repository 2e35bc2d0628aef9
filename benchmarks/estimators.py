"""Speed of bestk.advantages against a minimal vectorised GRPO, measured side by side.

The reference is the cheapest GRPO a trainer can write, the way verl's ``grpo_vectorized``
works: factorise the group ids with ``np.unique(return_inverse=True)``, then per-group
mean and std with ``np.bincount`` and one gather each,

    _, g = np.unique(ids, return_inverse=True)
    mean = bincount(g, r) / n;  std = sqrt(bincount(g, (r - mean[g])**2) / (n - 1))
    A = (r - mean[g]) / (std[g] + 1e-6)

Both take the same numpy float64 rewards and ids and return numpy advantages. Each round
times the reference and every estimator back to back, in an order shuffled every round (so
machine load, cache and allocator state hit all alike); the table gives the median time of
each and the ratio ``bestk / reference``, the median over rounds of the within-round ratio.

Times are process CPU time by default (``--clock wall`` for elapsed time): torch runs on one
thread (``--threads``), like numpy, so CPU time is the work each call does, and it is not
inflated by other jobs competing for a shared machine's cores.

Workloads (one process, one seed):

* ``65k int``: 65,536 rollouts = 4,096 groups x 16, contiguous integer ids (a trainer layout);
* ``65k str``: the same with verl-style uid strings (object array), shuffled so that groups
  are not contiguous;
* ``65k int shuffled``: integer ids, shuffled (ragged layout, integer factorisation);
* ``1M int``: 1,048,576 rollouts = 65,536 groups x 16, contiguous integer ids.

Target (core hardening issue): argmaxrl <= 1.0x the reference on ``65k int`` and ``65k str``.
Before timing, every estimator is checked against a per-group numpy loop (to 1e-9).

Run: ``python benchmarks/estimators.py [--repeats 51] [--threads 1] [--clock cpu] [--no-1m]``
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
#: (estimator, workload) -> largest allowed ratio to the minimal vectorised GRPO.
TARGETS = {("argmaxrl", "65k int"): 1.0, ("argmaxrl", "65k str"): 1.0}


def grpo_vectorized(rewards: np.ndarray, ids: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Minimal vectorised GRPO: np.unique factorisation + bincount mean/std (N - 1)."""
    _, g = np.unique(ids, return_inverse=True)
    g = g.reshape(-1)
    n = np.bincount(g)
    mean = np.bincount(g, weights=rewards) / n
    dev = rewards - mean[g]
    std = np.sqrt(np.bincount(g, weights=dev * dev) / np.maximum(n - 1, 1))
    return dev / (std[g] + eps)


# --- per-group numpy loops: the correctness check ----------------------------------------
def _argmaxrl_group(r):
    order = np.argsort(-r, kind="stable")
    rs = r[order]
    d = rs - np.append(rs[1:], 0.0)
    w_sorted = np.cumsum((d / np.arange(1, len(r) + 1))[::-1])[::-1]
    w = np.empty_like(w_sorted)
    w[order] = w_sorted
    top2 = np.sort(r)[-2:]
    loo = np.where(r == top2[-1], top2[0], top2[-1])
    return len(r) * w - loo


def _softmax_grpo_group(r, tau=0.1):
    e = np.exp((r - r.max()) / tau)
    return len(r) * e / e.sum() - 1


def _pkpo_group(r, k=4):
    n = len(r)
    order = np.argsort(r, kind="stable")
    g = r[order]
    i = np.arange(1, n + 1)
    w = np.zeros(n)
    w[n - 1] = k / n
    for m in range(n - 1, k - 1, -1):  # w_m = w_{m+1} (m+1-k)/m (1-based)
        w[m - 1] = w[m] * (m + 1 - k) / m
    v = np.where(i >= 2, w * (k - 1) / np.maximum(i - 1, 1), 0)
    s = w * g + (np.cumsum((v * g)[::-1])[::-1] - v * g)
    u = np.zeros(n)  # sloo_minus_one baseline: rho_{k-1} of the group without i
    u[n - 2] = (k - 1) / (n - 1)
    for m in range(n - 2, k - 2, -1):
        u[m - 1] = u[m] * (m + 1 - (k - 1)) / m
    u_prev = np.append(0.0, u[:-1])
    rho = (np.cumsum(u * g) - u * g) + (np.cumsum((u_prev * g)[::-1])[::-1] - u_prev * g)
    out = np.empty(n)
    out[order] = n * (s - k / n * rho)
    return out


LOOPS = {
    "argmaxrl": _argmaxrl_group,
    "maxrl": _argmaxrl_group,
    "softmax_grpo": _softmax_grpo_group,
    "grpo": lambda r: (r - r.mean()) / (r.std(ddof=1) + 1e-6),
    "rloo": lambda r: r - (r.sum() - r) / (len(r) - 1),
    "reinforce": lambda r: r.copy(),
    "pkpo": _pkpo_group,
}


def loop_advantages(name, rewards, ids):
    _, inverse = np.unique(ids, return_inverse=True)
    order = np.argsort(inverse.reshape(-1), kind="stable")
    bounds = np.flatnonzero(np.diff(inverse.reshape(-1)[order])) + 1
    out = np.empty_like(rewards)
    for idx in np.split(order, bounds):
        out[idx] = LOOPS[name](rewards[idx])
    return out


def workloads(seed: int = 0, big: bool = True):
    rng = np.random.default_rng(seed)
    G, N = 4096, 16
    graded = rng.random(G * N)
    binary = rng.integers(0, 2, G * N).astype(np.float64)
    ids = np.repeat(np.arange(G), N)
    perm = rng.permutation(G * N)
    uids = np.array([f"uid-{x:08x}" for x in ids], dtype=object)[perm]
    out = {
        "65k int": (graded, binary, ids),
        "65k str": (graded[perm], binary[perm], uids),
        "65k int shuffled": (graded[perm], binary[perm], ids[perm]),
    }
    if big:
        G1 = 65536
        out["1M int"] = (rng.random(G1 * N), rng.integers(0, 2, G1 * N).astype(np.float64),
                         np.repeat(np.arange(G1), N))
    return out


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def side_by_side(fns: dict, repeats: int, clock=time.process_time,
                 seed: int = 0) -> dict[str, np.ndarray]:
    """Seconds per call of each function over ``repeats`` rounds; within a round every
    function runs once, in an order shuffled afresh each round (seeded), so that no function
    always follows the same one (the cache and allocator state a call starts from depends
    on what ran just before it)."""
    keys = list(fns)
    for fn in fns.values():
        fn()  # warm-up
    rng = np.random.default_rng(seed)
    times: dict[str, list[float]] = {k: [] for k in keys}
    for _ in range(repeats):
        for i in rng.permutation(len(keys)):
            t0 = clock()
            fns[keys[i]]()
            times[keys[i]].append(clock() - t0)
    return {k: np.asarray(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=51)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (numpy's reference is single-threaded; default 1)")
    ap.add_argument("--no-1m", action="store_true", help="skip the 1M-rollout workload")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                    help="cpu: process CPU time (default; with one thread it is the work done, "
                    "robust to other jobs on a shared machine); wall: elapsed time")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    wl = workloads(big=not args.no_1m)
    print(
        f"# bestk {bestk.__version__}, torch {torch.__version__}, numpy {np.__version__}, "
        f"{torch.get_num_threads()} torch thread(s), {platform.machine()}, "
        f"{args.clock} time, median of {args.repeats}, timed side by side"
    )
    print("| workload | estimator | bestk ms | minimal GRPO ms | ratio | target |")
    print("|---|---|---:|---:|---:|---|")
    ok = True
    for wname, (graded, binary, ids) in wl.items():
        for name, opts in ESTIMATORS:
            r = binary if name == "maxrl" else graded
            got = bestk.advantages(name, r, ids, **opts)
            if wname != "1M int" and not np.allclose(got, loop_advantages(name, r, ids),
                                                    atol=1e-9):
                raise SystemExit(f"{name} {wname}: bestk and the per-group loop disagree")
        fns = {"reference": functools.partial(grpo_vectorized, graded, ids)}
        for name, opts in ESTIMATORS:
            r = binary if name == "maxrl" else graded
            fns[name] = functools.partial(bestk.advantages, name, r, ids, **opts)
        t = side_by_side(fns, args.repeats, CLOCKS[args.clock])
        ms = {k: 1e3 * float(np.median(v)) for k, v in t.items()}
        for name, _ in ESTIMATORS:
            ratio = float(np.median(t[name] / t["reference"]))  # paired within each round
            target = TARGETS.get((name, wname))
            verdict = ""
            if target is not None:
                met = ratio <= target
                ok &= met
                verdict = f"<= {target:.1f}x: {'met' if met else 'MISSED'}"
            print(f"| {wname} | {name} | {ms[name]:.2f} | {ms['reference']:.2f} | "
                  f"{ratio:.2f}x | {verdict} |", flush=True)
    print("\nall targets met" if ok else "\nSOME TARGETS MISSED")


if __name__ == "__main__":
    main()
