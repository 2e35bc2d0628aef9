"""The SFT warm-up: cross-entropy on the task's reference answers before RL.

:func:`sft_warmup` trains a policy in place on ``prompt + answer + EOS`` (loss on the answer
tokens only) for ``sft.steps`` steps of ``sft.batch_size`` training examples drawn with the
``SFT_ORDER`` stream, AdamW with a linear warm-up over the first tenth of the steps and a
cosine decay, global-norm clipping at ``optim.grad_clip`` (bfloat16 weights step through
float32 masters, :class:`~bestk.train.optim.MasterAdamW`). The
:class:`~bestk.train.trainer.Trainer` runs it first; :func:`bestk.train.steps.sft_weights` runs
it without a run directory (``bestk compare`` shares one warm-up between the methods of a
seed).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch

from bestk._seeds import SFT_ORDER
from bestk.tasks import Task
from bestk.train.config import ResolvedTrainConfig
from bestk.train.guards import check_sft_update
from bestk.train.optim import MasterAdamW, make_optimizer
from bestk.train.runtime.stop import Stopped

if TYPE_CHECKING:  # pragma: no cover - annotations only (transformers is optional)
    from rich.progress import Progress
    from transformers import PreTrainedTokenizerBase

    from bestk.train.model.policy import Policy

__all__ = ["sft_warmup", "make_optimizer"]




def sft_warmup(model: Policy, tokenizer: PreTrainedTokenizerBase, task: Task,
               cfg: ResolvedTrainConfig, device: torch.device,
               log: Callable[[dict[str, float | str]], None], progress: Progress | None = None,
               should_stop: Callable[[], bool] | None = None) -> None:
    """Cross-entropy warm-up of ``model`` on ``prompt + answer + EOS`` (loss on answer tokens;
    module docstring); every 10th step and the last are ``log``-ged as ``phase: sft``.
    ``should_stop`` (Ctrl-C, SIGTERM) is asked before each step: when it says so,
    :class:`~bestk.train.runtime.stop.Stopped` is raised naming the steps done."""
    s = cfg.sft
    tok = tokenizer
    opt = MasterAdamW(model, cfg, s.lr)  # float32 masters of bfloat16 weights
    rng = np.random.default_rng(SFT_ORDER.seed(cfg.seed))
    warm = max(1, s.steps // 10)
    eos = tok.eos_token_id
    pad = tok.pad_token_id
    model.train()
    task_id = progress.add_task("SFT warm-up", total=s.steps) if progress else None
    for i in range(s.steps):
        if should_stop is not None and should_stop():
            raise Stopped(f"SFT step {i} of {s.steps}")
        lr = s.lr * min(1.0, (i + 1) / warm)
        if i >= warm:
            lr = s.lr * 0.5 * (1 + math.cos(math.pi * (i - warm) / max(1, s.steps - warm)))
        opt.set_lr(lr)
        idx = rng.integers(0, len(task.train), size=s.batch_size)
        exs = [task.train[j] for j in idx]
        p_ids = tok([e["prompt"] for e in exs], add_special_tokens=False)["input_ids"]
        a_ids = tok([e["answer"] for e in exs], add_special_tokens=False)["input_ids"]
        seqs = [p + a + [eos] for p, a in zip(p_ids, a_ids, strict=True)]
        L = max(len(x) for x in seqs)
        ids = torch.full((len(seqs), L), pad, dtype=torch.long)
        labels = torch.full((len(seqs), L), -100, dtype=torch.long)
        mask = torch.zeros((len(seqs), L), dtype=torch.long)
        for r, (x, p) in enumerate(zip(seqs, p_ids, strict=True)):
            ids[r, : len(x)] = torch.tensor(x)
            mask[r, : len(x)] = 1
            labels[r, len(p) : len(x)] = torch.tensor(x[len(p) :])
        ids, labels, mask = ids.to(device), labels.to(device), mask.to(device)
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100
        )
        opt.zero_grad()
        loss.backward()
        gnorm = opt.gradients(cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else None)
        check_sft_update(i + 1, s.steps, loss, gnorm)  # nan / inf: stop before the update
        opt.step()
        if (i + 1) % 10 == 0 or i + 1 == s.steps:
            log({"phase": "sft", "sft_step": i + 1, "loss": loss.item(), "lr": lr})
        if progress:
            assert task_id is not None  # added with the progress bar
            progress.update(task_id, advance=1, description=f"SFT warm-up loss={loss.item():.3f}")
