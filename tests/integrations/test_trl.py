"""``BestkGRPOTrainer`` against the installed TRL (CI installs it: the ``trl`` extra).

* A real 2-process run (``torchrun --nproc_per_node 2``, ``use_cpu=True``, gloo): world size 2,
  and each rank trains on its slice of bestk's advantages computed on the gathered rewards
  (worker: ``tests/_trl_two_ranks.py``). ``accelerate launch --cpu`` is not used: accelerate
  1.15 starts a single process with it.

* A real 2-step ``BestkGRPOTrainer`` run on CPU (a tiny Qwen2 built from a config, a character
  tokenizer built with ``tokenizers``, an in-memory dataset, two weighted reward functions that
  return ``None`` for some completions): the advantages TRL trains on equal the naive per-group
  ArgMaxRL reference on rewards recomputed from what the reward functions returned, TRL's loss
  sees exactly those advantages, and TRL's advantage log matches.
* :func:`bestk_advantages` (TRL's reward aggregation + a bestk estimator) on hand-made
  matrices, the per-process slice with a faked 2-process accelerator, and bad input.
"""

from __future__ import annotations

import math
import types

import numpy as np
import pytest
import torch

from tests.conftest import ROOT

pytest.importorskip("trl")  # the `trl` extra; CI installs it

import bestk  # noqa: E402
from bestk.integrations.trl import BestkGRPOTrainer, bestk_advantages  # noqa: E402
from tests._reference import (  # noqa: E402
    argmaxrl_ref,
    loo_max_ref,
    passk_training_ref,
    per_group,
    softmax_ref,
)
from tests._trl_tiny import grpo_config, tiny_policy  # noqa: E402

N = 4  # num_generations


class Recorder:
    """Reward functions that remember what they returned, call by call."""

    def __init__(self):
        self.calls: list[tuple[list, list]] = []  # (reward_len values, reward_char values)
        self._pending: list | None = None

    def reward_len(self, completions, tag, **_):
        out = []
        for i, (c, t) in enumerate(zip(completions, tag, strict=True)):
            if t == "partial" or (t == "mixed" and i % 2 == 0):
                out.append(None)
            else:
                out.append((len(c) % 5) / 4)
        self._pending = out
        return out

    def reward_char(self, completions, tag, **_):
        out = []
        for i, c in enumerate(completions):
            out.append(None if tag[i] == "mixed" and i % 2 == 0 else c.count("a") / 2)
        self.calls.append((self._pending, out))
        return out


