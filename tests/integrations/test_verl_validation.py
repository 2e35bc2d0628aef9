"""Unbiased validation metrics for verl (``bestk.integrations.verl_validation``).

* exactness: on every 0/1 and every {0, 1/2, 1} outcome vector of n <= 6 samples, and on every
  partition of n <= 6 samples into answers (the majority votes, with 0/1 and graded scores),
  each metric equals its brute-force value: the mean (and standard deviation) over the
  ``k``-subsets of ``max`` / ``min``, and over the ordered ``k``-tuples of distinct samples of
  verl's own ``calc_maj_val`` (so the ties are verl's);
* unbiasedness: averaged over the outcomes of n Bernoulli(p) samples, bestk's best@k is the
  true pass@k ``1 - (1-p)^k``; verl's own ``process_validation_metrics`` is not (its bootstrap
  draws with replacement);
* verl's data: the same keys as verl's function on a batch with several data sources, ragged
  prompts, ``None`` values, missing ``pred``s, a string variable and ``expected_acc_counts``;
  verl's own trainer method files the names; ``use_unbiased_validation`` swaps the function in
  verl's trainer modules and back; the environment variable does it through the plugin;
* bad input is a ``ValueError`` naming the problem.
"""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("verl")  # the `verl` extra; CI installs it

from verl.trainer.ppo import metric_utils  # noqa: E402

from bestk.integrations import verl as bverl  # noqa: E402
from bestk.integrations.verl_validation import (  # noqa: E402
    CI_SUFFIX,
    VALIDATION_ENV,
    maj_at_k,
    unbiased_validation_metrics,
    use_unbiased_validation,
    validation_from_env,
    validation_ks,
)

TOL = 1e-12


def brute_force(values, preds=None) -> dict[str, float]:
    """One prompt's metrics by enumeration: subsets for best / worst, ordered tuples of
    distinct samples through verl's ``calc_maj_val`` for the majority vote."""
    n = len(values)
    out = {f"mean@{n}": float(np.mean(values))}
    if n == 1:
        return out
    out[f"std@{n}"] = float(np.std(values))
    for k in validation_ks(n):
        subsets = list(itertools.combinations(range(n), k))
        best = np.array([max(values[i] for i in s) for s in subsets])
        worst = np.array([min(values[i] for i in s) for s in subsets])
        out |= {f"best@{k}/mean": best.mean(), f"best@{k}/std": best.std(),
                f"worst@{k}/mean": worst.mean(), f"worst@{k}/std": worst.std()}
        if preds is not None:
            maj = np.array([
                metric_utils.calc_maj_val([{"val": values[i], "pred": preds[i]} for i in t],
                                          vote_key="pred", val_key="val")
                for t in itertools.permutations(range(n), k)])
            out |= {f"maj@{k}/mean": maj.mean(), f"maj@{k}/std": maj.std()}
    return out


def one_prompt_per_source(cases):
    """verl's arguments with each case (a dict of per-sample lists) as its own data source."""
    ds, uid, infos = [], [], {}
    for c, case in enumerate(cases):
        n = len(next(iter(case.values())))
        ds += [f"case{c}"] * n
        uid += [f"uid{c}"] * n
        for name, vals in case.items():
            infos.setdefault(name, []).extend(vals)
    return ds, uid, infos


def assert_matches_brute_force(cases, got, variables):
    for c, case in enumerate(cases):
        for var in variables:
            ref = brute_force(case[var], case.get("pred"))
            mine = got[f"case{c}"][var]
            assert set(mine) == set(ref), (case, var)
            for name, value in ref.items():
                assert abs(mine[name] - value) <= TOL, (case, var, name, mine[name], value)


def test_best_and_worst_equal_enumeration_on_every_small_outcome_vector():
    cases = [{"acc": list(map(float, v))}
             for n in range(1, 7) for v in itertools.product((0, 1), repeat=n)]
    cases += [{"acc": list(v)} for n in range(1, 7)
              for v in itertools.product((0.0, 0.5, 1.0), repeat=n)]
    got = unbiased_validation_metrics(*one_prompt_per_source(cases))
    assert_matches_brute_force(cases, got, ["acc"])


def partitions(n):
    """Every partition of n samples into answers, as restricted growth strings."""
    def grow(prefix, top):
        if len(prefix) == n:
            yield prefix
            return
        for a in range(top + 2):
            yield from grow(prefix + [a], max(top, a))
    yield from grow([0], 0)


