"""The cost of one RL update of a LoRA policy in bfloat16 on this CPU, by configuration, side by
side in one process: ``loss.chunked_logprobs`` and ``model.lora.dtype``.

The policy is ``model.dtype: bfloat16`` with LoRA adapters (``--lora-r``, every linear layer
but the head): the tiny default architecture at ``--hidden`` / ``--layers``, or ``--model``
(a Hugging Face directory or a ``.gguf`` file, e.g. SmolLM2-135M-Instruct, whose prompts go
through its chat template). One rollout is sampled once (``--prompts`` prompts of the
``arithmetic`` task x ``--n`` completions of at most ``--tokens`` tokens, stopping at EOS, so
the lengths vary as in training) and every variant updates on it. The update is what
:class:`bestk.train.algorithms.pg.PGAlgorithm` runs on a vLLM rollout
(``rollout.engine: vllm``): :func:`bestk.train.model.logprobs.sequence_logprobs` with the
token entropies (the policy's own pass fills the rollout's log-probs and entropies there;
``--no-entropy`` leaves them out, as an ``hf`` rollout does), a policy-gradient loss with
fixed advantages, the backward pass and the optimizer step
(:class:`bestk.train.optim.PolicyOptimizer`).

Variants (each a copy of the same weights; the adapters' ``B`` starts at 0):

* ``default``: float32 adapters (PEFT's default), the whole ``(B, T, V)`` logits in float32;
* ``chunked``: ``loss.chunked_logprobs: true`` (log-probs and entropies chunk by chunk);
* ``adapters``: ``model.lora.dtype: model`` (bfloat16 adapters, no casts; float32 masters);
* ``both``: the two together;
* ``both-micro``: and ``loss.micro_batch_size: 32`` (two groups of 16 per forward/backward,
  their gradients accumulated into one step: the same update up to float rounding, holding
  one micro-batch's activations at a time).

Per round each variant runs once (the order rotates every round). Times are process CPU time
(``--clock wall`` for wall time) with torch on ``--threads`` threads; reported: the median
over ``--rounds`` rounds after ``--warmup`` untimed ones, and each variant's speed-up over
``default``; the last line is JSON ``{"model", "clock", "threads", "rows", "tokens",
"<variant>_s": ..., "<variant>_speedup": ...}``.

    python benchmarks/update_cost.py                           # tiny Qwen2
    python benchmarks/update_cost.py --model SmolLM2-135M-Instruct.Q4_1.gguf --prompts 2
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: variant -> its config overrides (over the common ones of :func:`_config`)
VARIANTS: dict[str, list[str]] = {
    "default": ["model.lora.dtype=float32", "loss.chunked_logprobs=false"],
    "chunked": ["model.lora.dtype=float32", "loss.chunked_logprobs=true"],
    "adapters": ["model.lora.dtype=model", "loss.chunked_logprobs=false"],
    "both": ["model.lora.dtype=model", "loss.chunked_logprobs=true"],
    "both-micro": ["model.lora.dtype=model", "loss.chunked_logprobs=true",
                   "loss.micro_batch_size=32"],
}

CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def _config(a: argparse.Namespace, out: Path, variant: str) -> Any:
    from bestk.train.config import TrainConfig
    from bestk.train.config.io import apply_overrides
    from bestk.train.validation import resolve_config
    from bf16 import model_overrides  # the same model, --model or the tiny default

    sets = [f"out={out}", "task.name=arithmetic", f"threads={a.threads}", "optim.lr=1e-5",
            "sft.steps=0", "model.dtype=bfloat16", f"model.lora.r={a.lora_r}",
            "model.lora.target_modules=all-linear", *VARIANTS[variant], *model_overrides(a)]
    return resolve_config(apply_overrides(TrainConfig(), sets))  # what a run checks and loads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="HF directory or .gguf (default: tiny Qwen2)")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    ap.add_argument("--no-entropy", action="store_true",
                    help="leave the token entropies out of the update (an hf rollout)")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help=f"comma-separated, of {', '.join(VARIANTS)} (default first)")
    a = ap.parse_args()
    names = a.variants.split(",")
    if names[0] != "default" or any(v not in VARIANTS for v in names):
        sys.exit(f"--variants: default first, then any of {', '.join(VARIANTS)}")

    import torch

    from bestk.train.model.logprobs import sequence_logprobs
    from bestk.train.optim import PolicyOptimizer
    from bestk.train.rollout.sampler import sample
    from bestk.train.setup import load_run_policy, load_run_task

    models = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            cfg = _config(a, Path(tmp) / name, name)
            task, device = load_run_task(cfg)
            m, tok = load_run_policy(cfg, task, device)
            models[name] = (m, PolicyOptimizer(m, cfg), cfg.loss.chunked_logprobs,
                             cfg.loss.micro_batch_size)
    prompts = [e["prompt"] for e in task.train[: a.prompts]]
    first = models[names[0]][0]
    with torch.no_grad():
        ro = sample(first, tok, prompts, n=a.n, max_new_tokens=a.tokens,
                    temperature=a.temperature, generator=torch.Generator().manual_seed(0))
    rows, lengths = ro.completion_ids.shape[0], ro.completion_mask.sum(1).float()
    adv = torch.linspace(-1.0, 1.0, rows)[:, None]
    clock = CLOCKS[a.clock]

    def update(name: str) -> float:
        m, opt, chunked, micro = models[name]
        m.train()
        t0 = clock()
        mask = ro.completion_mask.float()
        entropy = []

        def losses():  # each micro-batch's share of the batch's loss, computed when asked
            for s in range(0, rows, micro or rows):
                sl = slice(s, s + (micro or rows))
                lp, ent = sequence_logprobs(
                    m, ro.prompt_ids[sl], ro.prompt_mask[sl], ro.completion_ids[sl],
                    ro.completion_mask[sl], temperature=a.temperature,
                    with_entropy=not a.no_entropy, group_size=a.n, chunked=chunked)
                if ent is not None:
                    entropy.append(float((ent.detach() * mask[sl]).sum()))  # logged
                yield -(adv[sl] * lp * mask[sl]).sum() / mask.sum()

        opt.step(losses(), rl_step=1, rewards=None)
        return clock() - t0

    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(a.warmup + a.rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            t = update(name)
            print(f"round {r}{' (warm-up)' if r < a.warmup else ''} {name}: {t:.2f} s",
                  file=sys.stderr, flush=True)
            if r >= a.warmup:
                times[name].append(t)
    med = {n: statistics.median(v) for n, v in times.items()}
    what = a.model or f"tiny qwen2 (hidden {a.hidden}, {a.layers} layers)"
    print(f"{what}: one update of {rows} completions (lengths {lengths.mean():.1f} mean, "
          f"{int(lengths.max())} max; padded to {ro.completion_ids.shape[1]}), bfloat16, "
          f"LoRA r {a.lora_r}, entropies {'off' if a.no_entropy else 'on'}, "
          f"{a.threads} thread(s), {a.clock} time, median of {a.rounds} ({platform.machine()})")
    for n in names:
        print(f"  {n:10s} {med[n]:7.2f} s   x{med['default'] / med[n]:.2f}")
    print(json.dumps({"model": what, "clock": a.clock, "threads": a.threads, "rows": rows,
                      "tokens": ro.completion_ids.shape[1],
                      **{f"{n}_s": round(med[n], 3) for n in names},
                      **{f"{n}_speedup": round(med["default"] / med[n], 3) for n in names}}))


if __name__ == "__main__":
    main()
