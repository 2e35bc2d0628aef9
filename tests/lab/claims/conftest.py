"""Shared data of the claims' tests: synthetic per-seed results of every trained testbed."""

from __future__ import annotations

import numpy as np

from bestk.lab.claims import CLAIMS, DIVERSITY, TESTBEDS
from bestk.lab.digits import BIN_LABELS

#: The baseline arms of the trained testbeds (GRPO, its success and A/A variants).
BASELINES = {"grpo", "grpo (success)", "grpo (A/A)"}
#: The reference arms of the KAPPO testbed (k = 1, and PKPO for the Fig. 3 claim).
KAPPO_BASELINES = {"apo(k=1)", "dpo(k=1)", "pkpo(k=4)", "apo(k=1) (A/A)"}


def _methods_by_testbed() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for c in CLAIMS:
        for arm in c.arms:
            if c.kind == "trained":
                out.setdefault(arm.testbed, set()).update({arm.a, arm.b})
    return out


def synthetic_data(effect: float, *, seeds: int = 10, noise: float = 0.004,
                   seed: int = 0) -> dict:
    """Per-seed data for every trained testbed: baselines (GRPO, its success and A/A
    variants) at the base level, RLOO ``effect`` worse, every other method ``effect`` better
    on every metric (in the metric's own direction). Seeds share a per-seed offset (pairing)."""
    rng = np.random.default_rng(seed)
    data = {}
    for tid, methods in _methods_by_testbed().items():
        ks = [1, 4, 16] if TESTBEDS[tid].kind != "language" else [1, 2, 4, 8, 16, 32, 64]
        n = max(TESTBEDS[tid].min_seeds, seeds)
        keys = {f"{p}@{k}": ("greater", 0.3 + 0.02 * i) for p in ("pass", "best")
                for i, k in enumerate(ks)}
        keys.update({f"alloc{b}": ("greater", 0.2) for b in BIN_LABELS})
        keys["alloc[.9,1]"] = ("less", 0.2)
        keys["distinct_correct"] = ("greater", 5.0)
        keys[DIVERSITY] = ("greater", 0.4)  # no "n" in the data: not derived, taken as given
        offset = rng.normal(0, 0.02, n)
        tb = {"ks": ks, "seeds": list(range(n)), "methods": {}}
        baselines = BASELINES | (KAPPO_BASELINES if tid == "language-permute-kappo" else set())
        for lb in sorted(methods):
            e = 0.0 if lb in baselines else (-effect if lb == "rloo" else effect)
            end, start = {}, {}
            for key, (better, base) in keys.items():
                sign = 1.0 if better == "greater" else -1.0
                end[key] = (base + sign * e + offset + rng.normal(0, noise, n)).tolist()
                # every method trains (pass@1 x2.5), the other metrics start in [0.2, 0.8];
                # on the KAPPO and pretrained testbeds pass@16 starts above where the
                # baselines end (they sharpen: the sharpening claims' precondition)
                sharpen = tid in ("language-permute-kappo", "smollm2") and key == "pass@16"
                start[key] = ((0.4 * base if key == "pass@1" else
                               base + 0.05 if sharpen else base - 0.05) + offset).tolist()
            # the pretrained testbed trains every method on the 0/1 success
            reward = "success" if tid == "smollm2" or (
                lb in ("maxrl", "grpo (success)", "kappo_grpo(k=4)")
                and TESTBEDS[tid].kind == "language") else "binary"
            tb["methods"][lb] = {"config": {"reward": reward, "prompts": f"{tid}-prompts",
                                            "rollouts": 1000, "lr": 1e-3},
                                 "start": start, "end": end}
        data[tid] = tb
    return data