def test_majority_vote_equals_verls_rule_enumerated_over_every_answer_partition():
    rng = np.random.default_rng(0)
    cases = []
    for n in range(1, 7):
        for part in partitions(n):
            cases.append({
                "acc": [float(a == 0) for a in part],  # answer "a0" is the correct one
                "score": rng.integers(-2, 5, n).tolist(),  # graded, differs within an answer
                "pred": [f"a{a}" for a in part],
            })
    assert len(cases) == 1 + 2 + 5 + 15 + 52 + 203  # Bell numbers
    got = unbiased_validation_metrics(*one_prompt_per_source(cases))
    assert_matches_brute_force(cases, got, ["acc", "score"])


def test_maj_at_k_on_a_ragged_batch_equals_enumeration():
    """Groups of different sizes in one call, labels shuffled, answers of any hashable type."""
    rng = np.random.default_rng(1)
    sizes = [3, 7, 5, 8, 2]
    kinds = [(1, "x"), 2, 2.0, "2"]  # 2 and 2.0 are one answer, "2" another
    vals, answers, group = [], [], []
    for g, n in enumerate(sizes):
        vals += rng.integers(0, 3, n).tolist()
        answers += [kinds[i] for i in rng.integers(0, len(kinds), n)]
        group += [f"p{g}"] * n
    order = rng.permutation(len(vals))
    vals, answers, group = (np.asarray(vals, float)[order], [answers[i] for i in order],
                            [group[i] for i in order])
    for k in (1, 2):
        got = maj_at_k(vals, answers, k, group)
        for g in range(len(sizes)):
            idx = [i for i in range(len(vals)) if group[i] == f"p{g}"]
            ref = np.mean([
                metric_utils.calc_maj_val([{"val": vals[i], "pred": answers[i]} for i in t],
                                          vote_key="pred", val_key="val")
                for t in itertools.permutations(idx, k)])
            assert abs(got[g] - ref) <= TOL
    # one group, all answers distinct: the vote is a uniform pick, maj@k = mean
    assert abs(maj_at_k([0.0, 1.0, 5.0, 2.0], ["a", "b", "c", "d"], 3) - 2.0) <= TOL
    # hashable answers of mixed types compare as Python values (1 == 1.0, 1 != "1")
    assert abs(maj_at_k([1.0, 1.0, 0.0], [1, 1.0, "1"], 3) - 1.0) <= TOL


def test_maj_at_k_scales_to_many_answers_exactly():
    """n = 40 with 1 to 40 distinct answers: the exact value lies in [min, max] of the scores
    and, with all answers distinct, equals the mean (every sample equally likely to win)."""
    rng = np.random.default_rng(2)
    v = rng.random(40)
    assert abs(maj_at_k(v, list(range(40)), 17) - v.mean()) <= 1e-12
    for m in (1, 2, 5, 13):
        a = rng.integers(0, m, 40)
        for k in (2, 8, 40):
            x = maj_at_k(v, a, k)
            assert v.min() - 1e-12 <= x <= v.max() + 1e-12
    a = np.r_[np.zeros(21), np.arange(1, 20)]  # answer 0 has a strict majority of all 40
    assert abs(maj_at_k(v, a, 40) - v[:21].mean()) <= 1e-12


def with_replacement_best(values, k):
    """E[max of k draws with replacement from the values]: verl's bootstrap, exactly."""
    r = np.sort(values)
    n = len(r)
    cdf = (np.arange(1, n + 1) / n) ** k  # P(max <= r_(i))
    return float(np.sum(r * np.diff(np.r_[0.0, cdf])))


def test_verl_bootstrap_reads_low_where_bestk_is_exact():
    """1 correct of 4: verl's best@4 is about 0.684 (1 - (3/4)^4), bestk's is 1."""
    ds, uid = ["d"] * 4, ["u"] * 4
    infos = {"acc": [0.0, 1.0, 0.0, 0.0]}
    theirs = metric_utils.process_validation_metrics(ds, uid, infos)["d"]["acc"]
    ours = unbiased_validation_metrics(ds, uid, infos)["d"]["acc"]
    assert abs(ours["best@4/mean"] - 1.0) <= TOL and abs(ours["best@2/mean"] - 0.5) <= TOL
    assert abs(ours["worst@2/mean"]) <= TOL and abs(ours["worst@4/mean"]) <= TOL
    se = theirs["best@4/std"] / math.sqrt(1000)  # verl's 1000 bootstrap draws
    assert abs(theirs["best@4/mean"] - (1 - 0.75**4)) < 5 * se
    assert ours["best@4/mean"] - theirs["best@4/mean"] > 0.25


