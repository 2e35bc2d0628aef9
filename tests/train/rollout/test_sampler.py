"""KV-cache sampling, log-probabilities, top-p, the tiny policy, and evaluation metrics."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from bestk.tasks import load_task
from bestk.train.config import ModelConfig
from bestk.train.model.logprobs import sequence_logprobs
from bestk.train.model.policy import build_char_tokenizer, count_parameters, load_policy
from bestk.train.rollout.batch import concat_rollouts
from bestk.train.rollout.engine import HFEngine
from bestk.train.rollout.evaluate import evaluate
from bestk.train.rollout.sampler import sample, top_p_filter

pytestmark = pytest.mark.usefixtures("restore_torch_threads")


SMALL = ModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)


@pytest.fixture(scope="module")
def policy():
    torch.set_num_threads(1)
    return load_policy(SMALL, "0123456789+=", seed=0)


def test_char_tokenizer_roundtrip():
    tok = build_char_tokenizer("ab=")
    ids = tok("ab=ba", add_special_tokens=False)["input_ids"]
    assert len(ids) == 5 and tok.decode(ids) == "ab=ba"
    assert tok.decode(ids + [tok.eos_token_id], skip_special_tokens=True) == "ab=ba"
    assert tok.padding_side == "left"


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_default_model_size_and_arch(arch):
    model, tok = load_policy(ModelConfig(arch=arch), "0123456789+=", seed=0)
    assert model.config.model_type == arch
    assert 500_000 <= count_parameters(model) <= 5_000_000


def test_sampled_logprobs_match_a_full_forward(policy):
    model, tok = policy
    gen = torch.Generator().manual_seed(0)
    # prompts of different lengths -> left padding; temperature != 1 on both sides
    ro = sample(model, tok, ["1+2=", "12+345=", "9="], n=3, temperature=0.7,
                max_new_tokens=6, generator=gen)
    assert ro.completion_ids.shape[0] == 9 and len(ro.texts) == 9
    lp, ent = sequence_logprobs(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids,
                                ro.completion_mask, temperature=0.7, with_entropy=True)
    m = ro.completion_mask.float()
    torch.testing.assert_close(lp * m, ro.logprobs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent * m, ro.entropy, atol=1e-5, rtol=1e-5)
    # each prompt's log-prob of its first completion token equals a single unpadded forward
    for i, p in enumerate(["1+2=", "12+345=", "9="]):
        ids = torch.tensor([tok(p, add_special_tokens=False)["input_ids"]])
        logits = model(input_ids=ids).logits[0, -1] / 0.7
        first = ro.completion_ids[3 * i, 0]
        expect = torch.log_softmax(logits, -1)[first].detach()
        assert float(ro.logprobs[3 * i, 0]) == pytest.approx(float(expect), abs=1e-5)


def _by_hand_sampling_logprob(logits: np.ndarray, token: int, temperature: float, top_k: int,
                              top_p: float) -> float:
    """log pi_sampler(token) from one row of logits, by hand in float64: temper, keep the
    top_k largest (ties with the k-th kept), then the smallest prefix of the sorted
    probabilities whose mass reaches top_p, renormalise."""
    z = logits.astype(np.float64) / temperature
    keep = z >= np.sort(z)[-top_k] if top_k else np.ones_like(z, dtype=bool)
    p = np.where(keep, np.exp(z - z.max()), 0.0)
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    before = np.cumsum(p[order]) - p[order]
    nucleus = np.zeros_like(keep)
    nucleus[order[before < top_p]] = True
    q = np.where(nucleus, p, 0.0)
    return float(np.log(q[token] / q.sum()))


@pytest.mark.parametrize(("top_k", "top_p"), [(3, 1.0), (0, 0.7), (4, 0.8)])
def test_sampled_logprobs_are_the_sampling_distributions_with_top_k_and_top_p(
        policy, top_k, top_p):
    """The sampler contract: each sampled token's log-probability is under the filtered,
    renormalised distribution it was drawn from (what vLLM's processed_logprobs are), checked
    against a full forward and filtering by hand; the entropy stays the tempered policy's."""
    model, tok = policy
    gen = torch.Generator().manual_seed(1)
    ro = sample(model, tok, ["1+2=", "12+345="], n=4, temperature=0.9, max_new_tokens=5,
                generator=gen, top_k=top_k, top_p=top_p)
    _, ent = sequence_logprobs(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids,
                               ro.completion_mask, temperature=0.9, with_entropy=True)
    torch.testing.assert_close(ent * ro.completion_mask, ro.entropy, atol=1e-5, rtol=1e-5)
    ids = torch.cat([ro.prompt_ids, ro.completion_ids], 1)
    mask = torch.cat([ro.prompt_mask, ro.completion_mask], 1)
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    P = ro.prompt_ids.shape[1]
    checked = 0
    for b, t in zip(*torch.nonzero(ro.completion_mask, as_tuple=True), strict=True):
        want = _by_hand_sampling_logprob(logits[b, P + t - 1].numpy(),
                                         int(ro.completion_ids[b, t]), 0.9, top_k, top_p)
        assert float(ro.logprobs[b, t]) == pytest.approx(want, abs=1e-4)
        checked += 1
    assert checked > 10
    assert torch.isfinite(ro.logprobs).all() and not ro.logprobs[ro.completion_mask == 0].any()
    # the filters matter: the unfiltered log-probs differ on some token
    lp, _ = sequence_logprobs(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids,
                              ro.completion_mask, temperature=0.9)
    assert ((lp - ro.logprobs) * ro.completion_mask).abs().max() > 1e-3


PROMPTS = ["1+2=", "12+345=", "9=", "77+1="]


@pytest.mark.parametrize("batch_size", [1, 3, 6, 7])
def test_chunked_sampling_matches_a_full_forward_of_the_joined_batch(policy, batch_size):
    """rollout.sample_batch_size: the prompts go through in chunks of whole groups
    (max(1, batch_size // n) prompts); the joined batch is re-padded so that one full forward
    over it reproduces every sampled log-prob and entropy (the update's view of the rows)."""
    model, tok = policy
    n = 3
    calls = []
    orig = model.forward

    def counting(*args, **kw):
        calls.append(kw["input_ids"].shape)
        return orig(*args, **kw)

    model.forward = counting
    try:
        ro = sample(model, tok, PROMPTS, n=n, temperature=0.8, max_new_tokens=5,
                    generator=torch.Generator().manual_seed(1), batch_size=batch_size)
    finally:
        del model.forward
    per_chunk = max(1, batch_size // n)
    prefills = [shape for shape in calls if shape[1] > 1]  # prompts are longer than 1 token
    assert [shape[0] for shape in prefills] == [
        min(per_chunk, len(PROMPTS) - i) for i in range(0, len(PROMPTS), per_chunk)]
    assert max(shape[0] for shape in calls) <= max(per_chunk * n, per_chunk)
    B = len(PROMPTS) * n
    assert ro.completion_ids.shape[0] == B == len(ro.texts) == ro.finished.shape[0]
    lp, ent = sequence_logprobs(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids,
                                ro.completion_mask, temperature=0.8, with_entropy=True)
    m = ro.completion_mask.float()
    torch.testing.assert_close(lp * m, ro.logprobs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent * m, ro.entropy, atol=1e-5, rtol=1e-5)
    # every row's prompt is its prompt, left-padded; masks are 0 exactly on the padding
    for i in range(B):
        ids = ro.prompt_ids[i][ro.prompt_mask[i].bool()].tolist()
        assert ids == tok(PROMPTS[i // n], add_special_tokens=False)["input_ids"]
    assert tok.batch_decode(ro.completion_ids * ro.completion_mask,
                            skip_special_tokens=True) == ro.texts


def test_chunked_greedy_sampling_equals_one_batch(policy):
    """With top_k = 1 sampling is deterministic, so chunks change nothing but the padding."""
    model, tok = policy
    kw = dict(n=2, top_k=1, max_new_tokens=6)
    whole = sample(model, tok, PROMPTS, generator=torch.Generator().manual_seed(0), **kw)
    parts = sample(model, tok, PROMPTS, generator=torch.Generator().manual_seed(0),
                   batch_size=2, **kw)
    assert parts.texts == whole.texts
    assert torch.equal(parts.finished, whole.finished)
    T = whole.completion_ids.shape[1]
    assert torch.equal(parts.completion_mask[:, :T], whole.completion_mask)
    torch.testing.assert_close(parts.logprobs[:, :T], whole.logprobs, atol=1e-5, rtol=1e-5)


def test_concat_rollouts_refuses_nothing_and_bad_batch_size(policy):
    model, tok = policy
    with pytest.raises(ValueError, match="no rollouts"):
        concat_rollouts([], pad_id=0)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="batch_size"):
            sample(model, tok, PROMPTS, n=2, batch_size=bad)


def test_sampling_stops_at_eos_and_masks_after(policy):
    model, tok = policy
    gen = torch.Generator().manual_seed(1)
    ro = sample(model, tok, ["1+1="] * 4, n=8, max_new_tokens=12, generator=gen)
    eos = tok.eos_token_id
    for ids, mask, done in zip(ro.completion_ids, ro.completion_mask, ro.finished, strict=True):
        ids, mask = ids.tolist(), mask.tolist()
        if eos in ids:
            j = ids.index(eos)
            assert mask[: j + 1] == [1] * (j + 1) and not any(mask[j + 1 :])
            assert bool(done)
        else:
            assert all(mask) and not bool(done)


def test_same_generator_seed_same_samples(policy):
    model, tok = policy
    a = sample(model, tok, ["3+4="], n=5, generator=torch.Generator().manual_seed(3))
    b = sample(model, tok, ["3+4="], n=5, generator=torch.Generator().manual_seed(3))
    assert a.texts == b.texts


def test_top_p_filter_by_hand():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    out = top_p_filter(probs.log(), 0.8)
    # cumulative mass before each token: 0, .5, .8, .95 -> keep the first two
    assert torch.isfinite(out).tolist() == [[True, True, False, False]]
    out = top_p_filter(probs.log(), 0.81)
    assert torch.isfinite(out).tolist() == [[True, True, True, False]]
    assert torch.equal(top_p_filter(probs.log(), 1.0), probs.log())


def test_evaluate_pass_at_k_matches_brute_force(policy):
    model, tok = policy
    task = load_task("arithmetic", {"digits": 1, "num_eval": 6}, seed=0)
    # a reward that succeeds often enough to exercise 0 < c < n
    from bestk.tasks.rewards import RewardSpec

    task.reward = RewardSpec(lambda p, c, **ex: float(len(c.strip()) % 2 == 1), graded=True)
    res = evaluate(HFEngine(model, tok), task, task.eval, n=5, max_new_tokens=4, seed=0)
    succ = res.rewards >= 1.0
    for k in range(1, 6):
        # brute force: average over all k-subsets of each prompt's samples
        per_prompt = [
            np.mean([row[list(s)].any() for s in itertools.combinations(range(5), k)])
            for row in succ
        ]
        assert res.metrics[f"pass@{k}"] == pytest.approx(np.mean(per_prompt))
        best = [
            np.mean([row[list(s)].max() for s in itertools.combinations(range(5), k)])
            for row in res.rewards
        ]
        assert res.metrics[f"best@{k}"] == pytest.approx(np.mean(best))
    assert res.metrics["reward_mean"] == pytest.approx(res.rewards.mean())
    distinct = np.mean([len({t.strip() for t in res.texts[i * 5 : i * 5 + 5]}) for i in range(6)])
    assert res.metrics["distinct"] == pytest.approx(distinct)
    assert math.isfinite(res.metrics["entropy"]) and res.metrics["entropy"] > 0


def test_shared_prompt_encoding_equals_full_forward(policy):
    model, tok = policy
    ro = sample(model, tok, ["1+2=", "12+345=", "9="], n=4, max_new_tokens=5,
                generator=torch.Generator().manual_seed(2))
    args = (ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    m = ro.completion_mask.float()
    lp1, _ = sequence_logprobs(model, *args, temperature=0.9)
    lp4, _ = sequence_logprobs(model, *args, temperature=0.9, group_size=4)
    torch.testing.assert_close(lp1 * m, lp4 * m, atol=1e-5, rtol=1e-5)
    params = list(model.parameters())
    g1 = torch.autograd.grad((lp1 * m).sum(), params)
    g4 = torch.autograd.grad((lp4 * m).sum(), params)
    for a, b in zip(g1, g4, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def _forward_kwargs(model):
    """Record the keyword arguments of each forward call of ``model``: (list, hook handle)."""
    seen: list[dict] = []
    handle = model.register_forward_pre_hook(lambda m, args, kw: seen.append(dict(kw)),
                                             with_kwargs=True)
    return seen, handle


class _NoLogitsToKeep(torch.nn.Module):
    """A causal LM whose forward takes no ``logits_to_keep`` (a custom model)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, attention_mask, position_ids, use_cache=False,
                past_key_values=None):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                          position_ids=position_ids, use_cache=use_cache,
                          past_key_values=past_key_values)


def test_the_prefill_computes_only_the_last_logits_where_asked(policy):
    """``trim_logits``: the prefill passes ``logits_to_keep=1`` (by default only for weights
    that are not float32, where it may round differently); the completions are the same, their
    log-probs and entropies equal to float32 rounding; a model that does not take the
    argument samples as before."""
    model, tok = policy
    kw = dict(n=3, temperature=0.8, max_new_tokens=5)

    def run(m, **extra):
        seen, handle = _forward_kwargs(m)
        try:
            ro = sample(m, tok, PROMPTS, generator=torch.Generator().manual_seed(3), **kw,
                        **extra)
        finally:
            handle.remove()
        return ro, [call.get("logits_to_keep") for call in seen]

    full, keeps = run(model)
    assert set(keeps) == {None}  # float32, by default: every position's logits, as always
    trimmed, keeps = run(model, trim_logits=True)
    assert keeps[0] == 1 and set(keeps[1:]) == {None}  # the prefill only
    assert trimmed.texts == full.texts
    torch.testing.assert_close(trimmed.logprobs, full.logprobs, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(trimmed.entropy, full.entropy, rtol=1e-6, atol=1e-6)
    plain, keeps = run(_NoLogitsToKeep(model), trim_logits=True)
    assert set(keeps) == {None} and plain.texts == full.texts
    assert torch.equal(plain.logprobs, full.logprobs)

    bf16, _ = load_policy(SMALL.model_copy(update={"dtype": "bfloat16"}), "0123456789+=", seed=0)
    auto, keeps = run(bf16)
    assert keeps[0] == 1 and set(keeps[1:]) == {None}  # bfloat16, by default: trimmed
    untrimmed, _ = run(bf16, trim_logits=False)
    assert auto.texts == untrimmed.texts
    torch.testing.assert_close(auto.logprobs, untrimmed.logprobs, rtol=0, atol=2e-2)


@pytest.mark.parametrize("was_training", [True, False])
def test_the_model_s_mode_comes_back_when_sampling_fails(policy, was_training):
    """sample() puts the model in eval mode for decoding and gives the caller's mode back
    afterwards, also when decoding raises midway (a stop, a bad token, Ctrl-C)."""
    model, tok = policy
    model.train(was_training)
    sample(model, tok, ["12"], n=2, temperature=1.0, top_p=1.0, max_new_tokens=3,
           generator=torch.Generator().manual_seed(0))
    assert model.training is was_training

    calls = []

    def boom(module, args, kwargs):
        calls.append(module.training)
        raise KeyboardInterrupt  # what Ctrl-C raises inside the forward

    handle = model.register_forward_pre_hook(boom, with_kwargs=True)
    try:
        with pytest.raises(KeyboardInterrupt):
            sample(model, tok, ["12"], n=2, temperature=1.0, top_p=1.0, max_new_tokens=3,
                   generator=torch.Generator().manual_seed(0))
    finally:
        handle.remove()
    assert calls == [False]  # it decoded in eval mode ...
    assert model.training is was_training  # ... and gave the mode back
