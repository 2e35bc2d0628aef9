"""bestk's SkyRL plug-in, tested against the real SkyRL package on CPU.

SkyRL pins transformers and peft away from the main test environment's versions, so ``.ci/run``
runs this file in an environment of its own (``.ci/.venv-skyrl``, installed as
docs/integrations.md says); elsewhere it is skipped.

* registry: every bestk estimator is in SkyRL's ``AdvantageEstimatorRegistry``, under its name or
  ``bestk_<name>`` where SkyRL has its own, and SkyRL's own estimators stay SkyRL's;
* values: SkyRL's ``compute_advantages_and_returns`` (what its trainer calls) returns
  ``bestk.advantages`` (to 1e-6) and the naive per-group references of ``tests/_reference.py``
  for every registered estimator, on ragged batches, contiguous or shuffled; SkyRL's own
  padding rows (``pad_training_input_batch``) get 0 and change no real group;
* config: ``trainer.algorithm.bestk.*`` parsed by SkyRL's own parser reaches the estimator;
  ``trainer.algorithm.kappo_reward`` is reward-side KAPPO; the registry entries survive the
  cloudpickle round trip SkyRL's Ray registry actor makes.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest
import torch

if importlib.util.find_spec("skyrl") is None:  # the `skyrl` extra, in CI's SkyRL environment
    pytest.skip("needs skyrl: pip install \"bestk[skyrl]\"", allow_module_level=True)

#: SkyRL 0.3.0 says Python >= 3.11, but its ``skyrl.tinker.types`` builds a pydantic model on
#: ``typing.TypedDict``, which pydantic takes only from Python 3.12 on. The CPU torch on this
#: repository's CI machines is for 3.11, so its SkyRL environment is 3.11 with 3.12's TypedDict
#: (typing_extensions' backport) set before SkyRL loads, here and in the subprocesses below
#: (docs/integrations.md, "Versions"). Nothing of bestk's depends on it.
SHIM = ("import typing, typing_extensions; typing.TypedDict = typing_extensions.TypedDict\n"
        if sys.version_info < (3, 12) else "")
exec(SHIM)

from skyrl.backends.skyrl_train.training_batch import (  # noqa: E402
    TrainingInputBatch,
    pad_training_input_batch,
)
from skyrl.backends.skyrl_train.utils import ppo_utils  # noqa: E402
from skyrl.train.config import SkyRLTrainConfig  # noqa: E402

import bestk  # noqa: E402
from bestk.integrations import skyrl as bskyrl  # noqa: E402
from bestk.kappo import calibrate, transform_rewards  # noqa: E402
from tests._reference import (  # noqa: E402
    argmaxrl_ref,
    grpo_ref,
    loo_max_ref,
    passk_training_ref,
    per_group,
    pkpo_ref,
    rloo_ref,
    softmax_ref,
    split_groups,
)
from tests.conftest import scaled_rloo_ref  # noqa: E402

L = 6  # response length
REGISTRY = ppo_utils.AdvantageEstimatorRegistry
SKYRL_OWN = {e.value for e in ppo_utils.AdvantageEstimator}  # gae, grpo, rloo, reinforce++, maxrl


def skyrl_batch(seed=0, n_groups=7, min_size=1, max_size=6, binary=False, shuffle=False):
    """``(token_level_rewards, response_mask, uids)`` as SkyRL's trainer builds them.

    Groups of ragged sizes; uids are the prompts' dataset row numbers as strings (SkyRL's
    ``PromptDataset``); the outcome reward sits on each response's last token (SkyRL's
    ``per_token_rewards``), plus a small per-token term unless ``binary``; responses are
    right-padded. ``shuffle`` interleaves the groups' rows.
    """
    rng = np.random.default_rng(seed)
    sizes = rng.integers(min_size, max_size + 1, n_groups)
    rows = rng.choice(100, n_groups, replace=False)
    uids = np.repeat(rows, sizes).astype(str)
    if shuffle:
        uids = uids[rng.permutation(len(uids))]
    b = len(uids)
    score = rng.integers(0, 2, b).astype(float) if binary else rng.integers(-4, 9, b) / 4.0
    lengths = rng.integers(1, L + 1, b)
    mask = (np.arange(L)[None, :] < lengths[:, None]).astype(np.int64)
    tok = np.where(mask > 0, 0.0 if binary else rng.integers(-2, 3, (b, L)) / 64.0, 0.0)
    tok[np.arange(b), lengths - 1] += score
    return torch.tensor(tok, dtype=torch.float32), torch.tensor(mask), [str(u) for u in uids]


def skyrl_advantages(name, rewards, mask, uids, options=None, **fields):
    """SkyRL's own dispatch, as its trainer calls it, under bestk's config class."""
    algo = bskyrl.BestkAlgorithmConfig(bestk=dict(options or {}), **fields)
    return ppo_utils.compute_advantages_and_returns(
        token_level_rewards=rewards, response_mask=mask, index=uids,
        adv_estimator=bskyrl.SKYRL_ESTIMATORS[name], config=algo, values=None,
        gamma=algo.gamma, lambd=algo.lambd, grpo_norm_by_std=algo.grpo_norm_by_std,
    )


@pytest.fixture(scope="module")
def calibration_file(tmp_path_factory):
    """A binary k=4 calibration over the dataset rows 0..99 (SkyRL's uids)."""
    rng = np.random.default_rng(11)
    bank = {row: rng.integers(0, 2, 16).tolist() for row in range(100)}
    return calibrate(bank, k=4, beta=0.1, kind="binary").save(
        tmp_path_factory.mktemp("cal") / "cal.json")


REFS = {
    "argmaxrl": lambda r, o: argmaxrl_ref(r, o.get("baseline", "loo")),
    "maxrl": lambda r, o: argmaxrl_ref(r, o.get("baseline", "loo")),
    "softmax_grpo": lambda r, o: softmax_ref(r, o.get("tau", 0.1)),
    "pkpo": lambda r, o: pkpo_ref(r, o["k"], o.get("variant", "sloo_minus_one")),
    "grpo": lambda r, o: grpo_ref(r, o.get("scale", "std"), o.get("eps", 1e-6)),
    "rloo": lambda r, o: rloo_ref(r),
    "reinforce": lambda r, o: np.asarray(r, dtype=np.float64),
    "passk_training": lambda r, o: passk_training_ref(r, o["k"]),
    "loo_max": lambda r, o: loo_max_ref(r, o.get("scale", "none")),
}

CASES = [
    ("argmaxrl", {}, {}),
    ("argmaxrl", {"baseline": "mean"}, {}),
    ("argmaxrl", {"baseline": "none"}, {}),
    ("maxrl", {}, {"binary": True}),
    ("maxrl", {"baseline": "mean"}, {"binary": True}),
    ("softmax_grpo", {}, {}),
    ("softmax_grpo", {"tau": 0.7}, {}),
    ("pkpo", {"k": 2}, {"min_size": 2}),
    ("pkpo", {"k": 3, "variant": "s"}, {"min_size": 3}),
    ("pkpo", {"k": 2, "variant": "sloo"}, {"min_size": 3}),
    ("grpo", {}, {}),
    ("grpo", {"scale": "none"}, {}),
    ("rloo", {}, {}),
    ("reinforce", {}, {}),
    ("kappo_grpo", {"calibration": "CAL"}, {"binary": True}),
    ("passk_training", {"k": 2}, {"binary": True, "min_size": 2}),
    ("loo_max", {}, {}),
    ("loo_max", {"scale": "std"}, {}),
]


def reference(name, options, scores, uids, calibration):
    if name == "kappo_grpo":  # a_k(x) times GRPO's standardised reward (KAPPO Eq. 140)
        out = np.zeros(len(scores))
        for label, (idx, vals) in split_groups(scores, uids).items():
            out[idx] = calibration.get("a_k", [int(label)])[0] * grpo_ref(vals)
        return out
    return per_group(lambda r: REFS[name](r, options), scores, uids)


def test_every_bestk_estimator_is_registered_and_skyrls_own_stay():
    assert {name for name, _, _ in CASES} == set(bestk.ESTIMATORS)  # a case for each
    available = set(REGISTRY.list_available())
    for name in bestk.ESTIMATORS:
        skyrl_name = bskyrl.SKYRL_ESTIMATORS[name]
        assert skyrl_name == (f"bestk_{name}" if name in SKYRL_OWN else name)
        assert skyrl_name in available
        assert REGISTRY.get(skyrl_name).__bestk_estimator__ == name
    for own in SKYRL_OWN:  # SkyRL's own implementations, untouched
        assert not hasattr(REGISTRY.get(own), "__bestk_estimator__")
        assert REGISTRY.get(own).__module__ == ppo_utils.__name__
    assert bskyrl.register() == bskyrl.SKYRL_ESTIMATORS  # idempotent


@pytest.mark.parametrize("name,options,batch", CASES)
@pytest.mark.parametrize("shuffle", [False, True])
def test_skyrl_dispatch_returns_bestks_advantages(name, options, batch, shuffle,
                                                  calibration_file):
    rewards, mask, uids = skyrl_batch(seed=len(name) + shuffle, shuffle=shuffle, **batch)
    options = {k: (str(calibration_file) if v == "CAL" else v) for k, v in options.items()}
    adv, ret = skyrl_advantages(name, rewards, mask, uids, options)
    assert adv.shape == rewards.shape and adv.dtype == rewards.dtype
    assert torch.equal(ret, adv)
    assert len(set(uids)) > 1 and len({uids.count(u) for u in uids}) > 1  # ragged
    scores = rewards.sum(-1)
    want = bestk.advantages(name, scores, group=uids, **options)
    torch.testing.assert_close(adv, want[:, None] * mask, atol=1e-6, rtol=0)
    cal = bestk.kappo.load_calibration(calibration_file)
    ref = reference(name, options, scores.double().numpy(), uids, cal)
    torch.testing.assert_close(adv, torch.tensor(ref[:, None] * mask.numpy(), dtype=adv.dtype))


def padded(rewards, mask, uids, pad):
    """The batch after SkyRL's own ``pad_training_input_batch``."""
    batch = TrainingInputBatch({"rewards": rewards, "response_mask": mask,
                                "loss_mask": mask.clone()})
    batch.metadata = {"uids": list(uids)}
    out = pad_training_input_batch(batch, pad)
    return out["rewards"], out["response_mask"], out.metadata["uids"]


@pytest.mark.parametrize("name,options", [("argmaxrl", {"baseline": "none"}), ("reinforce", {}),
                                          ("kappo_grpo", {"calibration": "CAL"})])
def test_skyrl_padding_rows_get_zero_and_change_nothing(name, options, calibration_file):
    options = {k: (str(calibration_file) if v == "CAL" else v) for k, v in options.items()}
    rewards, mask, uids = skyrl_batch(seed=3, binary=True)
    prows, pmask, puids = padded(rewards, mask, uids, 3)
    assert puids[-3:] == ["pad0", "pad1", "pad2"] and bool(pmask[-3:].any())  # not all-zero
    assert bskyrl.skyrl_padding(puids).tolist() == [False] * len(uids) + [True] * 3
    adv, _ = skyrl_advantages(name, prows, pmask, puids, options)
    alone, _ = skyrl_advantages(name, rewards, mask, uids, options)
    torch.testing.assert_close(adv[: len(uids)], alone, atol=0, rtol=0)
    assert not adv[len(uids):].any()
    # step-wise training passes the uids as a numpy array
    adv_np, _ = skyrl_advantages(name, prows, pmask, np.array(puids), options)
    assert torch.equal(adv_np, adv)


def test_skyrl_padding_is_only_the_padding_tail():
    assert not bskyrl.skyrl_padding(["3", "pad1"]).any()  # pad1 without pad0
    assert not bskyrl.skyrl_padding(["pad0", "3"]).any()  # not at the end
    assert bskyrl.skyrl_padding(["pad0"]).tolist() == [True]
    assert not bskyrl.skyrl_padding(torch.arange(3)).any()
    assert not bskyrl.skyrl_padding([]).any()


def test_skyrls_own_estimators_agree_with_bestks_twins():
    """Cross-check against SkyRL itself: its loop implementations of GRPO, RLOO and MaxRL's mean
    form equal bestk's ``bestk_grpo``, ``bestk_rloo`` and ``bestk_maxrl(baseline=mean)``."""
    rewards, mask, uids = skyrl_batch(seed=8, min_size=2, binary=True)
    algo = bskyrl.BestkAlgorithmConfig()
    for own, ours, options in [("grpo", "grpo", {}), ("rloo", "rloo", {}),
                               ("maxrl", "maxrl", {"baseline": "mean"})]:
        theirs, _ = ppo_utils.compute_advantages_and_returns(
            token_level_rewards=rewards.clone(), response_mask=mask, index=uids,
            adv_estimator=own, config=algo)
        mine, _ = skyrl_advantages(ours, rewards, mask, uids, options)
        torch.testing.assert_close(mine, theirs, atol=2e-5, rtol=2e-5)


def test_skyrl_config_carries_the_options_to_the_estimator():
    cfg = bskyrl.load_config([
        "trainer.override_entrypoint=bestk.integrations.skyrl",  # how main_base hands over
        "trainer.algorithm.advantage_estimator=pkpo",
        "trainer.algorithm.bestk.k=3",
        "trainer.algorithm.bestk.variant=s",
        "generator.n_samples_per_prompt=4",
    ])
    algo = cfg.trainer.algorithm
    assert isinstance(algo, bskyrl.BestkAlgorithmConfig) and algo.bestk == {"k": 3, "variant": "s"}
    rewards, mask, uids = skyrl_batch(seed=5, min_size=3)
    adv, _ = ppo_utils.compute_advantages_and_returns(
        token_level_rewards=rewards, response_mask=mask, index=uids,
        adv_estimator=algo.advantage_estimator, config=algo)
    scores = rewards.sum(-1)
    want = bestk.advantages("pkpo", scores, group=uids, k=3, variant="s")
    torch.testing.assert_close(adv, want[:, None] * mask, atol=1e-6, rtol=0)
    other = bestk.advantages("pkpo", scores, group=uids, k=2)
    assert not torch.allclose(adv, other[:, None] * mask)  # the options really arrived
    with pytest.raises(ValueError, match="Invalid fields"):
        bskyrl.load_config(["trainer.algorithm.bestk_k=3"])
    with pytest.raises(ValueError, match="prefix"):
        bskyrl.load_config(["+trainer.algorithm.bestk.k=3"])
    # SkyRL's own config refuses the section: why the plug-in brings its own entry point
    with pytest.raises(ValueError, match="Invalid fields.*bestk"):
        SkyRLTrainConfig.from_cli_overrides(["trainer.algorithm.bestk.k=3"])


def test_bad_options_and_input_are_clear_value_errors():
    rewards, mask, uids = skyrl_batch(seed=4, min_size=2)
    with pytest.raises(ValueError, match="requires option.*k"):
        skyrl_advantages("pkpo", rewards, mask, uids)
    with pytest.raises(ValueError, match="unknown option.*'tau'"):
        skyrl_advantages("argmaxrl", rewards, mask, uids, {"tau": 0.1})
    with pytest.raises(ValueError, match="trainer.algorithm.bestk must be a mapping"):
        REGISTRY.get("argmaxrl")(rewards, mask, uids, config={"bestk": 3})
    with pytest.raises(ValueError, match="index has"):
        skyrl_advantages("argmaxrl", rewards, mask, uids[:-1])
    with pytest.raises(ValueError, match="0/1|binary"):
        skyrl_advantages("maxrl", rewards, mask, uids)


#: SkyRL's default logger is wandb, which its validate_cfg refuses without an API key.
CONSOLE = "trainer.logger=console"


def preflight(*args):
    return bskyrl.preflight([CONSOLE, *args])


def test_preflight_checks_a_command_line(calibration_file):
    out = preflight("trainer.algorithm.advantage_estimator=softmax_grpo",
                    "trainer.algorithm.bestk.tau=0.2", "generator.n_samples_per_prompt=5")
    assert "SkyRLEstimator('softmax_grpo')" in out and "{'tau': 0.2}" in out
    assert "groups of 5" in out
    assert "SkyRL's own" in preflight("trainer.algorithm.advantage_estimator=grpo")
    with pytest.raises(ValueError, match="requires option.*k"):
        preflight("trainer.algorithm.advantage_estimator=pkpo")
    with pytest.raises(ValueError, match="needs trainer.algorithm.bestk.calibration=PATH"):
        preflight("trainer.algorithm.advantage_estimator=kappo_grpo")
    out = preflight("trainer.algorithm.advantage_estimator=kappo_grpo",
                    f"trainer.algorithm.bestk.calibration={calibration_file}")
    assert "calibration: Calibration(kind='binary', k=4" in out
    with pytest.raises(AssertionError, match="invalid advantage_estimator"):  # SkyRL's check
        preflight("trainer.algorithm.advantage_estimator=argmax")


def run_module(*args):
    """``python -m bestk.integrations.skyrl ARGS`` in a fresh interpreter."""
    code = SHIM + "import runpy; runpy.run_module('bestk.integrations.skyrl', run_name='__main__')"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=300)