@pytest.mark.parametrize(("n", "k", "p", "doc_truth", "doc_verl", "run_verl"), [
    (4, 4, 0.25, 0.684, 0.537, True), (8, 8, 0.1, 0.570, 0.422, True),
    (16, 16, 0.05, 0.560, 0.409, False), (8, 4, 0.3, 0.760, 0.684, False),
    (6, 2, 0.5, 0.750, 0.708, False)])
def test_bestk_is_unbiased_for_pass_at_k_and_verl_is_not(n, k, p, doc_truth, doc_verl,
                                                         run_verl):
    """Average each estimator over the outcomes of n Bernoulli(p) samples (one vector per
    number of successes ``c``, weighted by ``C(n, c) p^c (1-p)^(n-c)``; the metrics do not
    depend on the order, which the exhaustive tests above cover): bestk's best@k is
    1 - (1-p)^k; verl's own function (where its bias is large next to its bootstrap noise) is
    below it, at the expectation of its bootstrap, ``E[1 - (1 - C/n)^k]`` over
    ``C ~ Binomial(n, p)`` (the figures of docs/integrations.md)."""
    truth = 1 - (1 - p) ** k
    verl_expected = sum(math.comb(n, c) * p**c * (1 - p) ** (n - c) * (1 - (1 - c / n) ** k)
                        for c in range(n + 1))
    assert (round(truth, 3), round(verl_expected, 3)) == (doc_truth, doc_verl)
    assert truth - verl_expected > 0.04
    vecs = [np.r_[np.ones(c), np.zeros(n - c)] for c in range(n + 1)]
    prob = np.array([math.comb(n, c) * p**c * (1 - p) ** (n - c) for c in range(n + 1)])
    cases = [{"acc": v.tolist()} for v in vecs]
    ds, uid, infos = one_prompt_per_source(cases)
    ours = unbiased_validation_metrics(ds, uid, infos)
    name = f"best@{k}/mean"
    mine = np.array([ours[f"case{c}"]["acc"][name] for c in range(len(cases))])
    assert abs(prob @ mine - truth) <= TOL
    exact_verl = prob @ np.array([with_replacement_best(v, k) for v in vecs])
    assert abs(exact_verl - verl_expected) <= TOL
    if not run_verl:
        return
    theirs = metric_utils.process_validation_metrics(ds, uid, infos)
    verl = np.array([theirs[f"case{c}"]["acc"][name] for c in range(len(cases))])
    sd = np.array([theirs[f"case{c}"]["acc"][f"best@{k}/std"] for c in range(len(cases))])
    # 1000 draws per vector, the same seed for all: errors may be fully correlated
    noise = 4 * float(prob @ sd) / math.sqrt(1000)
    assert abs(prob @ verl - exact_verl) < noise
    assert truth - prob @ verl > 3 * noise


def realistic_batch(seed=0):
    """Several data sources, ragged prompts (one with a single sample), None values, a missing
    pred, a string variable, integer and bool variables, interleaved rows."""
    rng = np.random.default_rng(seed)
    ds, uid, acc, score, pred, note, flag = [], [], [], [], [], [], []
    for src, sizes in (("gsm8k", [4, 4, 4, 3, 1]), ("math", [8, 8, 5]), ("aime", [4])):
        for q, n in enumerate(sizes):
            for _ in range(n):
                ds.append(src)
                uid.append(f"{src}-{q}")
                a = int(rng.integers(0, 3))
                pred.append(f"ans{a}")
                acc.append(float(a == 0))
                score.append(int(rng.integers(-1, 4)))
                note.append("text")
                flag.append(bool(rng.integers(0, 2)))
    order = rng.permutation(len(ds))
    pick = lambda xs: [xs[i] for i in order]  # noqa: E731
    infos = {"reward": pick(score), "acc": pick(acc), "pred": pick(pred), "note": pick(note),
             "flag": pick(flag)}
    ds, uid = np.array(pick(ds), dtype=object), pick(uid)
    infos["reward"][3] = None  # one missing reward: that prompt has no maj@k for reward
    infos["pred"][7] = None  # a missing answer: no maj@k for that prompt
    return ds, uid, infos


