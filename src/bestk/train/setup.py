"""How a run starts, before any run-directory work: its task and device, then its policy.

The :class:`~bestk.train.loop.Trainer` and the jobs of ``bestk compare`` (SFT, calibration
and bank jobs that need a policy but no run directory) start the same way, so that a policy
built by either is the same tensor for tensor.
"""

from __future__ import annotations

from typing import Any

import torch

from bestk.tasks import Task, load_task
from bestk.train.config import TrainConfig
from bestk.train.hf import enable_gradient_checkpointing, render_task_prompts
from bestk.train.policy import load_policy

__all__ = ["load_run_task", "load_run_policy", "max_new_tokens"]


def load_run_task(cfg: TrainConfig) -> tuple[Task, torch.device]:
    """``(task, device)`` of a run of ``cfg``: sets ``threads`` and the global torch seed
    (``seed``), then loads the task (its options and sizes checked)."""
    if cfg.threads:
        torch.set_num_threads(int(cfg.threads))
    torch.manual_seed(cfg.seed)
    device = torch.device(cfg.device)
    task = load_task(cfg.task.name, cfg.task.options, seed=cfg.seed, reward=cfg.task.reward)
    return task, device


def load_run_policy(cfg: TrainConfig, task: Task, device: torch.device) -> tuple[Any, Any]:
    """``(model, tokenizer)``: the policy of ``model`` (initialised from ``seed``) on
    ``device``, with the task's prompts rendered by its chat template."""
    model, tokenizer = load_policy(cfg.model, task.alphabet, seed=cfg.seed)
    if cfg.model.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    render_task_prompts(task, tokenizer, cfg.model.chat_template)
    model.to(device)
    return model, tokenizer


def max_new_tokens(cfg: TrainConfig, task: Task) -> int:
    """Completion length bound: ``rollout.max_new_tokens``, or the task's longest answer + 2."""
    return cfg.rollout.max_new_tokens or (task.max_answer_chars + 2)
