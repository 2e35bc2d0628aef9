"""bestk's verl plugin, tested against the installed verl (CI installs it: the ``verl`` extra).

* discovery: a fresh interpreter that never imports bestk gets our estimators from verl's own
  ``get_adv_estimator_fn`` through the ``verl.plugins`` entry point, and through
  ``VERL_USE_EXTERNAL_MODULES`` with entry points switched off;
* values: on ragged batches with string uids, non-contiguous group members and verl padding
  rows, verl's estimator equals ``bestk.advantages`` on the real rows and the naive per-group
  references of ``tests/_reference.py``; padding rows get 0 and do not change real groups;
* options: ``+algorithm.bestk.*`` overrides composed with Hydra on verl's own
  ``ppo_trainer.yaml`` reach the estimator; verl's ``compute_advantage`` runs end to end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.conftest import ROOT

verl = pytest.importorskip("verl")  # the `verl` extra; CI installs it

from verl.trainer.ppo import core_algos  # noqa: E402

import bestk  # noqa: E402
from bestk.integrations import verl as bverl  # noqa: E402
from tests._reference import (  # noqa: E402
    argmaxrl_ref,
    loo_max_ref,
    passk_training_ref,
    per_group,
    pkpo_ref,
    softmax_ref,
)

L = 7  # response_length


def verl_batch(seed=0, n_groups=7, min_size=1, max_size=6, binary=False, n_pad=3):
    """(token_level_rewards, response_mask, uid, real) like verl's, ragged and shuffled.

    The outcome reward sits on the last response token; a small per-token term (as a KL
    penalty in the reward would add; not with ``binary``) is spread over the response. Some
    real rows start with a masked token (multi-turn). Padding rows have an all-zero mask,
    non-zero rewards, and uids that either copy a real uid or are a shared ``pad<hex>`` uid.
    """
    rng = np.random.default_rng(seed)
    sizes = rng.integers(min_size, max_size + 1, n_groups)
    lab = np.repeat(np.arange(n_groups), sizes)
    rng.shuffle(lab)
    uid = np.array([f"{u:08x}-uid-{u}" for u in lab], dtype=object)
    b = len(lab)
    if binary:
        score = rng.integers(0, 2, b).astype(np.float64)
    else:
        score = rng.integers(-4, 9, b) / 4.0  # ties and negatives
    lengths = rng.integers(1, L + 1, b)
    mask = (np.arange(L)[None, :] < lengths[:, None]).astype(np.int64)
    first_masked = rng.random(b) < 0.3
    mask[first_masked & (lengths > 1), 0] = 0
    noise = 0.0 if binary else rng.integers(-2, 3, (b, L)) / 64.0
    tok = np.where(mask > 0, noise, 0.0)
    tok[np.arange(b), lengths - 1] += score
    pad_uid = np.array([uid[0]] + ["pad0123abcd"] * (n_pad - 1), dtype=object)[:n_pad]
    pad_tok = rng.integers(1, 5, (n_pad, L)) / 2.0
    order = rng.permutation(b + n_pad)
    rewards = np.concatenate([tok, pad_tok])[order]
    masks = np.concatenate([mask, np.zeros((n_pad, L), np.int64)])[order]
    uids = np.concatenate([uid, pad_uid])[order]
    real = np.concatenate([np.ones(b, bool), np.zeros(n_pad, bool)])[order]
    return torch.tensor(rewards, dtype=torch.float32), torch.tensor(masks), uids, real


def expected(name, rewards, mask, uid, real, **options):
    """Reference: per-sequence scores of the real rows -> naive per-group formula."""
    scores = rewards.double().sum(-1).numpy()
    refs = {
        "argmaxrl": lambda r: argmaxrl_ref(r, options.get("baseline", "loo")),
        "maxrl": lambda r: argmaxrl_ref(r, options.get("baseline", "loo")),
        "softmax_grpo": lambda r: softmax_ref(r, options.get("tau", 0.1)),
        "pkpo": lambda r: pkpo_ref(r, options["k"], options.get("variant", "sloo_minus_one")),
        "loo_max": lambda r: loo_max_ref(r, options.get("scale", "none"), options.get("eps", 1e-6)),
        "passk_training": lambda r: passk_training_ref(r, options["k"], options.get("eps", 1e-6)),
    }
    a = np.zeros(len(scores))
    a[real] = per_group(refs[name], scores[real], list(uid[real]))
    return torch.tensor(a[:, None] * mask.numpy(), dtype=torch.float32)


def run_python(code: str, **env) -> str:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_USE_EXTERNAL")}
    full_env.update(env)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


DISCOVERY = """
import sys
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
for name in ("argmaxrl", "maxrl", "softmax_grpo", "pkpo", "reinforce", "kappo_grpo"):
    print(name, get_adv_estimator_fn(name).__module__)