def test_preflight_command():
    ok = run_module(CONSOLE, "trainer.algorithm.advantage_estimator=pkpo",
                    "trainer.algorithm.bestk.k=2")
    assert ok.returncode == 0 and ok.stdout.strip().endswith("OK"), ok.stderr[-3000:]
    assert "trainer.algorithm.bestk={'k': 2}" in ok.stdout
    bad = run_module(CONSOLE, "trainer.algorithm.advantage_estimator=argmaxrl",
                     "trainer.algorithm.bestk.baseline=nope")
    assert bad.returncode == 1 and bad.stderr.startswith("error: ValueError:"), bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_main_hands_skyrl_the_extended_config(monkeypatch):
    """``main`` as SkyRL's ``main_base`` calls it with ``trainer.override_entrypoint``: SkyRL's
    validate_cfg, Ray started, and SkyRL's own ``skyrl_entrypoint`` given bestk's config (Ray
    and the run itself stood in for: they need GPUs)."""
    import ray
    from skyrl.train.entrypoints import main_base

    utils = importlib.import_module("skyrl.train.utils.utils")
    seen = []
    monkeypatch.setattr(utils, "initialize_ray", lambda cfg: seen.append(("ray", cfg)))
    monkeypatch.setattr(main_base, "skyrl_entrypoint", types.SimpleNamespace(
        remote=lambda cfg: seen.append(("run", cfg))))
    monkeypatch.setattr(ray, "get", lambda ref: ref)
    argv = ["main_base.py", "trainer.override_entrypoint=bestk.integrations.skyrl", CONSOLE,
            "trainer.algorithm.advantage_estimator=softmax_grpo", "trainer.algorithm.bestk.tau=0.3"]
    monkeypatch.setattr(sys, "argv", argv)
    main_base.main()  # SkyRL's own main: it dispatches to bestk.integrations.skyrl.main
    assert [what for what, _ in seen] == ["ray", "run"]
    cfg = seen[1][1]
    assert isinstance(cfg, bskyrl.BestkSkyRLConfig) and cfg.trainer.algorithm.bestk == {"tau": 0.3}
    monkeypatch.setattr(sys, "argv", argv[:-1] + ["trainer.algorithm.bestk.tau=-1"])
    with pytest.raises(ValueError, match="tau"):  # bestk's check, before Ray starts
        main_base.main()
    assert len(seen) == 2


