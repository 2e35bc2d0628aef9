"""bestk estimators through verl's advantage-estimator interface vs verl's own estimators.

Builds one verl-shaped batch -- ``B`` rollouts (``G = B / N`` prompts x ``N`` samples) with
verl's ``uid`` strings (``uuid4``, contiguous repeats as ``DataProto.repeat(interleave=True)``
makes them), ``token_level_rewards`` with the outcome reward on the last response token and a
``response_mask`` of random response lengths -- and times every estimator exactly as verl calls
it: ``core_algos.get_adv_estimator_fn(name)(token_level_rewards=..., response_mask=...,
index=uid, config=algorithm_config)``. Estimators alternate within each repeat; reports the
median and the ratio to verl's ``grpo_vectorized``.

    python benchmarks/verl_estimators.py                  # B=65536, response_length=512
    python benchmarks/verl_estimators.py --rollouts 4096 --repeats 3   # quick look

Target (docs/benchmarks.md): ``argmaxrl`` through the plugin no slower than verl's
``grpo_vectorized`` (ratio <= 1.0).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import numpy as np
import torch


def make_batch(rollouts: int, group_size: int, response_length: int, seed: int = 0):
    """A verl-like batch: (rewards, mask, uid) with graded outcome rewards in [0, 1]."""
    if rollouts % group_size:
        raise ValueError("--rollouts must be a multiple of --group-size")
    g = torch.Generator().manual_seed(seed)
    prompts = rollouts // group_size
    uids = np.array(
        [
            str(uuid.UUID(int=int(x)))
            for x in torch.randint(0, 2**62, (prompts,), generator=g).tolist()
        ],
        dtype=object,
    )
    index = np.repeat(uids, group_size)
    lengths = torch.randint(1, response_length + 1, (rollouts,), generator=g)
    pos = torch.arange(response_length)
    mask = (pos.unsqueeze(0) < lengths.unsqueeze(1)).to(torch.int64)
    score = (torch.randint(0, 11, (rollouts,), generator=g) / 10.0).to(torch.float32)
    rewards = torch.zeros(rollouts, response_length, dtype=torch.float32)
    rewards[torch.arange(rollouts), lengths - 1] = score
    return rewards, mask, index


def time_interleaved(calls: dict, repeats: int) -> dict[str, tuple[float, float]]:
    """Median and min seconds per call; estimators alternate within each round so that load
    from other processes hits all of them alike."""
    for fn, kwargs in calls.values():  # warm-up
        fn(**kwargs)
    runs: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, (fn, kwargs) in calls.items():
            t0 = time.perf_counter()
            fn(**kwargs)
            runs[name].append(time.perf_counter() - t0)
    return {name: (statistics.median(r), min(r)) for name, r in runs.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rollouts", type=int, default=65536)
    ap.add_argument("--group-size", type=int, default=16)
    ap.add_argument("--response-length", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    ap.add_argument(
        "--breakdown", action="store_true", help="also time the stages of the argmaxrl call"
    )
    ap.add_argument(
        "--estimators",
        default="grpo_vectorized,grpo,rloo,rloo_vectorized,grpo_passk,"
        "argmaxrl,maxrl,softmax_grpo,pkpo",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    import verl  # noqa: F401  (loads bestk's verl.plugins entry point)
    from omegaconf import OmegaConf
    from verl.trainer.ppo import core_algos

    rewards, mask, index = make_batch(args.rollouts, args.group_size, args.response_length)
    binary = (rewards > 0.5).to(rewards.dtype)  # maxrl needs 0/1 rewards
    config = OmegaConf.create({"norm_adv_by_std_in_grpo": True, "bestk": {}})
    pkpo_config = OmegaConf.create({"norm_adv_by_std_in_grpo": True, "bestk": {"k": 4}})
    names = [n.strip() for n in args.estimators.split(",") if n.strip()]
    calls = {}
    for name in names:
        fn = core_algos.get_adv_estimator_fn(name)
        kwargs = {
            # an estimator of the binary reward domain (maxrl) gets 0/1 rewards; one with a
            # required option k (pkpo) gets k=4
            "token_level_rewards": binary if _binary_domain(name) else rewards,
            "response_mask": mask,
            "index": index,
            "config": pkpo_config if _needs_k(name) else config,
        }
        calls[name] = (fn, kwargs)
    results = time_interleaved(calls, args.repeats)

    base = results.get("grpo_vectorized", (float("nan"),))[0]
    print(
        f"B={args.rollouts} rollouts ({args.rollouts // args.group_size} uid groups of "
        f"{args.group_size}), response_length={args.response_length}, torch threads="
        f"{args.threads}, median of {args.repeats}"
    )
    print(f"{'estimator':<18} {'source':<6} {'median ms':>10} {'min ms':>8} {'/ grpo_vec':>10}")
    for name, (med, best) in results.items():
        src = "bestk" if getattr(calls[name][0], "__bestk_estimator__", None) else "verl"
        print(f"{name:<18} {src:<6} {med * 1e3:>10.1f} {best * 1e3:>8.1f} {med / base:>10.2f}")
    if args.breakdown:
        breakdown(rewards, mask, index, args.repeats)


def _binary_domain(name: str) -> bool:
    from bestk.estimators import ESTIMATORS, estimator_info

    return name in ESTIMATORS and estimator_info(name).binary_rewards()


def _needs_k(name: str) -> bool:
    import inspect

    from bestk.estimators import ESTIMATORS, estimator_options

    return name in ESTIMATORS and estimator_options(name).get("k") is inspect.Parameter.empty


def breakdown(rewards, mask, index, repeats: int) -> None:
    """Median time of each stage of the plugin's argmaxrl call."""
    import bestk
    from bestk.groups import make_groups
    from bestk.integrations.verl import real_rows

    scores = rewards.sum(-1)
    adv = bestk.advantages("argmaxrl", scores, group=index)
    stages = {
        "token_level_rewards.sum(-1)": lambda: rewards.sum(-1),
        "padding-row detection": lambda: real_rows(mask),
        "make_groups(uid) (string factorisation)": lambda: make_groups(index, len(index)),
        "bestk.advantages(argmaxrl, incl. factorisation)": lambda: bestk.advantages(
            "argmaxrl", scores, group=index
        ),
        "broadcast A[:, None] * response_mask": lambda: mask.to(dtype=adv.dtype, copy=True).mul_(
            adv.unsqueeze(-1)
        ),
    }
    times = time_interleaved({k: (f, {}) for k, f in stages.items()}, repeats)
    print("argmaxrl stages (median ms):")
    for k, (med, _) in times.items():
        print(f"  {k:<50} {med * 1e3:8.1f}")


if __name__ == "__main__":
    main()