print("grpo", get_adv_estimator_fn("grpo").__module__)
print("bestk-imported-by-verl", "bestk.integrations.verl" in sys.modules)
"""


def _check_discovery(out: str) -> None:
    lines = dict(line.split(" ", 1) for line in out.strip().splitlines())
    for name in ("argmaxrl", "maxrl", "softmax_grpo", "pkpo", "reinforce", "kappo_grpo"):
        assert name in bverl.VERL_ESTIMATORS
        assert lines[name] == "bestk.integrations.verl"
    assert lines["grpo"] == "verl.trainer.ppo.core_algos"  # verl's own names stay verl's
    assert lines["bestk-imported-by-verl"] == "True"


def test_verl_loads_plugin_from_entry_point():
    _check_discovery(run_python(DISCOVERY))


def test_importing_the_plugin_before_verl_is_fine():
    """Our import pulls in verl, whose entry-point loop re-enters our half-imported module."""
    _check_discovery(run_python("import bestk.integrations.verl\n" + DISCOVERY))


def test_verl_loads_plugin_from_external_modules_env():
    out = run_python(
        DISCOVERY,
        VERL_USE_EXTERNAL_PLUGINS="none",
        VERL_USE_EXTERNAL_MODULES="bestk.integrations.verl",
    )
    _check_discovery(out)


def test_entry_points_off_means_not_registered():
    """Control for the two tests above: without either mechanism verl does not know us."""
    code = (
        "from verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
        "try:\n    get_adv_estimator_fn('argmaxrl')\nexcept ValueError:\n    print('unknown')\n"
    )
    code += "import bestk.integrations.verl\nprint(get_adv_estimator_fn('argmaxrl').__module__)\n"
    out = run_python(code, VERL_USE_EXTERNAL_PLUGINS="none").split()
    assert out == ["unknown", "bestk.integrations.verl"]  # an explicit import registers


CASES = [
    ("argmaxrl", {}, {}),
    ("argmaxrl", {"baseline": "mean"}, {}),
    ("argmaxrl", {"baseline": "none"}, {}),
    ("maxrl", {}, {"binary": True}),
    ("softmax_grpo", {}, {}),
    ("softmax_grpo", {"tau": 0.7}, {}),
    ("pkpo", {"k": 2}, {"min_size": 2}),
    ("pkpo", {"k": 3, "variant": "s"}, {"min_size": 3}),
    ("loo_max", {}, {}),
    ("loo_max", {"scale": "std"}, {}),
    ("passk_training", {"k": 2}, {"binary": True, "min_size": 2, "max_size": 9}),
]


@pytest.mark.parametrize("name,options,batch", CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_verl_estimator_matches_reference_and_bestk(name, options, batch, seed):
    rewards, mask, uid, real = verl_batch(seed=seed, **batch)
    fn = core_algos.get_adv_estimator_fn(name)
    adv, ret = fn(
        token_level_rewards=rewards,
        response_mask=mask,
        index=uid,
        config={"norm_adv_by_std_in_grpo": True, "bestk": options},
    )
    assert adv.shape == rewards.shape and ret.shape == rewards.shape
    assert adv.dtype == rewards.dtype
    torch.testing.assert_close(adv, expected(name, rewards, mask, uid, real, **options))
    torch.testing.assert_close(ret, adv)
    # The same numbers as the public API on the real rows.
    scores = rewards.sum(-1)
    keep = torch.from_numpy(real)
    a = bestk.advantages(name, scores[keep], group=uid[real], **options)
    first_tok = mask[keep].argmax(-1)
    torch.testing.assert_close(adv[keep, first_tok], a)
    assert not adv[~keep].any()


def test_every_registered_estimator_reaches_verl():
    """Every estimator of bestk's registry is verl's under its name -- bestk's own, or verl's
    where verl has one (grpo, rloo) -- and each bestk one runs through verl's registry on a
    verl batch (with its default options; the calibrated one has its own tests below)."""
    for name in bestk.ESTIMATORS:
        fn = core_algos.get_adv_estimator_fn(name)
        ours = getattr(fn, "__bestk_estimator__", None) == name
        assert ours == (name in bverl.VERL_ESTIMATORS), name
    assert {"passk_training", "loo_max"} <= set(bverl.VERL_ESTIMATORS)
    # (another test's estimator, since unregistered from bestk, may still be verl's: skip it)
    for name in [n for n in bverl.VERL_ESTIMATORS if n in bestk.ESTIMATORS]:
        info = bestk.estimator_info(name)
        if info.calibrated:
            continue
        rewards, mask, uid, real = verl_batch(seed=9, min_size=4, binary=info.binary_rewards())
        options = dict(info.default_options)
        adv, _ = core_algos.get_adv_estimator_fn(name)(rewards, mask, uid,
                                                       config={"bestk": options})
        keep = torch.from_numpy(real)
        want = bestk.advantages(name, rewards.sum(-1)[keep], group=uid[real], **options)
        torch.testing.assert_close(adv[keep, mask[keep].argmax(-1)], want)


def grpo_passk_batch(seed, binary=False):
    """A verl batch for verl's own grpo_passk: no padding rows (grpo_passk counts them as
    samples), groups of at least 2 (it refuses smaller ones); graded scores on a coarse grid
    (half-integers in [-1, 1.5], on one response token), so that some groups tie at the top."""
    rewards, mask, uid, real = verl_batch(seed=seed, n_groups=12, min_size=2, max_size=8,
                                          binary=binary, n_pad=0)
    if not binary:
        rng = np.random.default_rng(seed)
        rows = torch.arange(len(uid))
        score = torch.tensor(rng.integers(-2, 4, len(uid)) / 2.0, dtype=rewards.dtype)
        rewards = torch.zeros_like(rewards)
        rewards[rows, mask.argmax(-1)] = score
    return rewards, mask, uid, real


@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("seed, binary", [(0, False), (1, False), (2, True), (3, False)])
def test_loo_max_equals_verls_grpo_passk(seed, binary, norm):
    """Peer test against the installed verl: ``loo_max`` with ``scale="std"`` (``"none"``) is
    verl's ``grpo_passk`` with ``norm_adv_by_std_in_grpo=True`` (``False``), on ragged batches
    with ties at the top (where verl's topk picks one of the tied samples and gives it
    ``r_max - r_second_max = 0``: everyone gets 0 in both)."""
    rewards, mask, uid, _ = grpo_passk_batch(seed, binary)
    theirs, _ = core_algos.get_adv_estimator_fn("grpo_passk")(
        token_level_rewards=rewards, response_mask=mask, index=uid,
        config={"norm_adv_by_std_in_grpo": norm},
    )
    scale = "std" if norm else "none"
    ours, _ = core_algos.get_adv_estimator_fn("loo_max")(
        token_level_rewards=rewards, response_mask=mask, index=uid,
        config={"bestk": {"scale": scale}},
    )
    torch.testing.assert_close(ours, theirs)
    # not vacuous: some groups have a unique best sample, some a tie at the top
    scores = rewards.sum(-1).numpy()
    tops = [np.sort(scores[uid == u])[-2:] for u in np.unique(uid)]
    assert any(a < b for a, b in tops) and any(a == b for a, b in tops)
    assert ours.abs().sum() > 0


def test_padding_rows_do_not_change_real_advantages():
    rewards, mask, uid, real = verl_batch(seed=3, n_pad=4)
    fn = core_algos.get_adv_estimator_fn("argmaxrl")
    with_pad, _ = fn(token_level_rewards=rewards, response_mask=mask, index=uid)
    keep = torch.from_numpy(real)
    without, _ = fn(token_level_rewards=rewards[keep], response_mask=mask[keep], index=uid[real])
    torch.testing.assert_close(with_pad[keep], without)
    # All rows padding: all zeros, no error.
    z, _ = fn(token_level_rewards=rewards, response_mask=torch.zeros_like(mask), index=uid)
    assert not z.any()


def test_integer_index_and_tensor_index():
    rewards, mask, uid, real = verl_batch(seed=5)
    fn = core_algos.get_adv_estimator_fn("softmax_grpo")
    codes = np.unique(uid, return_inverse=True)[1].reshape(-1)
    a_str, _ = fn(token_level_rewards=rewards, response_mask=mask, index=uid)
    a_int, _ = fn(token_level_rewards=rewards, response_mask=mask, index=codes)
    a_t, _ = fn(token_level_rewards=rewards, response_mask=mask, index=torch.from_numpy(codes))
    torch.testing.assert_close(a_int, a_str)
    torch.testing.assert_close(a_t, a_str)


def _compose(*overrides):
    from hydra import compose, initialize_config_dir

    cfg_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=cfg_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def test_hydra_plus_overrides_reach_the_estimator_through_verl_compute_advantage():
    """``+algorithm.bestk.tau=...`` on verl's real config, through verl's compute_advantage."""
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    cfg = _compose("algorithm.adv_estimator=softmax_grpo", "+algorithm.bestk.tau=0.3")
    assert bverl.options_from_config(cfg.algorithm) == {"tau": 0.3}
    rewards, mask, uid, real = verl_batch(seed=2)
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask},
        non_tensors={"uid": uid},
    )
    out = compute_advantage(
        data, adv_estimator=cfg.algorithm.adv_estimator, num_repeat=4, config=cfg.algorithm
    )
    want = expected("softmax_grpo", rewards, mask, uid, real, tau=0.3)
    torch.testing.assert_close(out.batch["advantages"], want)
    torch.testing.assert_close(out.batch["returns"], want)
    # tau really reached the estimator: the default tau gives different numbers.
    default = expected("softmax_grpo", rewards, mask, uid, real)
    assert not torch.allclose(out.batch["advantages"], default)


def test_hydra_config_without_plus_and_dataclass_conversion_fail_as_documented():
    from hydra.errors import ConfigCompositionException
    from verl.utils.config import omega_conf_to_dataclass

    with pytest.raises(ConfigCompositionException, match=r"\+algorithm\.bestk\.tau"):
        _compose("algorithm.bestk.tau=0.3")
    cfg = _compose("+algorithm.bestk.tau=0.3")
    with pytest.raises(Exception, match="bestk"):
        omega_conf_to_dataclass(cfg.algorithm)
    # verl's AlgoConfig itself (no bestk key) means "estimator defaults".
    algo = omega_conf_to_dataclass(_compose().algorithm)
    assert bverl.options_from_config(algo) == {}
    assert bverl.options_from_config(None) == {}


def test_bad_input_and_options_are_clear_value_errors():
    rewards, mask, uid, _ = verl_batch(seed=4, min_size=2)
    fn = core_algos.get_adv_estimator_fn("pkpo")
    with pytest.raises(ValueError, match="requires option.*k"):
        fn(token_level_rewards=rewards, response_mask=mask, index=uid, config={"bestk": {}})
    argmax = core_algos.get_adv_estimator_fn("argmaxrl")
    with pytest.raises(ValueError, match="unknown option.*'tau'"):
        argmax(rewards, mask, uid, config={"bestk": {"tau": 0.1}})
    with pytest.raises(ValueError, match="algorithm.bestk must be a mapping"):
        argmax(rewards, mask, uid, config={"bestk": 3})
    with pytest.raises(ValueError, match="index has"):
        argmax(rewards, mask, uid[:-1])
    with pytest.raises(ValueError, match="needs the group labels"):
        argmax(rewards, mask)
    with pytest.raises(ValueError, match="response_mask must be"):
        argmax(rewards, mask[:, :-1], uid)
    with pytest.raises(ValueError, match="2-D"):
        argmax(rewards[:, 0], mask[:, 0], uid)
    bad = rewards.clone()
    bad[int(np.flatnonzero(mask[:, -1].numpy())[0]), -1] = float("nan")
    with pytest.raises(ValueError, match="finite"):
        argmax(bad, mask, uid)
    maxrl = core_algos.get_adv_estimator_fn("maxrl")
    with pytest.raises(ValueError, match="0/1|binary"):
        maxrl(rewards, mask, uid)


def test_kappo_grpo_from_calibration_file(tmp_path):
    from bestk.kappo import calibrate

    rng = np.random.default_rng(0)
    prompts = [f"gsm8k-{i}" for i in range(5)]
    bank = {p: rng.integers(0, 2, 30).tolist() for p in prompts}
    cal = calibrate(bank, k=4, beta=0.1, kind="binary")
    path = cal.save(tmp_path / "cal.json")
    labels = np.array([prompts[i] for i in rng.integers(0, 5, 24)], dtype=object)
    scores = torch.tensor(rng.integers(0, 2, 24), dtype=torch.float32)
    mask = torch.ones(24, L, dtype=torch.int64)
    rewards = torch.zeros(24, L)
    rewards[:, -1] = scores
    fn = core_algos.get_adv_estimator_fn("kappo_grpo")
    adv, _ = fn(rewards, mask, labels, config={"bestk": {"calibration": str(path)}})
    want = bestk.advantages("kappo_grpo", scores, group=labels, calibration=cal)
    torch.testing.assert_close(adv[:, 0], want)
    # Stock verl's uuid uids are not calibration prompt ids: a clear error naming one.
    uuids = np.array([f"uuid-{i // 4}" for i in range(24)], dtype=object)
    with pytest.raises(ValueError, match="uuid-0.*not in the calibration"):
        fn(rewards, mask, uuids, config={"bestk": {"calibration": str(path)}})
    with pytest.raises(ValueError, match="cannot be read"):
        fn(rewards, mask, labels, config={"bestk": {"calibration": str(tmp_path / "no.json")}})


def test_path_options_are_loaded_once_across_verl_steps(tmp_path, monkeypatch):
    """verl calls the estimator every step with the path from ``algorithm.bestk``: the file is
    read once (cached by path, modification time and size) and again once rewritten."""
    from bestk.kappo import calibrate, load_calibration

    prompts = ["p0", "p1", "p2"]
    path = calibrate({p: [0, 1, 0, 1, 1] for p in prompts}, k=2, beta=0.1).save(tmp_path / "c.json")
    calls = []

    def loader(value):
        calls.append(value)
        return load_calibration(value)

    monkeypatch.setitem(bestk.estimator_info("kappo_grpo").path_options, "calibration", loader)
    labels = np.array(prompts * 4, dtype=object)
    rewards = torch.zeros(12, L)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 1.0] * 2 + [0.0, 1.0, 1.0] * 2)
    mask = torch.ones(12, L, dtype=torch.int64)
    fn = core_algos.get_adv_estimator_fn("kappo_grpo")
    config = {"bestk": {"calibration": str(path)}}
    first = [fn(rewards, mask, labels, config=config)[0] for _ in range(3)]
    assert len(calls) == 1 and all(torch.equal(a, first[0]) for a in first)
    st = os.stat(path)
    calibrate({p: [0, 0, 0, 0, 1] for p in prompts}, k=2, beta=0.1).save(path)
    os.utime(path, ns=(st.st_mtime_ns + 10**9, st.st_mtime_ns + 10**9))
    again = fn(rewards, mask, labels, config=config)[0]
    assert len(calls) == 2 and not torch.equal(again, first[0])


def test_register_is_idempotent():
    before = {n: core_algos.get_adv_estimator_fn(n) for n in bverl.VERL_ESTIMATORS}
    assert bverl.register() == list(bverl.VERL_ESTIMATORS)
    assert {n: core_algos.get_adv_estimator_fn(n) for n in bverl.VERL_ESTIMATORS} == before


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool, torch.int32])
def test_caller_mask_is_not_modified(dtype):
    rewards, mask, uid, real = verl_batch(seed=6)
    m = mask.to(dtype)
    before = m.clone()
    adv, _ = core_algos.get_adv_estimator_fn("argmaxrl")(rewards, m, uid)
    assert torch.equal(m, before)
    torch.testing.assert_close(adv, expected("argmaxrl", rewards, mask, uid, real))


def test_preflight_checks_a_command_line():
    out = bverl.preflight(
        [
            "algorithm.adv_estimator=softmax_grpo",
            "+algorithm.bestk.tau=0.2",
            "actor_rollout_ref.rollout.n=5",
        ]
    )
    assert "compute_bestk_softmax_grpo_outcome_advantage" in out and "{'tau': 0.2}" in out
    assert "groups of 5" in out
    assert "verl's own" in bverl.preflight(["algorithm.adv_estimator=grpo"])
    with pytest.raises(ValueError, match="requires option.*k"):
        bverl.preflight(["algorithm.adv_estimator=pkpo"])
    with pytest.raises(ValueError, match="Unknown advantage estimator"):
        bverl.preflight(["algorithm.adv_estimator=argmax"])
    with pytest.raises(ValueError, match="needs \\+algorithm.bestk.calibration"):
        bverl.preflight(["algorithm.adv_estimator=kappo_grpo"])
    assert bverl._main(["algorithm.adv_estimator=argmaxrl", "+algorithm.bestk.baseline=nope"]) == 1


def test_example_launch_script_dry_run():
    """examples/verl/run_gsm8k_argmaxrl.sh: every override composes on verl's real config."""
    script = os.path.join(
        ROOT, "examples", "verl", "run_gsm8k_argmaxrl.sh"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_USE_EXTERNAL")}
    env.update(DRY_RUN="1", ESTIMATOR="pkpo")
    out = subprocess.run(
        ["bash", script, "+algorithm.bestk.k=4"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "algorithm.bestk={'k': 4}" in out.stdout and out.stdout.strip().endswith("OK")


def test_example_kappo_bank_and_calibrate_cli(tmp_path, monkeypatch):
    """examples/verl/make_kappo_bank.py on a verl-generation-shaped parquet, then `bestk
    calibrate`, then the verl estimator with that calibration file."""
    import runpy

    import pandas as pd
    from typer.testing import CliRunner

    from bestk.cli import app

    rng = np.random.default_rng(0)
    rows = []
    for i in range(4):
        truth = str(10 + i)
        resp = [f"so #### {truth if rng.random() < 0.3 + 0.15 * i else 0}" for _ in range(30)]
        rows.append(
            {"responses": resp, "reward_model": {"ground_truth": truth}, "extra_info": {"index": i}}
        )
    pd.DataFrame(rows).to_parquet(tmp_path / "ref.parquet")
    script = os.path.join(ROOT, "examples", "verl", "make_kappo_bank.py")
    monkeypatch.setattr(
        sys, "argv", [script, str(tmp_path / "ref.parquet"), str(tmp_path / "bank.jsonl")]
    )
    runpy.run_path(script, run_name="__main__")
    bank = [json.loads(x) for x in (tmp_path / "bank.jsonl").read_text().splitlines()]
    assert [b["prompt_id"] for b in bank] == [0, 1, 2, 3]
    for b, r in zip(bank, rows, strict=True):
        want = [float(x.endswith(r["reward_model"]["ground_truth"])) for x in r["responses"]]
        assert b["rewards"] == want
    res = CliRunner().invoke(
        app,
        [
            "calibrate",
            str(tmp_path / "bank.jsonl"),
            "--k",
            "4",
            "--beta",
            "0.1",
            "--kind",
            "binary",
            "-o",
            str(tmp_path / "cal.json"),
        ],
    )
    assert res.exit_code == 0, res.output
    labels = np.repeat(np.arange(4), 6)
    scores = torch.tensor(rng.integers(0, 2, 24), dtype=torch.float32)
    rewards = torch.zeros(24, L)
    rewards[:, -1] = scores
    fn = core_algos.get_adv_estimator_fn("kappo_grpo")
    adv, _ = fn(
        rewards,
        torch.ones(24, L),
        labels,
        config={"bestk": {"calibration": str(tmp_path / "cal.json")}},
    )
    from bestk.kappo import Calibration

    cal = Calibration.load(tmp_path / "cal.json")
    torch.testing.assert_close(
        adv[:, 0], bestk.advantages("kappo_grpo", scores, labels, calibration=cal)
    )


def test_plumbing_reproduces_verls_own_grpo():
    """Cross-check against verl itself: routing bestk's ``grpo`` through the plugin's code path
    (scores, uid grouping, broadcast) gives verl's ``grpo`` and ``grpo_vectorized``."""
    rewards, mask, uid, real = verl_batch(seed=8, min_size=2, n_pad=0)
    ours, _ = bverl.outcome_advantages("grpo", rewards, mask, uid)
    for name in ("grpo", "grpo_vectorized"):
        theirs, _ = core_algos.get_adv_estimator_fn(name)(
            token_level_rewards=rewards, response_mask=mask, index=uid
        )
        torch.testing.assert_close(ours, theirs.to(ours.dtype), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# Reward-side KAPPO: kappo_compute_score through verl's own reward code path

KAPPO_REWARD = (
    "reward.custom_reward_function.path=pkg://bestk.integrations.verl",
    "reward.custom_reward_function.name=kappo_compute_score",
)
GSM_ALPHABET = "0123456789# +=abc"


def _kappo_setup(tmp_path, k=4, beta=0.1):
    """A binary calibration for prompt ids 0, 1, 2 (q = 3/30, 15/30, 27/30) and a char
    tokenizer directory (verl's reward worker loads its tokenizer from model.path)."""
    from bestk.kappo import calibrate
    from bestk.train.model.policy import build_char_tokenizer

    bank = {0: [1] * 3 + [0] * 27, 1: [1] * 15 + [0] * 15, 2: [1] * 27 + [0] * 3}
    cal_path = calibrate(bank, k=k, beta=beta).save(tmp_path / "cal.json")
    tok = build_char_tokenizer(GSM_ALPHABET)
    tok.save_pretrained(tmp_path / "tok")
    q = {i: sum(v) / 30 for i, v in bank.items()}
    return cal_path, tok, q


def _gsm_batch(tok, rows):
    """A verl DataProto after rollout: rows of (response text, prompt index, split, uid)."""
    from verl import DataProto

    b, lp, lr = len(rows), 3, 12
    prompts = torch.tensor([tok.encode("1+1")] * b)
    responses = torch.full((b, lr), tok.pad_token_id)
    attention = torch.zeros(b, lp + lr, dtype=torch.long)
    attention[:, :lp] = 1
    for i, (text, *_rest) in enumerate(rows):
        ids = tok.encode(text)
        responses[i, : len(ids)] = torch.tensor(ids)
        attention[i, lp : lp + len(ids)] = 1
    obj = lambda xs: np.array(xs, dtype=object)  # noqa: E731
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "attention_mask": attention},
        non_tensors={
            "data_source": obj(["openai/gsm8k"] * b),
            "reward_model": obj([{"ground_truth": "12"}] * b),
            "extra_info": obj([{"index": r[1], "split": r[2]} for r in rows]),
            "uid": obj([r[3] for r in rows]),
        },
    )


@pytest.mark.parametrize("estimator", ["rloo", "grpo"])
def test_kappo_reward_through_verls_reward_loop_and_estimators(tmp_path, estimator):
    """verl's RewardLoopWorker (the trainer's reward path: load_reward_manager ->
    NaiveRewardManager -> our function with reward_kwargs) scores GSM8K answers with verl's own
    scorer, bestk turns them into a_k(x)·R; verl's rloo / Dr.GRPO then give a_k(x) times the
    centred raw rewards, a_k solved independently (brentq on Eq. 6)."""
    from verl.experimental.reward_loop import RewardLoopWorker
    from verl.experimental.reward_loop.reward_manager import NaiveRewardManager
    from verl.trainer.ppo.ray_trainer import compute_advantage

    from tests._kappo_ref import a_k_ref

    cal_path, tok, q = _kappo_setup(tmp_path)
    cfg = _compose(
        *KAPPO_REWARD,
        f"+reward.custom_reward_function.reward_kwargs.calibration={cal_path}",
        f"actor_rollout_ref.model.path={tmp_path / 'tok'}",
        f"algorithm.adv_estimator={estimator}",
        "algorithm.norm_adv_by_std_in_grpo=False",
    )
    assert "kappo_compute_score" in bverl.preflight(
        [*KAPPO_REWARD, f"+reward.custom_reward_function.reward_kwargs.calibration={cal_path}",
         f"algorithm.adv_estimator={estimator}", "algorithm.norm_adv_by_std_in_grpo=False"]
    )
    rng = np.random.default_rng(0)
    rows, correct = [], []
    for pid in (0, 1, 2):
        for _ in range(4):
            ok = bool(rng.random() < 0.5)
            rows.append((("so #### 12" if ok else "#### 13"), pid, "train", f"uid-{pid}"))
            correct.append(float(ok))
    rows.append(("#### 12", 0, "test", "uid-val"))  # a validation row: raw score
    correct.append(1.0)
    data = _gsm_batch(tok, rows)
    worker = RewardLoopWorker(cfg)
    assert isinstance(worker.reward_manager, NaiveRewardManager)
    out = worker.loop.run_until_complete(worker.compute_score_batch(data))
    scores = [o["reward_score"] for o in out]
    a = {pid: a_k_ref(q[pid], 4, 0.1) for pid in q}
    want = [a[r[1]] * c if r[2] == "train" else c for r, c in zip(rows, correct, strict=True)]
    np.testing.assert_allclose(scores, want, rtol=1e-9)
    info = [o["reward_extra_info"] for o in out]
    assert [i["acc"] for i in info] == correct and [i["raw_score"] for i in info] == correct
    assert len({tuple(sorted(i)) for i in info}) == 1  # same keys on every row (verl stacks them)

    train = data[:12]
    train.batch["token_level_rewards"] = NaiveRewardManager.assemble_rm_scores(train, scores[:12])
    train.batch["response_mask"] = train.batch["attention_mask"][:, 3:]
    adv = compute_advantage(
        train, adv_estimator=estimator, norm_adv_by_std_in_grpo=False, config=cfg.algorithm
    ).batch["advantages"]
    r = np.array(correct[:12]).reshape(3, 4)
    mean = r.mean(1, keepdims=True)
    centred = r - mean if estimator == "grpo" else (r - mean) * 4 / 3  # LOO: n/(n-1)(r - mean)
    expect = np.array([a[p] for p in (0, 1, 2)])[:, None] * centred
    seq = adv.sum(-1) / train.batch["response_mask"].sum(-1)
    np.testing.assert_allclose(seq.numpy(), expect.reshape(-1), rtol=1e-5, atol=1e-6)


def test_kappo_reward_options_and_errors(tmp_path):
    from bestk.kappo import calibrate

    cal_path, _, q = _kappo_setup(tmp_path)
    kw = dict(data_source="openai/gsm8k", solution_str="#### 12", ground_truth="12")
    out = bverl.kappo_compute_score(**kw, extra_info={"index": 2}, calibration=str(cal_path))
    assert out["score"] == pytest.approx(
        calibrate({2: [1] * 27 + [0] * 3}, k=4, beta=0.1).get("a_k", [2])[0]
    )
    # A callable base, extra reward_kwargs forwarded to it, a dict result, another id key.
    calls = []

    def base(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):
        calls.append(bonus)
        return {"score": 1.0, "length": len(solution_str)}

    out = bverl.kappo_compute_score(
        **kw, extra_info={"pid": 0}, calibration=str(cal_path), base=base,
        prompt_id_key="pid", bonus=2.0,
    )
    assert calls == [2.0] and out["length"] == 7 and out["raw_score"] == 1.0
    from tests._kappo_ref import a_k_ref

    assert out["score"] == pytest.approx(a_k_ref(q[0], 4, 0.1), rel=1e-9)
    fn = bverl.resolve_score_fn("verl.utils.reward_score.gsm8k:compute_score")
    assert fn("#### 12", "12") == 1.0
    assert bverl.resolve_score_fn("default").__name__ == "default_compute_score"
    # Win-rate calibration: T_j of the raw score.
    wr = calibrate({5: [0.0, 0.5, 1.0] * 10}, k=2, beta=0.2, kind="winrate").save(
        tmp_path / "wr.json"
    )
    out = bverl.kappo_compute_score(
        **kw, extra_info={"index": 5}, calibration=str(wr), base=lambda **_: 0.5
    )
    from bestk.kappo import winrate_table

    assert out["score"] == pytest.approx(winrate_table(30, 2, 0.2)[20])
    with pytest.raises(ValueError, match="needs the calibration"):
        bverl.kappo_compute_score(**kw, extra_info={"index": 0})
    with pytest.raises(ValueError, match="extra_info has no 'index'"):
        bverl.kappo_compute_score(**kw, extra_info={"split": "train"}, calibration=str(cal_path))
    with pytest.raises(ValueError, match="prompt 7 is not in the calibration"):
        bverl.kappo_compute_score(**kw, extra_info={"index": 7}, calibration=str(cal_path))
    with pytest.raises(ValueError, match="cannot be loaded"):
        bverl.resolve_score_fn("no_such_module_xyz:f")
    with pytest.raises(ValueError, match="module:function"):
        bverl.resolve_score_fn("no_colon")
    for _ in range(2):  # not cached: the second call refuses it too
        with pytest.raises(ValueError, match="is not callable"):
            bverl.resolve_score_fn("math:pi")
    with pytest.raises(ValueError, match="without 'score'"):
        bverl.kappo_compute_score(
            **kw, extra_info={"index": 0}, calibration=str(cal_path), base=lambda **_: {"x": 1}
        )


def test_preflight_refuses_std_grpo_with_a_binary_kappo_reward(tmp_path):
    cal_path, _, _ = _kappo_setup(tmp_path)
    cal_arg = f"+reward.custom_reward_function.reward_kwargs.calibration={cal_path}"
    with pytest.raises(ValueError, match="cancels the binary KAPPO multiplier"):
        bverl.preflight([*KAPPO_REWARD, cal_arg, "algorithm.adv_estimator=grpo"])
    with pytest.raises(ValueError, match="needs .*reward_kwargs.calibration"):
        bverl.preflight([*KAPPO_REWARD, "algorithm.adv_estimator=rloo"])
    with pytest.raises(ValueError, match="ignores the legacy top-level"):
        bverl.preflight(["custom_reward_function.path=pkg://bestk.integrations.verl",
                         "custom_reward_function.name=kappo_compute_score"])
    with pytest.raises(ValueError, match="path=pkg://bestk.integrations.verl"):
        bverl.preflight(
            ["reward.custom_reward_function.path=/tmp/x.py",
             "reward.custom_reward_function.name=kappo_compute_score"]
        )


def test_example_kappo_recipe_dry_run(tmp_path):
    """examples/verl/run_gsm8k_kappo.sh: composes on verl's config, preflight passes for rloo
    and Dr.GRPO, and the KL coefficient is the calibration's beta ((N-1)/N beta for Dr.GRPO)."""
    cal_path, _, _ = _kappo_setup(tmp_path, beta=0.05)
    script = os.path.join(ROOT, "examples", "verl", "run_gsm8k_kappo.sh")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_USE_EXTERNAL")}
    env.update(CAL=str(cal_path), N="8")
    for est, coef in (("rloo", 0.05), ("grpo", 0.05 * 7 / 8)):
        cfg = _compose(*_script_overrides(script, {**env, "ESTIMATOR": est}))
        assert cfg.actor_rollout_ref.actor.kl_loss_coef == pytest.approx(coef)
        assert cfg.algorithm.adv_estimator == est
        assert cfg.algorithm.norm_adv_by_std_in_grpo is (est != "grpo")
        assert cfg.reward.custom_reward_function.name == "kappo_compute_score"
    env.update(DRY_RUN="1", ESTIMATOR="rloo")  # the real preflight, in a fresh interpreter
    out = subprocess.run(
        ["bash", script, "trainer.nnodes=1"], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "reward: kappo_compute_score over default_compute_score" in out.stdout
    assert out.stdout.strip().endswith("OK")
    env.update(CAL=str(tmp_path / "missing.json"))
    out = subprocess.run(["bash", script], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 2 and "not found" in out.stderr


def _script_overrides(script, env):
    """The Hydra overrides the launch script would hand verl (its DRY_RUN=print mode)."""
    out = subprocess.run(
        ["bash", script], capture_output=True, text=True, env={**env, "DRY_RUN": "print"},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()
