"""float32 against bfloat16 weights on this CPU: one RL update step and the sampling of one
step's completions, side by side in one process.

The model is the tiny default architecture (Qwen2, char tokenizer of the ``arithmetic`` task)
at the size given (``--hidden 512 --layers 8`` by default), or ``--model`` (a Hugging Face
directory or a ``.gguf`` file, e.g. SmolLM2-135M-Instruct; the task's prompts through its chat
template). The bfloat16 variant is the float32 model rounded (``model.dtype: bfloat16``): the
same weights up to rounding.

Per round, each variant in turn (the order alternates every round):

* ``sample``: :func:`bestk.train.rollout.sampler.sample` (the ``hf`` rollout engine's loop) of
  ``--prompts`` prompts x ``--n`` completions of exactly ``--tokens`` tokens (no stop id), the
  prefill computing the last position's logits only where the variant trims
  (:func:`bestk.train.model.hf.logits_to_keep`);
* ``update``: one RL update step on a fixed rollout (the float32 variant's sample of round 0):
  :func:`bestk.train.model.logprobs.sequence_logprobs` (each prompt encoded once for its
  ``--n`` completions), a policy-gradient loss with fixed advantages, the backward pass and
  :meth:`bestk.train.optim.PolicyOptimizer.step` (AdamW; for bfloat16 through float32 master
  weights).

Times are process CPU time by default, torch on one thread (``--threads``): on a shared
machine, wall time mostly measures how long other jobs held the cores (``--clock wall`` gives
it). Each measurement is printed to stderr as it is taken. Reported: the median over
``--rounds`` rounds (after ``--warmup`` untimed ones) and the speed-up of each variant over
``float32``; the last line is JSON: ``{"model", "clock", "threads", "float32_sample_s",
"float32_update_s", "bfloat16_sample_s", "bfloat16_update_s", "sample_speedup",
"update_speedup"}``. ``--variants`` adds
``float32-trim`` (float32 with trimmed logits, which bestk does not do by default: it rounds
differently) and ``bfloat16-full`` (bfloat16 computing every position's logits).

    python benchmarks/bf16.py                             # tiny Qwen2, width 512, 8 layers
    python benchmarks/bf16.py --model DIR --prompts 2 --n 4  # e.g. SmolLM2-135M-Instruct
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: variant -> (model.dtype, trim_logits: None = bestk's default for that dtype)
VARIANTS: dict[str, tuple[str, bool | None]] = {
    "float32": ("float32", None),
    "bfloat16": ("bfloat16", None),
    "float32-trim": ("float32", True),
    "bfloat16-full": ("bfloat16", False),
}


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def _config(a: argparse.Namespace, out: Path) -> Any:
    from bestk.train.config import TrainConfig
    from bestk.train.config.io import apply_overrides
    from bestk.train.validation import resolve_config

    sets = [f"out={out}", "task.name=arithmetic", f"threads={a.threads}", "optim.lr=1e-5",
            "optim.weight_decay=0.01", *model_overrides(a)]
    return resolve_config(apply_overrides(TrainConfig(), sets))  # what a run checks and loads


def model_overrides(a: argparse.Namespace) -> list[str]:
    """The ``model.*`` overrides of ``--model`` (a path), else of the tiny default
    architecture at ``--hidden`` / ``--layers`` / ``--heads`` (also benchmarks/update_cost.py's)."""
    if a.model:
        return [f"model.path={a.model}"]
    return [f"model.hidden_size={a.hidden}", f"model.num_layers={a.layers}",
            f"model.num_heads={a.heads}", f"model.intermediate_size={4 * a.hidden}",
            "model.max_positions=256"]


def _no_stop(model: Any, tokenizer: Any) -> list[int]:
    return [-1]  # no token has id -1: every completion runs to --tokens tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="HF directory or .gguf (default: tiny Qwen2)")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    ap.add_argument("--variants", default="float32,bfloat16",
                    help=f"comma-separated, of {', '.join(VARIANTS)}")
    a = ap.parse_args()
    names = a.variants.split(",")
    if "float32" not in names or any(v not in VARIANTS for v in names):
        sys.exit(f"--variants: float32 and any of {', '.join(VARIANTS)}")

    import torch

    import bestk.train.rollout.sampler as sampler
    from bestk.train.model.logprobs import sequence_logprobs
    from bestk.train.optim import PolicyOptimizer
    from bestk.train.setup import load_run_policy, load_run_task

    sampler.stop_token_ids = _no_stop  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = _config(a, Path(tmp) / "run")
        task, device = load_run_task(cfg)
        base, tok = load_run_policy(cfg, task, device)
    prompts = [e["prompt"] for e in task.train[: a.prompts]]
    models = {}
    for name in names:
        dtype = torch.bfloat16 if VARIANTS[name][0] == "bfloat16" else torch.float32
        m = copy.deepcopy(base).to(dtype)
        models[name] = (m, PolicyOptimizer(m, cfg), VARIANTS[name][1])
    params = sum(p.numel() for p in base.parameters())
    del base

    def draw(name: str, seed: int) -> Any:
        m, _, trim = models[name]
        return sampler.sample(m, tok, prompts, n=a.n, max_new_tokens=a.tokens,
                              generator=torch.Generator().manual_seed(seed), trim_logits=trim)

    rollout = draw("float32", 0)
    assert rollout.completion_ids.shape[1] == a.tokens
    adv = torch.linspace(-1.0, 1.0, rollout.completion_ids.shape[0])[:, None]

    def update(name: str) -> None:
        m, opt, trim = models[name]
        m.train()
        lp, _ = sequence_logprobs(m, rollout.prompt_ids, rollout.prompt_mask,
                                  rollout.completion_ids, rollout.completion_mask,
                                  group_size=a.n, trim_logits=trim)
        mask = rollout.completion_mask.to(lp.dtype)
        loss = -(adv * lp * mask).sum() / mask.sum()
        opt.step(loss, rl_step=1, rewards=None)

    times: dict[str, dict[str, list[float]]] = {n: {"sample": [], "update": []} for n in names}
    clock = CLOCKS[a.clock]
    for r in range(a.warmup + a.rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            t0 = clock()
            draw(name, r)
            t1 = clock()
            update(name)
            t2 = clock()
            if r >= a.warmup:
                times[name]["sample"].append(t1 - t0)
                times[name]["update"].append(t2 - t1)
            print(f"round {r}{' (warm-up)' if r < a.warmup else ''}: {name} sample "
                  f"{t1 - t0:.3f} s, update {t2 - t1:.3f} s", file=sys.stderr, flush=True)
    med = {n: {k: statistics.median(v) for k, v in t.items()} for n, t in times.items()}
    label = a.model or f"tiny qwen2 hidden={a.hidden} layers={a.layers} heads={a.heads}"
    B = a.prompts * a.n
    print(f"# {label}: {params / 1e6:.1f}M parameters, vocab {len(tok)}; {a.prompts} prompts x "
          f"{a.n} completions x {a.tokens} tokens; torch {torch.__version__}, {a.threads} "
          f"thread(s), {platform.machine()}; {a.clock} time, median of {a.rounds} rounds, "
          "alternating")
    print("| variant | sample s | tokens/s | update s | sample speed-up | update speed-up |")
    print("|---|---:|---:|---:|---:|---:|")
    f32 = med["float32"]
    for name in names:
        s, u = med[name]["sample"], med[name]["update"]
        print(f"| {name} | {s:.3f} | {B * a.tokens / s:.0f} | {u:.3f} | "
              f"{f32['sample'] / s:.2f}x | {f32['update'] / u:.2f}x |")
    summary: dict[str, Any] = {"model": label, "clock": a.clock, "threads": a.threads}
    for name in names:
        key = name.replace("-", "_")
        summary[f"{key}_sample_s"] = round(med[name]["sample"], 4)
        summary[f"{key}_update_s"] = round(med[name]["update"], 4)
    if "bfloat16" in med:
        summary["sample_speedup"] = round(f32["sample"] / med["bfloat16"]["sample"], 3)
        summary["update_speedup"] = round(f32["update"] / med["bfloat16"]["update"], 3)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