def test_same_names_as_verls_function_and_identical_plain_statistics():
    ds, uid, infos = realistic_batch()
    expected = {("gsm8k", "gsm8k-0"): 5, ("gsm8k", "gsm8k-9"): 2, ("math", "math-2"): 5}
    for exp in (None, expected):
        theirs = metric_utils.process_validation_metrics(ds, uid, infos,
                                                         expected_acc_counts=exp)
        ours = unbiased_validation_metrics(ds, uid, infos, expected_acc_counts=exp)
        assert set(ours) == set(theirs)
        for src in theirs:
            assert set(ours[src]) == set(theirs[src]), src  # "note" is skipped by both
            for var, metrics in theirs[src].items():
                plain = {m for m in ours[src][var] if not m.endswith(CI_SUFFIX)}
                assert plain == set(metrics), (src, var)
                for m, value in metrics.items():
                    if m.startswith(("mean@", "std@")):  # no resampling: the same numbers
                        assert abs(ours[src][var][m] - value) <= 1e-12
    got = unbiased_validation_metrics(ds, uid, infos, expected_acc_counts=expected)
    assert "acc_success_only" in got["gsm8k"]
    assert "mean@5" in got["gsm8k"]["acc"]  # gsm8k-0: 4 samples + 1 failed session
    assert got["gsm8k"]["acc"]["mean@2"] == 0.0  # gsm8k-9: only failed sessions


def test_confidence_intervals_are_student_t_over_prompts():
    from bestk.stats import mean_ci

    ds, uid, infos = realistic_batch()
    got = unbiased_validation_metrics(ds, uid, infos)["gsm8k"]["acc"]
    per_prompt = []
    for q in range(4):  # gsm8k's prompts of 4, 4, 4 and 3 samples (not the 1-sample one)
        rows = [i for i in range(len(ds)) if uid[i] == f"gsm8k-{q}"]
        per_prompt.append(brute_force([infos["acc"][i] for i in rows])["best@2/mean"])
    mean, half = mean_ci(per_prompt)
    assert abs(got["best@2/mean"] - mean) <= TOL
    assert abs(got["best@2/mean" + CI_SUFFIX] - half) <= TOL
    assert "best@2/std" + CI_SUFFIX not in got  # only averaged means get an interval
    assert "mean@1" in got and "mean@1" + CI_SUFFIX not in got  # a single prompt: none
    assert not any(m.endswith(CI_SUFFIX)
                   for m in unbiased_validation_metrics(ds, uid, infos, ci=False)["gsm8k"]["acc"])


def test_verls_trainer_files_the_names_and_use_unbiased_validation_is_reversible():
    from verl.trainer.ppo import ray_trainer

    try:  # needs verl's optional transfer_queue package
        from verl.trainer.ppo.v1 import trainer_base
    except ImportError:
        trainer_base = None
    trainers = [m for m in (metric_utils, ray_trainer, trainer_base) if m is not None]
    original = metric_utils.process_validation_metrics
    if not validation_from_env():  # the plugin is loaded (bverl) and left verl's in place
        assert original.__module__ == "verl.trainer.ppo.metric_utils"
    ds, uid, infos = realistic_batch()
    try:
        done = use_unbiased_validation()
        assert {m.__name__ for m in trainers} <= set(done)
        for module in trainers:
            assert module.process_validation_metrics is unbiased_validation_metrics
        assert use_unbiased_validation() == done  # idempotent
        # verl's own trainer method, with the unbiased function in its module
        metrics = ray_trainer.RayPPOTrainer._val_metrics_update(None, ds, uid, infos, [])
        assert metrics["val-core/gsm8k/acc/best@4/mean"] == unbiased_validation_metrics(
            ds, uid, infos)["gsm8k"]["acc"]["best@4/mean"]
        assert "val-core/gsm8k/acc/maj@4/mean" + CI_SUFFIX in metrics
        assert "val-aux/gsm8k/reward/best@2/mean" in metrics
        assert use_unbiased_validation(False) == done
        for module in trainers:
            assert module.process_validation_metrics is original
    finally:
        use_unbiased_validation(False)
    assert metric_utils.process_validation_metrics is original


def test_a_module_holding_another_function_is_left_alone():
    import types

    other = types.ModuleType("recipe_with_its_own_metrics")
    mine = lambda *a, **k: {}  # noqa: E731
    other.process_validation_metrics = mine
    sys.modules[other.__name__] = other
    try:
        assert other.__name__ not in use_unbiased_validation()
        assert other.process_validation_metrics is mine
    finally:
        use_unbiased_validation(False)
        del sys.modules[other.__name__]


ENV_CHECK = """
import verl
from verl.trainer.ppo import ray_trainer
print(ray_trainer.process_validation_metrics.__module__)
"""


def test_environment_variable_switches_verl_through_the_plugin():
    """A fresh interpreter that never imports bestk: verl's plugin loading does it. (Without
    the variable, this process shows the plugin leaving verl's function in place.)"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_USE_EXTERNAL")}
    env[VALIDATION_ENV] = "unbiased"
    out = subprocess.run([sys.executable, "-c", ENV_CHECK], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "bestk.integrations.verl_validation"


def test_ray_runtime_env_override_composes_on_verls_config():
    """The documented override reaches the runtime_env that verl's run_ppo hands to ray.init."""
    from omegaconf import OmegaConf
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    cfg = bverl.compose_verl_config([bverl.VALIDATION_OVERRIDE])
    merged = OmegaConf.merge(get_ppo_ray_runtime_env(cfg), cfg.ray_kwargs.ray_init.runtime_env)
    assert merged.env_vars[VALIDATION_ENV] == "unbiased"


