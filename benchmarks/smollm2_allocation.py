"""SoftmaxGRPO's reallocation of the gradient budget, measured on a pretrained model's rollouts.

    python benchmarks/smollm2_allocation.py SAMPLES.json [--group 8] [--boot 2000] [--json OUT]

SoftmaxGRPO's Table 3 (the SoftmaxGRPO paper, section 6.3; docs/references.md) bins prompts by
their pass rate p and reports the share of the token-level gradient budget
``sum_i |A_i| x tokens_i`` that each method's advantages give each bin; SoftmaxGRPO
(tau = 0.1) gives near-solved prompts (p >= 0.9) much less than GRPO does. This script makes
that measurement, training-free, on the samples ``benchmarks/smollm2_pilot.py --samples-out``
wrote: every prompt's first ``--group`` samples are one training group (their 0/1 successes
give the advantages, their lengths in tokens the budget); the prompt's pass rate, which
picks its bin, is measured on its *other* samples, so the bin does not depend on the group
(with a group of 8, a pass rate measured on the group itself could reach [0.9, 1] only at
8/8, where every group-relative advantage is 0). Advantages come from bestk's registry
(``grpo`` and ``softmax_grpo`` with ``tau = 0.1``), the shares from
:func:`bestk.metrics.gradient_allocation` with ``pass_rate``.

Reported: each method's share per bin, and the decisive difference ``GRPO's share - SoftmaxGRPO's
share`` on [0.9, 1] with a 95% percentile bootstrap interval over prompts (``--boot``
resamples, seed 0). ``--json`` writes the record as the claims table reads it: testbed
``smollm2-rollouts`` of a results data file (``docs/results/data/smollm2-rollouts.json``,
then ``python benchmarks/make_results.py --render``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from bestk import advantages
from bestk.metrics import PASS_RATE_BINS, gradient_allocation

#: The methods compared: label -> (estimator, options), as the paper's Table 3 runs them.
METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "grpo": ("grpo", {}),
    "softmax_grpo(tau=0.1)": ("softmax_grpo", {"tau": 0.1}),
}


def allocation(samples: dict[str, Any], group: int, boot: int = 2000,
               seed: int = 0) -> dict[str, Any]:
    """The measurement of the module docstring on ``samples`` (``success`` and ``tokens``,
    ``(P, n)`` lists) with groups of the first ``group`` samples."""
    succ = np.asarray(samples["success"], dtype=np.float64)
    tok = np.asarray(samples["tokens"], dtype=np.float64)
    if succ.ndim != 2 or succ.shape != tok.shape:
        raise ValueError(f"success {succ.shape} and tokens {tok.shape} must be (prompts, n)")
    P, n = succ.shape
    if not 2 <= group < n:
        raise ValueError(f"--group must be in [2, {n - 1}] (n = {n} samples per prompt), "
                         f"got {group}")
    if not np.isin(succ, (0.0, 1.0)).all():
        raise ValueError("success must be 0/1")
    g_succ, g_tok = succ[:, :group], tok[:, :group]
    rate = succ[:, group:].mean(1)  # measured on the other samples
    edges = np.asarray(PASS_RATE_BINS)
    bin_of = np.clip(np.searchsorted(edges, rate, side="right") - 1, 0, len(edges) - 2)
    out: dict[str, Any] = {"prompts": P, "group": group, "measure_samples": n - group,
                           "bins": None, "methods": {}}
    mass = {}
    for label, (est, opts) in METHODS.items():
        ids = np.repeat(np.arange(P), group)
        adv = np.asarray(advantages(est, g_succ.reshape(-1), ids, **opts), dtype=np.float64)
        a = gradient_allocation(adv, g_succ.reshape(-1), ids, tokens=g_tok.reshape(-1),
                                pass_rate=rate)
        out["bins"] = a["bins"]
        out["methods"][label] = {"share": a["share"], "prompts": a["prompts"]}
        # each prompt's budget sum |A_i| x tokens_i, for the bootstrap over prompts
        mass[label] = (np.abs(adv) * g_tok.reshape(-1)).reshape(P, group).sum(1)
    top = len(edges) - 2  # the [0.9, 1] bin

    def diff(idx: np.ndarray) -> float:
        shares = []
        for label in METHODS:
            m = mass[label][idx]
            tot = m.sum()
            shares.append(m[bin_of[idx] == top].sum() / tot if tot > 0 else 0.0)
        return float(shares[0] - shares[1])

    rng = np.random.default_rng(seed)
    draws = np.array([diff(rng.integers(0, P, P)) for _ in range(boot)])
    lo, hi = np.percentile(draws, [2.5, 97.5])
    out["near_solved_diff"] = diff(np.arange(P))
    out["near_solved_ci95"] = [float(lo), float(hi)]
    out["pass_rate_mean"] = float(rate.mean())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("samples", type=Path, help="benchmarks/smollm2_pilot.py --samples-out file")
    ap.add_argument("--group", type=int, default=8, help="samples per training group (N)")
    ap.add_argument("--boot", type=int, default=2000, help="bootstrap resamples over prompts")
    ap.add_argument("--json", type=Path, default=None, help="write the record here")
    a = ap.parse_args()
    samples = json.loads(a.samples.read_text())
    res = allocation(samples, a.group, a.boot)
    res["source"] = {k: samples.get(k) for k in ("model", "candidate", "temperature", "system",
                                                  "max_new_tokens", "seed", "commit")}
    print(f"{res['prompts']} prompts, groups of {res['group']}, pass rate measured on "
          f"{res['measure_samples']} other samples (mean {res['pass_rate_mean']:.3f})")
    print("| method | " + " | ".join(res["bins"]) + " |")
    print("|---|" + "---:|" * len(res["bins"]))
    for label, m in res["methods"].items():
        print(f"| {label} | " + " | ".join(f"{100 * s:.1f}%" for s in m["share"]) + " |")
    print("| prompts | " + " | ".join(str(c) for c in next(iter(res["methods"].values()))[
        "prompts"]) + " |")
    lo, hi = res["near_solved_ci95"]
    print(f"GRPO - SoftmaxGRPO share on [0.9,1]: {res['near_solved_diff']:.4f} "
          f"[{lo:.4f}, {hi:.4f}]")
    if a.json is not None:
        import platform

        from bestk.lab.common.io import write_text_atomic

        # the time is the sampling's (the allocation itself takes a second); the environment
        # is the one that computed the allocation
        doc = {"format": "bestk.results.testbeds", "commit": samples.get("commit", "unknown"),
               "wall_seconds": float(samples.get("seconds", 0.0)),
               "environment": {"python": platform.python_version(),
                               "machine": platform.machine(),
                               "torch": __import__("torch").__version__},
               "command": "python benchmarks/smollm2_allocation.py " + " ".join(
                   [_shown(a.samples), "--group", str(a.group), "--boot", str(a.boot)]),
               "testbeds": {"smollm2-rollouts": res}}
        write_text_atomic(a.json, json.dumps(doc, indent=1) + "\n")


def _shown(path: Path) -> str:
    """``path`` relative to the repository when it lies inside it (a command to rerun)."""
    root = Path(__file__).resolve().parents[1]
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return str(path)


if __name__ == "__main__":
    main()
