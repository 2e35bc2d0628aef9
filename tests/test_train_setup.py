"""How a run starts: the rewards it logs (several functions), its sampling values (the
model's ``generation_config`` for ``null`` keys, the header line), its prompt length check,
and the sampling options the rollout gets (top-k, prompt cut), bit-identical when off."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bestk.tasks import load_task
from bestk.train.config import TrainConfig, apply_overrides
from bestk.train.model.policy import load_policy
from bestk.train.rollout.sampler import sample
from bestk.train.rollout.scoring import score_batch
from bestk.train.rollout.settings import sampling_options
from bestk.train.setup import check_run_prompts
from bestk.train.validation import resolve_defaults


def test_score_batch_logs_each_function_of_several():
    task = load_task("strings", {"num_train": 8, "num_eval": 4},
                     reward=["exact", "positional"], reward_weights=[2.0, 1.0])
    exs = task.train[:2]
    texts = [exs[0]["answer"], "x"]
    metrics: dict[str, float] = {}
    total = score_batch(task, exs, texts, metrics)
    assert total.tolist() == [3.0, 0.0]
    assert metrics == {"rewards/exact/mean": 0.5, "rewards/positional/mean": 0.5}
    one = load_task("strings", {"num_train": 8, "num_eval": 4})
    metrics = {}
    assert score_batch(one, exs, texts, metrics).tolist() == [1.0, 0.0] and metrics == {}


def test_null_sampling_keys_take_the_model_generation_config(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"temperature": 0.7, "top_k": 20, "eos_token_id": 2}))
    cfg = apply_overrides(TrainConfig(), [f"model.path={tmp_path}", "rollout.temperature=null",
                                          "rollout.top_p=null", "rollout.top_k=null",
                                          "eval.top_k=null"])
    got = resolve_defaults(cfg)
    r, e = got.rollout, got.eval
    assert (r.temperature, r.top_p, r.top_k) == (0.7, 1.0, 20)
    assert (e.temperature, e.top_p, e.top_k) == (1.0, 1.0, 20)  # set keys are kept
    assert cfg.rollout.temperature is None  # the given config is not changed
    from bestk.train.rollout.settings import sampling_header

    assert sampling_header(got) == (
        "sampling: temperature=0.7 (generation_config) top_p=1.0 (config) top_k=20 "
        "(generation_config); eval: temperature=1.0 (config) top_p=1.0 (config) top_k=20 "
        "(generation_config)")
    # The default config keeps 1.0 / 1.0 / 0 (the file sets none of them for it).
    plain = resolve_defaults(apply_overrides(TrainConfig(), [f"model.path={tmp_path}"]))
    assert (plain.rollout.temperature, plain.rollout.top_p, plain.rollout.top_k) == (1.0, 1.0, 0)
    (tmp_path / "generation_config.json").write_text(json.dumps({"top_p": 3}))
    with pytest.raises(ValueError, match="the model's generation_config top_p must be in"):
        resolve_defaults(cfg)


def _tiny(*extra: str):
    cfg = apply_overrides(TrainConfig(), ["task.options={num_train: 16, num_eval: 4}", *extra])
    task = load_task("strings", cfg.task.options)
    model, tok = load_policy(cfg.model, task.alphabet, seed=0)
    return cfg, task, model, tok


def test_prompt_length_check_and_cut():
    cfg, task, model, tok = _tiny("rollout.max_prompt_length=8")
    lengths = [len(ex["prompt"]) for ex in [*task.train, *task.eval]]  # one token a character
    assert check_run_prompts(cfg, task, tok) == sum(n > 8 for n in lengths) > 0
    cfg.rollout.prompt_truncation = "error"
    with pytest.raises(ValueError, match=r"prompts are longer than rollout.max_prompt_length = 8"):
        check_run_prompts(cfg, task, tok)
    cfg.rollout.prompt_truncation = "left"
    prompts = [ex["prompt"] for ex in task.train[:4]]
    ro = sample(model, tok, prompts, n=2, max_new_tokens=3,
                generator=torch.Generator().manual_seed(0), **sampling_options(cfg))
    assert ro.prompt_ids.shape[1] == 8
    assert ro.metrics == {"prompts_truncated": float(sum(len(p) > 8 for p in prompts))}
    cut = tok(prompts[0][-8:], add_special_tokens=False)["input_ids"]
    assert ro.prompt_ids[0].tolist() == cut  # the last 8 tokens


def test_sampling_options_off_are_bit_identical_and_top_k_one_is_greedy():
    cfg, task, model, tok = _tiny()
    prompts = [ex["prompt"] for ex in task.train[:3]]

    def run(**kw):
        return sample(model, tok, prompts, n=2, max_new_tokens=4,
                      generator=torch.Generator().manual_seed(1), **kw)

    base, opts = run(), run(**sampling_options(cfg))
    assert torch.equal(base.completion_ids, opts.completion_ids) and opts.metrics == {}
    assert torch.equal(base.logprobs, opts.logprobs)
    greedy = run(top_k=1)
    with torch.no_grad():
        first = model(**tok(prompts, padding=True, return_tensors="pt",
                            add_special_tokens=False)).logits[:, -1].argmax(-1)
    assert np.array_equal(greedy.completion_ids[::2, 0].numpy(), first.numpy())