def trainer_batch(rewards, mask, uids, pad, step_wise=False):
    """A ``TrainingInputBatch`` as SkyRL's ``convert_to_training_input`` leaves it: rewards,
    masks, uids, padded by SkyRL's own ``pad_training_input_batch``."""
    data = TrainingInputBatch({"rewards": rewards, "response_mask": mask,
                               "loss_mask": mask.clone(), "values": None})
    data.metadata = {"uids": list(uids), "avg_response_length": float(mask.sum(-1).double().mean())}
    if step_wise:  # every row the last step of its trajectory
        data.metadata["is_last_step"] = [True] * len(uids)
    return pad_training_input_batch(data, pad)


@pytest.mark.parametrize("step_wise", [False, True])
def test_skyrls_trainer_step_computes_bestks_advantages(step_wise):
    """SkyRL's own ``RayPPOTrainer.compute_advantages_and_returns`` (the trainer's step, with
    its padding and, for step-wise training, its trajectory broadcast) on bestk's config."""
    from skyrl.train.trainer import RayPPOTrainer

    cfg = bskyrl.load_config(["trainer.algorithm.advantage_estimator=argmaxrl",
                              "trainer.algorithm.bestk.baseline=none",
                              f"generator.step_wise_trajectories={step_wise}"])
    trainer = types.SimpleNamespace(cfg=cfg, all_metrics={})  # what the method reads of it
    rewards, mask, uids = skyrl_batch(seed=13, min_size=2)
    assert rewards[0].sum() != 0  # the padding rows copy row 0: as groups of their own they
    # would get argmaxrl(baseline=none)'s A = r != 0
    data = RayPPOTrainer.compute_advantages_and_returns(
        trainer, trainer_batch(rewards, mask, uids, pad=3, step_wise=step_wise))
    b = len(uids)
    want = bestk.advantages("argmaxrl", rewards.sum(-1), group=uids, baseline="none")
    want = want[:, None] * mask
    torch.testing.assert_close(data["advantages"][:b], want, atol=1e-6, rtol=0)
    assert not data["advantages"][b:].any()
    torch.testing.assert_close(data["returns"], data["advantages"])
    assert trainer.all_metrics["loss/avg_raw_advantages"] == pytest.approx(
        float(torch.masked_select(want, mask.bool()).mean()), abs=1e-6)


