"""The tiny TRL set-up shared by ``tests/integrations/test_trl.py`` and its 2-process worker:
a ~20k-parameter Qwen2 with a character tokenizer, built locally (nothing downloaded), and the
seeded CPU ``GRPOConfig`` of a 2-step run."""

from __future__ import annotations

import torch

ALPHABET = "abcdefgh xyz"


def tiny_policy(seed: int = 0):
    """A ~20k-parameter Qwen2 and a character tokenizer over :data:`ALPHABET`."""
    from bestk.train.config import ModelConfig
    from bestk.train.model.policy import build_char_tokenizer, build_tiny_model

    tok = build_char_tokenizer(ALPHABET)
    cfg = ModelConfig(hidden_size=32, intermediate_size=64, num_layers=2, max_positions=64)
    torch.manual_seed(seed)
    return build_tiny_model(cfg, tok, seed=seed), tok


def grpo_config(output_dir: str, **overrides):
    """A seeded 2-step CPU ``GRPOConfig`` (6-token completions, no KL, no saving/logging)."""
    from trl import GRPOConfig

    kwargs = dict(
        output_dir=str(output_dir),
        steps_per_generation=1,
        gradient_accumulation_steps=1,
        max_completion_length=6,
        max_steps=2,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        beta=0.0,
        seed=0,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    kwargs.update(overrides)
    return GRPOConfig(**kwargs)
