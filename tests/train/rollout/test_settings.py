"""bestk.train.rollout.settings and the sampler's top-k filtering (Hugging Face's TopKLogitsWarper
semantics, 0 = off) and the sampling settings resolved from the config, else the model's
generation_config."""

from __future__ import annotations

import math

import pytest
import torch

from bestk.train.config.sampling import DEFAULTS, resolve_sampling
from bestk.train.rollout.sampler import top_k_filter


def test_top_k_filter_keeps_the_k_largest_and_ties():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.5], [0.0, 2.0, 2.0, 1.0]])
    out = top_k_filter(logits, 2)
    inf = -math.inf
    assert out.tolist() == [[inf, 3.0, 2.0, inf], [inf, 2.0, 2.0, inf]]
    assert top_k_filter(logits, 1)[1].tolist() == [inf, 2.0, 2.0, inf]  # a tie stays
    for off in (0, None, 4, 10):
        assert top_k_filter(logits, off) is logits  # nothing filtered: the same tensor
    with pytest.raises(ValueError, match="top_k must be >= 0"):
        top_k_filter(logits, -1)


def test_top_k_filter_matches_transformers_warper():
    from transformers.generation.logits_process import TopKLogitsWarper

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 40, generator=g)
    for k in (1, 3, 17):
        want = TopKLogitsWarper(top_k=k)(None, logits.clone())
        assert torch.equal(top_k_filter(logits, k), want)


def test_resolve_sampling_config_then_generation_config_then_defaults():
    from transformers import GenerationConfig

    qwen = GenerationConfig(do_sample=True, temperature=0.7, top_p=0.8, top_k=20)
    p = resolve_sampling(None, None, None, qwen)
    assert (p.temperature, p.top_p, p.top_k) == (0.7, 0.8, 20)
    assert p.describe() == ("temperature=0.7 (generation_config) top_p=0.8 (generation_config) "
                            "top_k=20 (generation_config)")
    p = resolve_sampling(1.0, None, 0, qwen)
    assert (p.temperature, p.top_p, p.top_k) == (1.0, 0.8, 0)
    assert p.source == {"temperature": "config", "top_p": "generation_config", "top_k": "config"}
    bare = GenerationConfig(eos_token_id=2)  # sets no sampling value
    p = resolve_sampling(None, None, None, bare)
    assert (p.temperature, p.top_p, p.top_k) == (DEFAULTS["temperature"], DEFAULTS["top_p"],
                                                 DEFAULTS["top_k"])
    assert p.describe() == "temperature=1.0 (default) top_p=1.0 (default) top_k=0 (default)"
    assert resolve_sampling(None, None, None, None).source["top_k"] == "default"


def test_resolve_sampling_checks_values():
    with pytest.raises(ValueError, match="config key 'rollout.temperature' must be > 0, got 0"):
        resolve_sampling(0, None, None)
    with pytest.raises(ValueError, match="config key 'eval.top_p' must be in \\(0, 1\\], got 1.5"):
        resolve_sampling(None, 1.5, None, where="eval")
    with pytest.raises(ValueError, match="'rollout.top_k' must be an integer >= 0 \\(0 = off\\), "
                       "got 2.5"):
        resolve_sampling(None, None, 2.5)
    with pytest.raises(ValueError, match="'rollout.top_k' must be an integer"):
        resolve_sampling(None, None, True)

    class Odd:
        temperature = -1.0

    with pytest.raises(ValueError, match="the model's generation_config temperature must be > 0"):
        resolve_sampling(None, None, None, Odd())