class Probe(BestkGRPOTrainer):
    """Records what generation hands to the loss and what the loss receives."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.generated: list[torch.Tensor] = []
        self.trained: list[torch.Tensor] = []

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        self.generated.append(out["advantages"].detach().cpu().clone())
        return out

    def compute_loss(self, model, inputs, *a, **kw):
        self.trained.append(inputs["advantages"].detach().cpu().clone())
        return super().compute_loss(model, inputs, *a, **kw)


def expected_from_calls(calls, weights, ref, pids):
    """Independent recomputation: weighted nansum, unscorable rows out, then ``ref(values,
    prompt_id)`` group by group (one call per group)."""
    out = []
    for (len_vals, char_vals), ids in zip(calls, pids, strict=True):
        m = np.array(
            [
                [np.nan if v is None else v for v in pair]
                for pair in zip(len_vals, char_vals, strict=True)
            ],
            dtype=np.float64,
        )
        rewards = np.nansum(m * np.asarray(weights)[None, :], axis=1)
        ok = ~np.isnan(m).all(axis=1)
        a = np.zeros(len(m))
        for g in range(len(m) // N):
            rows = [i for i in range(g * N, (g + 1) * N) if ok[i]]
            if rows:
                a[rows] = ref(rewards[rows], ids[g * N])
        out.append(torch.tensor(a, dtype=torch.float32))
    return out


ROWS = [
    {"prompt": "abc", "tag": "full", "pid": "p-abc"},
    {"prompt": "hex", "tag": "partial", "pid": "p-hex"},
    {"prompt": "gaze", "tag": "mixed", "pid": "p-gaze"},
    {"prompt": "bad", "tag": "full", "pid": "p-bad"},
    {"prompt": "fade", "tag": "mixed", "pid": "p-fade"},
    {"prompt": "cab", "tag": "full", "pid": "p-cab"},
]


def _winrate_calibration():
    from bestk.kappo import calibrate

    rng = np.random.default_rng(7)
    bank = {r["pid"]: (rng.integers(0, 9, 30) / 4).tolist() for r in ROWS}
    return calibrate(bank, k=4, beta=0.1, kind="winrate")


def _kappo_ref(cal):
    def ref(values, pid):
        values = np.asarray(values)
        return bestk.advantages("kappo_grpo", values, group=[pid] * len(values), calibration=cal)

    return ref


def _config(tmp_path, weights, **overrides):
    return grpo_config(
        tmp_path, per_device_train_batch_size=3 * N, num_generations=N, reward_weights=weights,
        **overrides,
    )


@pytest.mark.parametrize("estimator", ["argmaxrl", "kappo_grpo"])
def test_two_step_run_trains_on_bestk_advantages(tmp_path, estimator):
    from datasets import Dataset

    model, tok = tiny_policy()
    rec = Recorder()
    weights = [1.0, 0.5]
    args = _config(tmp_path, weights)
    if estimator == "kappo_grpo":
        cal = _winrate_calibration()
        path = cal.save(tmp_path / "cal.json")
        extra = {"estimator_options": {"calibration": str(path)}, "prompt_id_column": "pid"}
        ref = _kappo_ref(cal)
    else:
        extra = {}
        ref = lambda r, _pid: argmaxrl_ref(r, "loo")  # noqa: E731
    pids: list[list] = []

    class PidProbe(Probe):
        def _generate_and_score_completions(self, inputs):
            pids.append([x["pid"] for x in inputs])
            return super()._generate_and_score_completions(inputs)

    trainer = PidProbe(
        model=model,
        reward_funcs=[rec.reward_len, rec.reward_char],
        args=args,
        train_dataset=Dataset.from_list(ROWS),
        processing_class=tok,
        estimator=estimator,
        **extra,
    )
    trainer.train()

    assert len(rec.calls) == 2 and len(trainer.generated) == 2
    want = expected_from_calls(rec.calls, weights, ref, pids)
    for got, exp in zip(trainer.generated, want, strict=True):
        torch.testing.assert_close(got, exp, atol=1e-6, rtol=1e-6)
    # The loss saw exactly these advantages (TRL shuffles rows within the generation batch).
    for seen, gen in zip(trainer.trained, trainer.generated, strict=True):
        torch.testing.assert_close(seen.sort().values, gen.sort().values)
    # Unscorable completions (every reward function returned None) carry advantage 0, and
    # something was unscorable, so the ragged path ran.
    assert any(all(v is None for v in pair) for c in rec.calls for pair in zip(*c, strict=True))
    # TRL's completion log shows the advantages actually used, not TRL's own.
    logged = list(trainer._logs["advantages"])[-len(want[-1]) :]
    np.testing.assert_allclose(logged, want[-1].numpy(), atol=1e-6)
    # Not TRL's default: GRPO standardisation of the same rewards gives other numbers.
    r = trainer.last_rewards.numpy()
    ok = ~np.isnan(r)
    grpo = (r - np.nanmean(r.reshape(-1, N), 1).repeat(N)) / (
        np.nanstd(r.reshape(-1, N), 1, ddof=1).repeat(N) + 1e-4
    )
    assert not np.allclose(np.nan_to_num(grpo)[ok], want[-1].numpy()[ok], atol=1e-3)
    assert all(
        math.isfinite(v)
        for h in trainer.state.log_history
        for v in h.values()
        if isinstance(v, float)
    )


def test_bestk_advantages_matches_estimator_and_handles_none():
    rng = np.random.default_rng(0)
    m = torch.tensor(rng.integers(0, 5, (12, 3)) / 4.0, dtype=torch.float32)
    w = torch.tensor([1.0, 0.5, 2.0])
    a = bestk_advantages(m, w, 4, "softmax_grpo", {"tau": 0.5})
    rewards = (m.double() * w.double()).sum(1).numpy()
    ref = per_group(lambda r: softmax_ref(r, 0.5), rewards, list(np.arange(12) // 4))
    np.testing.assert_allclose(a.numpy(), ref, atol=1e-6)
    assert a.dtype == torch.float32
    # A None from one function counts 0 (nansum); all None: left out of the group, A = 0.
    m2 = m.clone()
    m2[1, 0] = torch.nan
    m2[5, :] = torch.nan
    a2 = bestk_advantages(m2, w, 4, "argmaxrl")
    r2 = (torch.nan_to_num(m2).double() * w.double()).sum(1).numpy()
    keep = np.ones(12, bool)
    keep[5] = False
    ref2 = np.zeros(12)
    ref2[keep] = per_group(argmaxrl_ref, r2[keep], list((np.arange(12) // 4)[keep]))
    np.testing.assert_allclose(a2.numpy(), ref2, atol=1e-6)
    assert a2[5] == 0
    # Whole batch unscorable: zeros, no error.
    assert not bestk_advantages(torch.full((8, 2), torch.nan), w[:2], 4, "argmaxrl").any()


def test_bestk_advantages_bad_input():
    m = torch.zeros(8, 2)
    w = torch.ones(2)
    with pytest.raises(ValueError, match="whole groups"):
        bestk_advantages(m, w, 3, "argmaxrl")
    with pytest.raises(ValueError, match="one weight per reward"):
        bestk_advantages(m, torch.ones(3), 4, "argmaxrl")
    with pytest.raises(ValueError, match=r"\(B, n_funcs\)"):
        bestk_advantages(m[:, 0], w, 4, "argmaxrl")
    with pytest.raises(ValueError, match="unknown estimator 'nope'"):
        bestk_advantages(m, w, 4, "nope")
    with pytest.raises(ValueError, match="tau"):
        bestk_advantages(m, w, 4, "softmax_grpo", {"tau": -1.0})
    bad = m.clone()
    bad[0, 0] = torch.inf
    with pytest.raises(ValueError, match="finite"):
        bestk_advantages(bad, w, 4, "argmaxrl")


def test_constructor_rejects_bad_estimator_before_building_anything():
    with pytest.raises(ValueError, match="unknown estimator 'argmax'"):
        BestkGRPOTrainer(estimator="argmax")
    with pytest.raises(ValueError, match="unknown option.*'tau'.*argmaxrl"):
        BestkGRPOTrainer(estimator="argmaxrl", estimator_options={"tau": 0.1})
    with pytest.raises(ValueError, match="requires option.*k"):
        BestkGRPOTrainer(estimator="pkpo")
    with pytest.raises(ValueError, match="mapping"):
        BestkGRPOTrainer(estimator="pkpo", estimator_options=[("k", 2)])


@pytest.mark.parametrize("with_ids", [False, True])
def test_each_process_gets_its_slice_of_the_gathered_advantages(monkeypatch, with_ids):
    """Process 1 of 2: advantages computed on all 16 gathered rows, rows 8..15 returned.

    With prompt ids, groups 0 and 2 carry the same id (one prompt drawn twice): they pool.
    """
    import accelerate.utils
    from trl import GRPOTrainer

    rng = np.random.default_rng(1)
    gathered = torch.tensor(rng.integers(0, 4, (16, 1)) / 3.0, dtype=torch.float32)
    ids = np.repeat(["x", "y", "x", "z"], N).tolist()

    def fake_generate(self, inputs):
        self._calculate_rewards(inputs, None, None, None)
        self._logs["advantages"].extend([99.0] * 16)  # what TRL would log
        return {"advantages": torch.full((len(inputs),), 7.0)}

    monkeypatch.setattr(GRPOTrainer, "_calculate_rewards", lambda self, *a: gathered)
    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", fake_generate)
    monkeypatch.setattr(accelerate.utils, "gather_object", lambda local: ids)
    t = object.__new__(BestkGRPOTrainer)
    t.estimator, t.estimator_options = "argmaxrl", {}
    t.prompt_id_column = "pid" if with_ids else None
    t.model = types.SimpleNamespace(training=True)
    t.num_generations, t.num_generations_eval = N, N
    t.reward_weights = torch.ones(1)
    t.batch_std_eps = None
    t.accelerator = types.SimpleNamespace(process_index=1)
    from collections import deque

    t._logs = {"advantages": deque([5.0, 6.0], maxlen=20)}
    out = t._generate_and_score_completions([{"pid": p} for p in ids[8:]])
    r = gathered[:, 0].double().numpy()
    labels = ids if with_ids else list(np.arange(16) // N)
    full = torch.tensor(per_group(argmaxrl_ref, r, labels), dtype=torch.float32)
    torch.testing.assert_close(out["advantages"], full[8:])
    np.testing.assert_allclose(list(t._logs["advantages"]), [5.0, 6.0] + full.tolist(), atol=1e-6)
    if with_ids:  # pooling really happened: differs from per-block groups
        blocks = per_group(argmaxrl_ref, r, list(np.arange(16) // N))
        assert not np.allclose(blocks, full.numpy(), atol=1e-4)
        with pytest.raises(ValueError, match="missing from dataset row 0"):
            t._generate_and_score_completions([{}] * 8)


def test_prompt_ids_checks():
    m = torch.ones(8, 1)
    w = torch.ones(1)
    with pytest.raises(ValueError, match="differs from 'a'"):
        bestk_advantages(m, w, 4, "argmaxrl", prompt_ids=list("aaabbbbb"))
    with pytest.raises(ValueError, match="prompt_ids has 4 labels"):
        bestk_advantages(m, w, 4, "argmaxrl", prompt_ids=list("aaaa"))
    with pytest.raises(ValueError, match="kappo_grpo needs prompt_id_column"):
        BestkGRPOTrainer(estimator="kappo_grpo", estimator_options={"calibration": "x.json"})
    with pytest.raises(ValueError, match="cannot be read"):
        BestkGRPOTrainer(
            estimator="kappo_grpo",
            estimator_options={"calibration": "/nonexistent/cal.json"},
            prompt_id_column="pid",
        )


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_grpo_estimator_reproduces_trls_own_advantages(tmp_path, scale_rewards):
    """Cross-check of the plumbing against TRL itself: bestk's ``grpo`` must give TRL's own
    advantages for each ``scale_rewards`` (TRL's epsilon 1e-4 by default), None handling and
    weights included, on the same seeded run (identical completions, so identical updates)."""
    from datasets import Dataset
    from trl import GRPOTrainer

    runs = {}
    for kind in ("trl", "bestk"):
        rec = Recorder()
        captured = []
        base = GRPOTrainer if kind == "trl" else BestkGRPOTrainer
        extra = {} if kind == "trl" else {"estimator": "grpo"}

        class Capture(base):
            sink = captured

            def _generate_and_score_completions(self, inputs):
                out = super()._generate_and_score_completions(inputs)
                self.sink.append(out["advantages"].detach().cpu().clone())
                return out

        model, tok = tiny_policy()
        Capture(
            model=model,
            reward_funcs=[rec.reward_len, rec.reward_char],
            args=_config(tmp_path / kind, [1.0, 0.5], scale_rewards=scale_rewards),
            train_dataset=Dataset.from_list(ROWS),
            processing_class=tok,
            **extra,
        ).train()
        runs[kind] = (rec.calls, captured)
    assert runs["trl"][0] == runs["bestk"][0]  # same completions were scored
    for ours, theirs in zip(runs["bestk"][1], runs["trl"][1], strict=True):
        torch.testing.assert_close(ours, theirs, atol=2e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# GRPOConfig options that change advantages: honoured or refused up front


def test_scale_rewards_batch_gives_trls_numbers():
    """TRL 1.16 with scale_rewards='batch' on rewards [150, 170, 140 | 16, 18, 18]: centred per
    group, divided by the std of all six (+1e-4)."""
    from trl import GRPOConfig

    from bestk.integrations.trl import check_trl_args

    args = GRPOConfig(output_dir="unused", scale_rewards="batch", use_cpu=True, report_to="none")
    opts, eps = check_trl_args(args, "grpo", {})
    assert opts == {"scale": "none"} and eps == 1e-4
    r = torch.tensor([[150.0], [170.0], [140.0], [16.0], [18.0], [18.0]])
    got = bestk_advantages(r, torch.ones(1), 3, "grpo", opts, batch_std_eps=eps)
    np.testing.assert_allclose(
        got.numpy(), [-0.044, 0.222, -0.178, -0.018, 0.009, 0.009], atol=1e-3  # 3 decimals
    )
    x = r[:, 0].double().numpy()
    ref = (x - np.repeat(x.reshape(2, 3).mean(1), 3)) / (np.std(x, ddof=1) + 1e-4)
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-5)
    # An unscorable row is out of the batch std and gets 0; < 2 scorable rows: all 0.
    r2 = r.clone()
    r2[1] = torch.nan
    got2 = bestk_advantages(r2, torch.ones(1), 3, "grpo", opts, batch_std_eps=eps)
    keep = np.array([0, 2, 3, 4, 5])
    centred = np.array([150 - 145, 140 - 145, 16 - 52 / 3, 18 - 52 / 3, 18 - 52 / 3])
    np.testing.assert_allclose(got2.numpy()[keep], centred / (np.std(x[keep], ddof=1) + 1e-4),
                               rtol=1e-5)
    assert got2[1] == 0
    lone = torch.full((3, 1), torch.nan)
    lone[0] = 1.0
    assert not bestk_advantages(lone, torch.ones(1), 3, "grpo", opts, batch_std_eps=eps).any()


def test_check_trl_args_honours_or_refuses():
    from trl import GRPOConfig

    from bestk.integrations.trl import check_trl_args

    def cfg(**kw):
        return GRPOConfig(output_dir="unused", use_cpu=True, report_to="none", **kw)

    assert check_trl_args(None, "grpo", {}) == ({"scale": "std", "eps": 1e-4}, None)
    assert check_trl_args(cfg(scale_rewards="none"), "grpo", {}) == (
        {"scale": "none", "eps": 1e-4}, None)
    assert check_trl_args(cfg(scale_rewards=False), "grpo", {"eps": 0.0})[0]["eps"] == 0.0
    assert check_trl_args(cfg(), "argmaxrl", {}) == ({}, None)
    assert check_trl_args(cfg(scale_rewards="none"), "rloo", {}) == ({}, None)
    with pytest.raises(ValueError, match="applies only to estimator='grpo'"):
        check_trl_args(cfg(scale_rewards="batch"), "argmaxrl", {})
    with pytest.raises(ValueError, match="scale='none' contradicts.*'group'"):
        check_trl_args(cfg(), "grpo", {"scale": "none"})
    with pytest.raises(ValueError, match="sum_then_normalize"):
        check_trl_args(cfg(multi_objective_aggregation="normalize_then_sum"), "grpo", {})


def test_every_registered_estimator_takes_trls_advantage_path():
    """Every estimator of the registry (with its default options; the calibrated one has its
    own tests) goes through TRL's argument check and TRL's gathered reward matrix by its
    registry properties alone: 0/1 rewards for a binary one."""
    from bestk.integrations.trl import check_trl_args

    rng = np.random.default_rng(0)
    assert {"passk_training", "loo_max"} <= set(bestk.ESTIMATORS)
    for name in bestk.ESTIMATORS:
        info = bestk.estimator_info(name)
        if info.calibrated:
            continue
        opts, _ = check_trl_args(None, name, dict(info.default_options))
        binary = info.binary_rewards()
        m = torch.tensor(rng.integers(0, 2 if binary else 5, (16, 1)), dtype=torch.float32)
        got = bestk_advantages(m, torch.ones(1), 8, name, opts)
        want = bestk.advantages(name, m[:, 0].double().view(2, 8), **opts).reshape(-1)
        torch.testing.assert_close(got, want.float(), msg=name)


def test_loo_max_follows_scale_rewards_and_passk_training_its_formula():
    """loo_max has GRPO's scale and eps options, so TRL's scale_rewards maps onto it as onto
    grpo: "group" (TRL's default) is the std-scaled form with TRL's epsilon 1e-4, "none" the
    paper's unbiased leave-one-out max, "batch" that divided by the batch std."""
    from trl import GRPOConfig

    from bestk.integrations.trl import check_trl_args

    def cfg(**kw):
        return GRPOConfig(output_dir="unused", use_cpu=True, report_to="none", **kw)

    r = torch.tensor([[0.5], [2.0], [1.0], [2.0], [3.0], [1.0], [0.0], [1.5]])
    x = r[:, 0].double().numpy()
    groups = list(np.arange(8) // 4)
    opts, eps = check_trl_args(cfg(), "loo_max", {})
    assert opts == {"scale": "std", "eps": 1e-4} and eps is None
    np.testing.assert_allclose(bestk_advantages(r, torch.ones(1), 4, "loo_max", opts).numpy(),
                               per_group(lambda g: loo_max_ref(g, "std", 1e-4), x, groups),
                               rtol=1e-6)
    opts, eps = check_trl_args(cfg(scale_rewards="none"), "loo_max", {})
    got = bestk_advantages(r, torch.ones(1), 4, "loo_max", opts)
    np.testing.assert_allclose(got.numpy(), per_group(loo_max_ref, x, groups), rtol=1e-6)
    assert got.tolist() == [0, 0, 0, 0, 1.5, 0, 0, 0]  # group 0 ties at the top
    opts, eps = check_trl_args(cfg(scale_rewards="batch"), "loo_max", {})
    got = bestk_advantages(r, torch.ones(1), 4, "loo_max", opts, batch_std_eps=eps)
    np.testing.assert_allclose(got.numpy(), per_group(loo_max_ref, x, groups)
                               / (np.std(x, ddof=1) + 1e-4), rtol=1e-6)
    b = torch.tensor([[1.0], [0.0], [0.0], [0.0], [0.0], [1.0], [1.0], [0.0]])
    assert check_trl_args(cfg(), "passk_training", {"k": 2}) == ({"k": 2}, None)
    got = bestk_advantages(b, torch.ones(1), 4, "passk_training", {"k": 2})
    want = per_group(lambda g: passk_training_ref(g, 2), b[:, 0].double().numpy(), groups)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


@pytest.mark.parametrize(
    ("overrides", "estimator", "match"),
    [
        ({"multi_objective_aggregation": "normalize_then_sum"}, "argmaxrl", "sum_then_normalize"),
        ({"scale_rewards": "batch"}, "softmax_grpo", "applies only to estimator='grpo'"),
    ],
)
def test_refusals_come_before_any_model_is_loaded(tmp_path, overrides, estimator, match):
    """The model is a path that does not exist: a ValueError about the option (not a loading
    error) proves the check runs before TRL loads anything."""
    opts = {"tau": 0.1} if estimator == "softmax_grpo" else {}
    args = _config(tmp_path, None, **overrides)
    with pytest.raises(ValueError, match=match):
        BestkGRPOTrainer(
            model=str(tmp_path / "no-such-model"), reward_funcs=[lambda **_: [0.0]], args=args,
            estimator=estimator, estimator_options=opts,
        )
    with pytest.raises(ValueError, match=match):  # args passed positionally, as TRL allows
        BestkGRPOTrainer(
            str(tmp_path / "no-such-model"), [lambda **_: [0.0]], args,
            estimator=estimator, estimator_options=opts,
        )


# ---------------------------------------------------------------------------------------------
# KappoReward: reward-side KAPPO for TRL's own GRPOTrainer


KAPPO_BANK = {"p-abc": 2, "p-hex": 9, "p-gaze": 15, "p-bad": 24, "p-fade": 28, "p-cab": 5}


def has_a(completions, tag, **_):
    """Binary: 1 if the completion contains an 'a'; None for the 'partial' prompt."""
    return [None if t == "partial" else float("a" in c) for c, t in zip(completions, tag,
                                                                         strict=True)]


def test_kappo_reward_in_stock_trl_grpo(tmp_path):
    """Stock ``trl.GRPOTrainer`` with scale_rewards='none' and ``KappoReward``: TRL's own
    advantages are a_k(x)·(R - group mean) with a_k solved independently (brentq, Eq. 6);
    None passes through (TRL leaves the completion out, advantage 0)."""
    from datasets import Dataset
    from trl import GRPOTrainer

    from bestk.integrations.trl import KappoReward
    from bestk.kappo import calibrate
    from tests._kappo_ref import a_k_ref

    bank = {p: [1] * n + [0] * (30 - n) for p, n in KAPPO_BANK.items()}
    cal = calibrate(bank, k=4, beta=0.1)
    reward = KappoReward(has_a, cal.save(tmp_path / "cal.json"), prompt_id_column="pid")
    assert reward.__name__ == "kappo_has_a"
    captured, seen = [], []

    class Capture(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            seen.append([x["pid"] for x in inputs])
            out = super()._generate_and_score_completions(inputs)
            captured.append((out["advantages"].detach().cpu().clone(),
                             [list(v) for v in self._logs["completion"]][-len(inputs):]))
            return out

    model, tok = tiny_policy()
    trainer = Capture(
        model=model, reward_funcs=[reward], args=_config(tmp_path, None, scale_rewards="none"),
        train_dataset=Dataset.from_list(ROWS), processing_class=tok,
    )
    trainer.train()
    assert len(captured) == 2
    logged = [h for h in trainer.state.log_history if "rewards/kappo_has_a/mean" in h]
    assert logged and all("rewards/kappo_has_a/raw_mean" in h for h in logged)  # raw next to it
    for (adv, completions), pids in zip(captured, seen, strict=True):
        tags = {r["pid"]: r["tag"] for r in ROWS}
        want = np.zeros(len(pids))
        for g in range(len(pids) // N):
            rows = slice(g * N, (g + 1) * N)
            pid = pids[g * N]
            if tags[pid] == "partial":
                continue  # every completion unscorable: advantage 0
            r = np.array([float("a" in "".join(c)) for c in completions[rows]])
            want[rows] = a_k_ref(KAPPO_BANK[pid] / 30, 4, 0.1) * (r - r.mean())
        np.testing.assert_allclose(adv.numpy(), want, atol=1e-6)
    assert any(a.abs().sum() > 0 for a, _ in captured)  # something was learned from


def test_kappo_reward_checks():
    from bestk.integrations.trl import KappoReward
    from bestk.kappo import calibrate

    cal = calibrate({"x": [1, 0, 0, 0], "y": [1, 1, 1, 0]}, k=2, beta=0.5)
    f = KappoReward(lambda completions, **_: [1.0, None, 0.0], cal, prompt_id_column="pid")
    logged: list[tuple[str, float]] = []
    out = f(prompts=["a"] * 3, completions=["", "", ""], pid=["x", "y", "y"],
            log_metric=lambda name, value: logged.append((name, value)))
    assert out[1] is None and out[2] == 0.0
    assert out[0] == pytest.approx(cal.get("a_k", ["x"])[0])
    assert logged == [("rewards/kappo_<lambda>/raw_mean", 0.5)]  # mean of the raw 1.0 and 0.0
    assert f(prompts=["a"] * 3, completions=["", "", ""], pid=["x", "y", "y"]) == out  # no logger
    with pytest.raises(ValueError, match="no column 'pid'"):
        f(prompts=["a"] * 3, completions=["", "", ""], other=[1, 2, 3])
    with pytest.raises(ValueError, match="'z' is not in the calibration"):
        f(prompts=["a"] * 3, completions=["", "", ""], pid=["x", "z", "z"])
    with pytest.raises(ValueError, match="returned 3 rewards for 2"):
        f(prompts=["a"] * 2, completions=["", ""], pid=["x", "y"])
    with pytest.raises(ValueError, match="reward function"):
        KappoReward("not-callable", cal)

    async def coro(**_):
        return []

    with pytest.raises(ValueError, match="async"):
        KappoReward(coro, cal)
    with pytest.raises(ValueError, match="0/1"):
        KappoReward(lambda **_: [0.5], cal, "pid")(completions=[""], pid=["x"])


def test_kappo_reward_reads_bfloat16_and_refuses_text():
    """The wrapped reward's values are numbers as a task's reward's are: bfloat16 tensors (a
    ``TypeError`` from ``.numpy()`` before) are read through float64, text (``"1"``, parsed
    before) is refused naming the function and the type, and a ``sys.exit()`` in it is
    a one-line error."""
    import sys

    from bestk.integrations.trl import KappoReward
    from bestk.kappo import calibrate

    cal = calibrate({"x": [1, 0, 0, 0], "y": [1, 1, 1, 0]}, k=2, beta=0.5)

    def bf16(completions, **_):
        return [torch.tensor(1.0, dtype=torch.bfloat16), None]

    def floats(completions, **_):
        return [1.0, None]

    def text(completions, **_):
        return ["1", None]

    def leave(completions, **_):
        sys.exit(0)

    batch = {"prompts": ["a"] * 2, "completions": ["", ""], "pid": ["x", "y"]}
    assert KappoReward(bf16, cal, "pid")(**batch) == KappoReward(floats, cal, "pid")(**batch)
    with pytest.raises(ValueError, match="^reward function 'text' returned '1' for completion "
                       "0: a str, not a number"):
        KappoReward(text, cal, "pid")(**batch)
    with pytest.raises(ValueError, match="^reward function 'leave' raised SystemExit\\(0\\)$"):
        KappoReward(leave, cal, "pid")(**batch)


# ---------------------------------------------------------------------------------------------
# Real multi-process training


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_real_processes_train_on_their_slice_of_gathered_advantages(tmp_path):
    """2 ranks x 6 completions per step, groups of 4: one group is split across the ranks, so
    only advantages computed on the gathered rewards can be right on both."""
    import json
    import os
    import subprocess
    import sys

    root = str(ROOT)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(root, "src"), root, env.get("PYTHONPATH", "")]
    )
    env.update(OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
        "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
        os.path.join(root, "tests", "_trl_two_ranks.py"), str(tmp_path),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=root)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r, rec in enumerate(ranks):
        assert rec["world_size"] == 2 and rec["torch_world_size"] == 2
        assert rec["process_index"] == r and rec["distributed_type"].endswith("MULTI_CPU")
    n_local = 6
    split_seen = False
    for step in range(2):
        s0, s1 = ranks[0]["steps"][step], ranks[1]["steps"][step]
        # The rewards really were gathered across the two processes, in rank order.
        gathered = np.array(s0["gathered_rewards"])
        np.testing.assert_allclose(gathered, s0["local_rewards"] + s1["local_rewards"], atol=1e-6)
        np.testing.assert_allclose(s1["gathered_rewards"], gathered)
        pids = s0["pids"] + s1["pids"]
        split_seen |= s0["pids"][-1] == s1["pids"][0]
        want = per_group(argmaxrl_ref, gathered, pids)  # bestk's ArgMaxRL, naive reference
        for r, rec in enumerate((s0, s1)):
            np.testing.assert_allclose(rec["gathered_advantages"], want, atol=1e-6)
            mine = want[r * n_local : (r + 1) * n_local]
            np.testing.assert_allclose(rec["local_advantages"], mine, atol=1e-6)
            trained = ranks[r]["trained"][step]  # what TRL's loss received on this rank
            np.testing.assert_allclose(sorted(trained), sorted(mine), atol=1e-6)
    assert split_seen  # a group straddled the ranks


# ---------------------------------------------------------------------------------------------
# BestkDPOTrainer: @k-DPO with a per-prompt beta_eff

PREFS = [
    {"prompt": p, "chosen": c, "rejected": r, "pid": f"p-{p}"}
    for p, c, r in [
        ("abc", "aab", "xyz"), ("hex", "ha", "zz"), ("gaze", "gag", "y"), ("bad", "dab", "xx"),
        ("fade", "fa", "hhh"), ("cab", "acab", "z"), ("hag", "ah", "yyy"), ("egg", "gee", "x"),
    ]
]
DPO_BANK = {"p-abc": 0, "p-hex": 3, "p-gaze": 9, "p-bad": 15, "p-fade": 22, "p-cab": 27,
            "p-hag": 29, "p-egg": 30}  # successes of M = 30 (both boundaries included)


def _dpo_config(tmp_path, beta=0.1, **overrides):
    from trl import DPOConfig

    kwargs = dict(
        output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=2,
        learning_rate=1e-2, beta=beta, logging_steps=1, save_strategy="no", report_to="none",
        use_cpu=True, bf16=False, seed=0, disable_tqdm=True, dataloader_num_workers=0,
    )
    kwargs.update(overrides)
    return DPOConfig(**kwargs)


def _dpo_run(tmp_path, k=None, trainer_cls=None):
    """A 2-step DPO run; returns (per-step losses, per-step independent losses or None)."""
    import copy

    from datasets import Dataset
    from trl import DPOTrainer

    from bestk.integrations.trl import BestkDPOTrainer
    from bestk.kappo import calibrate

    model, tok = tiny_policy(seed=1)
    ref = copy.deepcopy(model)
    losses, independent = [], []
    extra = {}
    base = DPOTrainer
    if k is not None:
        bank = {p: [1] * n + [0] * (30 - n) for p, n in DPO_BANK.items()}
        extra = {"calibration": calibrate(bank, k=k, beta=0.1), "prompt_id_column": "pid"}
        base = BestkDPOTrainer
    pid_of = {r["prompt"]: r["pid"] for r in PREFS}

    class Probe(base):
        def compute_loss(self, model, inputs, *a, **kw):
            if k is not None:
                independent.append(_independent_dpo_loss(model, ref, inputs, tok, pid_of, k))
            loss = super().compute_loss(model, inputs, *a, **kw)
            losses.append(loss.detach().clone())
            return loss

    Probe(
        model=model, ref_model=ref, args=_dpo_config(tmp_path), train_dataset=Dataset.from_list(
            PREFS), processing_class=tok, **extra,
    ).train()
    return losses, independent


def _beta_eff_ref(n_success, k, beta=0.1, m=30):
    """Eq. 149: min(beta / (k (1 - p*)^(k-1)), 2) with p* from brentq at q = N / (M + 0.5)."""
    from tests._kappo_ref import a_k_ref

    q = n_success / (m + 0.5)
    return min(beta / a_k_ref(q, k, beta), 2.0) if q > 0 else beta / k


def _independent_dpo_loss(model, ref, inputs, tok, pid_of, k):
    """-mean log sigmoid(beta_eff (Δ_w - Δ_l)) from plain forward passes (log_softmax of the
    logits, summed over completion tokens) and beta_eff solved here (brentq)."""
    ids, att, comp = inputs["input_ids"], inputs["attention_mask"], inputs["completion_mask"]

    def seq_logps(m):
        with torch.no_grad():
            logits = m(input_ids=ids, attention_mask=att).logits[:, :-1].double()
        lp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]
        return (lp * comp[:, 1:]).sum(-1)

    delta = seq_logps(model) - seq_logps(ref)
    dw, dl = delta.chunk(2)
    half = ids.shape[0] // 2
    prompts = [tok.decode(ids[i][comp[i] == 0][att[i][comp[i] == 0] == 1]) for i in range(half)]
    beta = torch.tensor([_beta_eff_ref(DPO_BANK[pid_of[p]], k) for p in prompts],
                        dtype=torch.float64)
    return float(-torch.nn.functional.logsigmoid(beta * (dw - dl)).mean())


def test_dpo_k1_reproduces_trls_dpo_step_by_step(tmp_path):
    """k = 1: beta_eff = beta for every prompt, so BestkDPOTrainer is TRL's DPO bit for bit."""
    stock, _ = _dpo_run(tmp_path / "trl")
    ours, _ = _dpo_run(tmp_path / "bestk", k=1)
    assert len(stock) == len(ours) == 2
    for a, b in zip(stock, ours, strict=True):
        assert torch.equal(a, b), (a, b)
    assert not torch.equal(stock[0], stock[1])  # the first step changed the policy


def test_dpo_k4_loss_is_eq13_with_per_prompt_beta_eff(tmp_path):
    losses, independent = _dpo_run(tmp_path, k=4)
    assert len(losses) == 2
    np.testing.assert_allclose([float(x) for x in losses], independent, rtol=1e-5, atol=1e-6)
    stock, _ = _dpo_run(tmp_path / "trl")
    # Step 1 starts at the reference (loss log 2 whatever beta); at step 2 beta_eff matters.
    assert float(losses[0]) == pytest.approx(math.log(2))
    assert abs(float(stock[1]) - float(losses[1])) > 1e-3


def test_dpo_refusals_before_any_model_is_loaded(tmp_path):
    from datasets import Dataset

    from bestk.integrations.trl import BestkDPOTrainer
    from bestk.kappo import calibrate

    cal = calibrate({r["pid"]: [1, 0, 0] for r in PREFS}, k=2, beta=0.1)
    ds = Dataset.from_list(PREFS)
    nowhere = str(tmp_path / "no-such-model")

    def build(args=None, calibration=cal, dataset=ds, **kw):
        return BestkDPOTrainer(nowhere, args=args or _dpo_config(tmp_path), train_dataset=dataset,
                               calibration=calibration, prompt_id_column="pid", **kw)

    with pytest.raises(ValueError, match="binary calibration"):
        build(calibration=calibrate({"a": [0.1, 0.5]}, k=2, beta=0.1, kind="winrate"))
    with pytest.raises(ValueError, match="beta=0.2 differs from the calibration's beta=0.1"):
        build(args=_dpo_config(tmp_path, beta=0.2))
    with pytest.raises(ValueError, match="loss_type must be"):
        build(args=_dpo_config(tmp_path, loss_type=["ipo"]))
    with pytest.raises(ValueError, match="reverse_kl"):
        build(args=_dpo_config(tmp_path, f_divergence_type="js_divergence"))
    with pytest.raises(ValueError, match="sync_ref_model"):
        build(args=_dpo_config(tmp_path, sync_ref_model=True))
    with pytest.raises(ValueError, match="no column 'pid'"):
        build(dataset=ds.remove_columns("pid"))
    with pytest.raises(ValueError, match="'p-new' is not in the calibration"):
        build(eval_dataset={"x": Dataset.from_list([{**PREFS[0], "pid": "p-new"}])})
    with pytest.raises(ValueError, match="cannot be read"):
        build(calibration=str(tmp_path / "missing.json"))


@pytest.mark.parametrize("mode", ["grpo", "dpo"])
def test_example_kappo_recipe_runs(tmp_path, mode, capsys):
    """examples/trl/kappo.py: bank -> calibration.json -> 1 TRL step, in this process."""
    import importlib.util
    import os

    from bestk.kappo import Calibration

    path = os.path.join(ROOT, "examples", "trl", "kappo.py")
    spec = importlib.util.spec_from_file_location("trl_kappo_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.main([mode, "--prompts", "8", "--bank-size", "8", "--num-generations", "4",
                  "--max-steps", "1", "--out", str(tmp_path)])
    cal = Calibration.load(tmp_path / "calibration.json")
    assert cal.k == 4 and cal.M == 8 and cal.num_prompts == 8
    assert f"{mode}: loss per logging window" in capsys.readouterr().out


def test_dpo_precomputed_reference_and_evaluation(tmp_path):
    """precompute_ref_log_probs (TRL's reference pass through the wrapped collator) and
    evaluate() (beta_eff on the eval batches) work and agree with the on-the-fly reference."""
    import copy

    from datasets import Dataset

    from bestk.integrations.trl import BestkDPOTrainer
    from bestk.kappo import calibrate

    model, tok = tiny_policy(seed=1)
    cal = calibrate({p: [1] * n + [0] * (30 - n) for p, n in DPO_BANK.items()}, k=4, beta=0.1)
    evals = {}
    for pre in (False, True):
        trainer = BestkDPOTrainer(
            model=copy.deepcopy(model), ref_model=copy.deepcopy(model),
            args=_dpo_config(tmp_path / str(pre), precompute_ref_log_probs=pre),
            train_dataset=Dataset.from_list(PREFS), eval_dataset=Dataset.from_list(PREFS[:4]),
            processing_class=tok, calibration=cal, prompt_id_column="pid",
        )
        trainer.train()
        evals[pre] = trainer.evaluate()["eval_loss"]
    assert math.isfinite(evals[True]) and evals[True] == pytest.approx(evals[False], rel=1e-5)