# ---------------------------------------------------------------------------------------------
# Reward-side KAPPO: trainer.algorithm.kappo_reward


def test_kappo_reward_is_rloo_on_the_adaptive_reward(calibration_file):
    rewards, mask, uids = skyrl_batch(seed=9, binary=True)
    prows, pmask, puids = padded(rewards, mask, uids, 2)  # pad uids are not in the calibration
    adv, _ = skyrl_advantages("rloo", prows, pmask, puids, kappo_reward=str(calibration_file))
    cal = bestk.kappo.load_calibration(calibration_file)
    scores = rewards.sum(-1).double().numpy()
    a_k = cal.get("a_k", [int(u) for u in uids])  # KAPPO Cor. 4.4: a_k(x) R
    want = per_group(rloo_ref, a_k * scores, uids)
    torch.testing.assert_close(adv[: len(uids)],
                               torch.tensor(want[:, None] * mask.numpy(), dtype=adv.dtype))
    assert not adv[len(uids):].any()
    # without it: plain RLOO, so the calibration really acted
    plain, _ = skyrl_advantages("rloo", rewards, mask, uids)
    assert not torch.allclose(plain, adv[: len(uids)])


def test_kappo_reward_with_a_winrate_calibration_allows_std_normalisation(tmp_path):
    rng = np.random.default_rng(2)
    bank = {row: (rng.integers(-4, 9, 12) / 4.0).tolist() for row in range(100)}
    path = calibrate(bank, k=4, beta=0.1, kind="winrate").save(tmp_path / "w.json")
    rewards, mask, uids = skyrl_batch(seed=6)
    adv, _ = skyrl_advantages("grpo", rewards, mask, uids, kappo_reward=str(path))
    cal = bestk.kappo.load_calibration(path)
    t = transform_rewards(cal, uids, rewards.sum(-1).double())
    want = per_group(grpo_ref, t.numpy(), uids)
    torch.testing.assert_close(adv, torch.tensor(want[:, None] * mask.numpy(), dtype=adv.dtype))