def test_validation_from_env_and_preflight_report_it(monkeypatch):
    assert validation_from_env({VALIDATION_ENV: "unbiased"}) is True
    assert validation_from_env({VALIDATION_ENV: " Unbiased "}) is True
    assert validation_from_env({VALIDATION_ENV: "verl"}) is False
    assert validation_from_env({}) is False
    with pytest.raises(ValueError, match=VALIDATION_ENV):
        validation_from_env({VALIDATION_ENV: "yes"})
    monkeypatch.delenv(VALIDATION_ENV, raising=False)
    grpo = "algorithm.adv_estimator=grpo"
    assert "verl's bootstrap" in bverl.preflight([grpo])
    assert "validation metrics: unbiased" in bverl.preflight([grpo, bverl.VALIDATION_OVERRIDE])
    monkeypatch.setenv(VALIDATION_ENV, "unbiased")
    assert "validation metrics: unbiased" in bverl.preflight([grpo])
    with pytest.raises(ValueError, match=VALIDATION_ENV):
        bverl.preflight([grpo, bverl.VALIDATION_OVERRIDE.replace("=unbiased", "=on")])


def test_no_samples_give_no_metrics():
    assert unbiased_validation_metrics([], [], {"reward": []}) == {}


@pytest.mark.parametrize(("args", "match"), [
    ((["d"] * 2, ["u"], {"reward": [1.0, 0.0]}), "sample_uids has 1 values"),
    ((["d"] * 2, ["u"] * 2, {"reward": [1.0]}), r"infos_dict\['reward'\] has 1 values"),
    ((["d"] * 2, ["u"] * 2, {"reward": [1.0, "a"]}), "mixes strings and numbers"),
    ((["d"] * 2, ["u"] * 2, {"reward": [1.0, [1, 2]]}), "not numbers"),
    ((["d"] * 2, ["u"] * 2, {"reward": [1.0, float("nan")]}), "non-finite value nan at sample 1"),
    ((["d"] * 2, ["u"] * 2, {"reward": [1.0, float("inf")]}), "non-finite"),
    ((["d"] * 2, ["u"] * 2, {"reward": [1.0, 1e200]}), "too large"),
    ((["d"] * 2, ["u"] * 2, {"reward": [1.0, 0.0], "pred": [["a"], ["b"]]}),
     r"infos_dict\['pred'\] holds values that are not numbers"),
    ((["d"] * 2, [["u"], "v"], {"reward": [1.0, 0.0]}), "hashable"),
    ((["d"] * 2, ["u"] * 2, "reward"), "infos_dict must map"),
])
def test_bad_input_is_a_value_error(args, match):
    with pytest.raises(ValueError, match=match):
        unbiased_validation_metrics(*args)


def test_bad_expected_counts_and_bad_maj_at_k_arguments():
    ds, uid, infos = ["d"] * 2, ["u"] * 2, {"acc": [1.0, 0.0]}
    with pytest.raises(ValueError, match="counts"):
        unbiased_validation_metrics(ds, uid, infos, expected_acc_counts={("d", "u"): 2.5})
    with pytest.raises(ValueError, match="counts"):
        unbiased_validation_metrics(ds, uid, infos, expected_acc_counts={("d", "u"): -1})
    with pytest.raises(ValueError, match="pairs"):
        unbiased_validation_metrics(ds, uid, infos, expected_acc_counts={"u": 2})
    with pytest.raises(ValueError, match="k must be an integer"):
        maj_at_k([1.0, 0.0], ["a", "b"], 2.0)
    with pytest.raises(ValueError, match="exceeds the size 2"):
        maj_at_k([1.0, 0.0], ["a", "b"], 3)
    with pytest.raises(ValueError, match="2 answers but 3 values"):
        maj_at_k([1.0, 0.0, 1.0], ["a", "b"], 2)
    with pytest.raises(ValueError, match="1-D"):
        maj_at_k([[1.0, 0.0]], ["a", "b"], 1)
    with pytest.raises(ValueError, match="not finite|NaN|nan"):
        maj_at_k([1.0, float("nan")], ["a", "b"], 1)
    with pytest.raises(ValueError, match="hashable"):
        maj_at_k([1.0, 0.0], [["a"], "b"], 1)
