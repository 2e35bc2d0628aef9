"""The per-seed data a digits (or sparse) run hands to the claims (``testbeds.json``).

For each testbed and learner: its run configuration (what reward it saw, on which data, with
which rollout budget and learning rate, from which grid) and its per-seed metrics at the
start and the end of RL (:mod:`bestk.lab.claims` reads them).
"""

from __future__ import annotations

from collections.abc import Mapping

from bestk.lab.common.io import (
    MethodData,
    TestbedData,
    alloc_key,
)
from bestk.lab.digits.engine import SlotResults
from bestk.lab.digits.settings import (
    LEARNERS,
    DigitsConfig,
    Learner,
)
from bestk.lab.digits.sweep import SettingResult


def per_learner(test: SlotResults, label: str, when: str) -> dict[str, list[float]]:
    """Per-seed values (seed order) of every metric of one learner at ``when`` (start / end)."""
    idx = [i for i, s in enumerate(test["slots"]) if s["learner"] == label]
    idx.sort(key=lambda i: test["slots"][i]["seed"])
    out = {k: [v[i] for i in idx] for k, v in test[when].items()}
    if when == "end":
        out.update({alloc_key(b): [v[i] for i in idx] for b, v in test["allocation"].items()})
    return out


def learner_config(lrn: Learner, reward: str, lr: float, *, n: int, steps: int, batch: int,
                   data_id: str) -> dict[str, object]:
    """The run configuration recorded with each learner's per-seed data: what the estimator
    sees (``reward``), the data it trains on (``prompts``) and the rollout budget."""
    rl = lrn.estimator is not None
    return {
        "estimator": lrn.estimator or "cross-entropy (exact ML)",
        "options": {k: v for k, v in lrn.options},
        "reward": reward if rl else "label",
        "prompts": data_id,
        "rollouts": n * steps * batch if rl else 0,
        "lr": lr,
        "sampling": "independent (A/A control of " + lrn.control_of + ")" if lrn.control_of
        else "per-slot draws",
        "control_of": lrn.control_of,
        "exploratory": lrn.exploratory,
    }


def learner_data(test: SlotResults, label: str, reward: str, lr: float, *, n: int,
                 steps: int, batch: int) -> MethodData:
    """One learner's entry in the claims data: ``{"config", "start", "end"}`` (its run
    configuration from :func:`learner_config` and its per-seed metrics from
    :func:`per_learner`)."""
    return {
        "config": learner_config(LEARNERS[label], reward, lr, n=n, steps=steps, batch=batch,
                                 data_id=test["data_id"]),
        "start": per_learner(test, label, "start"),
        "end": per_learner(test, label, "end"),
    }


def record_sweep(methods: Mapping[str, MethodData], setting: SettingResult) -> None:
    """Add to each learner's run configuration the grid its rate was chosen from
    (``lr_grid``; an A/A control: its learner's), whether the rate is interior to it
    (``lr_interior``) and @k-GRPO's chosen KL strength (``kappo_beta``)."""
    sweep = setting["sweep"]
    for lb, m in methods.items():
        tuned = LEARNERS[lb].control_of or LEARNERS[lb].rate_of or lb
        m["config"]["lr_grid"] = sweep.get("grids", {}).get(tuned, sweep["grid"])
        m["config"]["lr_interior"] = sweep.get("interior", {}).get(tuned)
        if lb in setting.get("beta", {}):
            m["config"]["kappo_beta"] = setting["beta"][lb]


def testbed_data(cfg: DigitsConfig, settings: Mapping[str, SettingResult]
                 ) -> dict[str, TestbedData]:
    """``{testbed id: {"ks", "seeds", "methods": {label: {"config", "start", "end"}}, "sweep"}}``
    for the claims (testbed ids ``digits-binary`` / ``digits-graded``)."""
    out = {}
    for reward, st in settings.items():
        test = st["test"]
        methods = {
            lb: learner_data(test, lb, reward, st["selected"][lb], n=cfg.n, steps=cfg.steps,
                             batch=cfg.batch_size)
            for lb in st["learners"]
        }
        record_sweep(methods, st)
        extra = {"kappo_calibration": test["kappo_calibration"]} \
            if "kappo_calibration" in test else {}
        out[f"digits-{reward}"] = {"ks": list(cfg.ks), "seeds": list(range(cfg.seeds)),
                                   "n": cfg.n, "methods": methods, "sweep": st["sweep"],
                                   "wall_seconds": st.get("wall_seconds"), **extra}
    return out