def test_kappo_reward_refuses_what_would_apply_refuse_or_cancel_it(calibration_file):
    rewards, mask, uids = skyrl_batch(seed=10, binary=True, min_size=2)
    cal = str(calibration_file)
    with pytest.raises(ValueError, match="apply one twice"):
        skyrl_advantages("kappo_grpo", rewards, mask, uids, {"calibration": cal}, kappo_reward=cal)
    with pytest.raises(ValueError, match="bestk_maxrl takes 0/1 rewards"):
        skyrl_advantages("maxrl", rewards, mask, uids, kappo_reward=cal)
    with pytest.raises(ValueError, match="Eq. 139"):  # std-normalised GRPO cancels a_k(x)
        skyrl_advantages("grpo", rewards, mask, uids, kappo_reward=cal)
    with pytest.raises(ValueError, match="Eq. 139"):
        skyrl_advantages("grpo", rewards, mask, uids, {"scale": "std"}, kappo_reward=cal)
    dr_grpo, _ = skyrl_advantages("grpo", rewards, mask, uids, {"scale": "none"},
                                  kappo_reward=cal)  # Dr.GRPO keeps it
    assert dr_grpo.abs().sum() > 0
    for name in ("argmaxrl", "softmax_grpo", "reinforce"):  # they do not cancel a scale
        skyrl_advantages(name, rewards, mask, uids, kappo_reward=cal)
    own = bskyrl.load_config([CONSOLE, "trainer.algorithm.advantage_estimator=rloo",
                              f"trainer.algorithm.kappo_reward={cal}"])
    with pytest.raises(ValueError, match="SkyRL's own rloo would ignore it"):
        bskyrl.check_config(own)
    ours = bskyrl.load_config(["trainer.algorithm.advantage_estimator=bestk_rloo",
                               f"trainer.algorithm.kappo_reward={cal}"])
    assert any("kappo_reward: Calibration(kind='binary'" in line
               for line in bskyrl.check_config(ours))


# ---------------------------------------------------------------------------------------------
# Distribution and later registrations


def test_the_ray_registry_copy_runs_in_a_fresh_process(tmp_path):
    """SkyRL's registry actor holds cloudpickle copies of the registered estimators and hands
    them to Ray workers; a process that never imported bestk gets a working estimator."""
    rewards, mask, uids = skyrl_batch(seed=12)
    blob = ppo_utils.cloudpickle.dumps(REGISTRY.get("argmaxrl"))
    (tmp_path / "fn.pkl").write_bytes(blob)
    torch.save({"rewards": rewards, "mask": mask, "uids": uids}, tmp_path / "batch.pt")
    code = SHIM + (
        "import pickle, sys, torch\n"
        "d = torch.load(sys.argv[1] + '/batch.pt')\n"
        "assert not any(m.startswith('bestk') for m in sys.modules)\n"
        "fn = pickle.loads(open(sys.argv[1] + '/fn.pkl', 'rb').read())\n"
        "adv, _ = fn(d['rewards'], d['mask'], d['uids'], config=None)\n"
        "torch.save(adv, sys.argv[1] + '/adv.pt')\n"
    )
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, timeout=300, env=dict(os.environ))
    assert res.returncode == 0, res.stderr[-3000:]
    want, _ = skyrl_advantages("argmaxrl", rewards, mask, uids)
    assert torch.equal(torch.load(tmp_path / "adv.pt"), want)


def test_the_design_example_runs_through_skyrls_dispatch(scaled_rloo):
    """docs/design.md's example estimator, registered after the plug-in loaded, with its
    path-valued option from ``trainer.algorithm.bestk`` and SkyRL's uids as prompt ids."""
    assert bskyrl.SKYRL_ESTIMATORS["scaled_rloo"] == "scaled_rloo"
    scaled_rloo.write_text(json.dumps({"1": 3.0, "2": 0.25}))
    rng = np.random.default_rng(0)
    uids = [str(u) for u in np.sort(rng.integers(0, 4, 14))]
    scores = rng.integers(0, 2, 14).astype(np.float64)
    rewards = torch.zeros(14, L)
    rewards[:, -1] = torch.tensor(scores, dtype=torch.float32)
    mask = torch.ones(14, L, dtype=torch.int64)
    adv, _ = skyrl_advantages("scaled_rloo", rewards, mask, uids, {"scales": str(scaled_rloo)})
    want = scaled_rloo_ref(scores, uids, {"1": 3.0, "2": 0.25})
    np.testing.assert_allclose(adv[:, 0].double().numpy(), want, rtol=1e-6)
