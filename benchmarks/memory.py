"""Peak memory of one RL update of a real model: bestk's, with and without its memory savers,
and TRL's ``GRPOTrainer`` step.

Each measurement runs in a fresh Python process (so nothing of one leaks into another). The
process loads the model (``--model``: a Hugging Face directory or a ``.gguf`` file, through
:func:`bestk.train.policy.load_policy`), then resets the kernel's peak-RSS counter
(``/proc/self/clear_refs``; on CUDA ``torch.cuda.reset_peak_memory_stats``) and runs one step:

* ``bestk`` - one policy-gradient update as ``bestk train`` (``algorithm: pg``) does it:
  ``--batch`` completions of exactly ``--tokens`` tokens after ``--prompt-tokens`` prompt
  tokens (seeded random ids: the update's memory does not depend on the text), forward with
  gradients, PPO-clip loss (token-mean), backward, AdamW step; ``--logprobs naive`` is
  today's :func:`bestk.train.rollout.sequence_logprobs` (float32 ``(B, T, V)`` logits; each
  prompt encoded once for its ``--n`` completions), ``naive-unshared`` the same with one
  forward over prompt + completion per row, ``chunked`` that one-pass forward with
  :func:`bestk.losses.chunked_token_logprobs` (compare it with ``naive-unshared``: the same
  forward, only the log-prob computation differs);
  ``--micro-batch M`` accumulates the gradient over micro-batches of ``M`` completions;
  ``--gradient-checkpointing`` (:func:`bestk.train.hf.enable_gradient_checkpointing`).
* ``trl`` - one ``GRPOTrainer`` step (generation of ``--batch`` completions forced to
  ``--tokens`` tokens with ``min_new_tokens``, a constant reward, the update), ``beta = 0``,
  ``per_device_train_batch_size = --batch``.

Reported: resident memory after loading (``base``), the step's peak (``peak``) and their
difference (``step``), in MiB; peak CUDA memory on a GPU.

    python benchmarks/memory.py --model PATH [--json]                  # every variant
    python benchmarks/memory.py --model PATH --only bestk-chunked --batch 16 --tokens 64
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: The variants measured by default: name -> options of the child process.
VARIANTS: dict[str, dict[str, Any]] = {
    "bestk-naive": {"trainer": "bestk", "logprobs": "naive"},
    "bestk-naive-unshared": {"trainer": "bestk", "logprobs": "naive-unshared"},
    "bestk-chunked": {"trainer": "bestk", "logprobs": "chunked"},
    "bestk-chunked-micro4": {"trainer": "bestk", "logprobs": "chunked", "micro_batch": 4},
    "bestk-chunked-ckpt": {"trainer": "bestk", "logprobs": "chunked", "checkpointing": True},
    "trl": {"trainer": "trl"},
}


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak(device: Any) -> None:
    import torch

    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def _bestk_step(model: Any, a: argparse.Namespace, device: Any) -> dict[str, Any]:
    import torch

    from bestk.losses import chunked_token_logprobs, ppo_clip_loss
    from bestk.train.rollout import sequence_logprobs

    B, P, T = a.batch, a.prompt_tokens, a.tokens
    g = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size if not hasattr(model, "get_base_model") else \
        model.get_base_model().config.vocab_size
    prompt = torch.randint(0, vocab, (B // a.n, P), generator=g).repeat_interleave(a.n, 0)
    completion = torch.randint(0, vocab, (B, T), generator=g)
    prompt, completion = prompt.to(device), completion.to(device)
    pmask, cmask = torch.ones_like(prompt), torch.ones_like(completion)
    adv = torch.randn(B, generator=g).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-6)
    model.train()
    micro = a.micro_batch or B
    t0 = time.perf_counter()
    _reset_peak(device)
    opt.zero_grad(set_to_none=True)
    total = 0.0
    for start in range(0, B, micro):
        sl = slice(start, min(B, start + micro))
        if a.logprobs.startswith("naive"):
            shared = a.n if a.logprobs == "naive" else 1
            logp, _ = sequence_logprobs(model, prompt[sl], pmask[sl], completion[sl],
                                        cmask[sl], group_size=shared)
        else:
            ids = torch.cat([prompt[sl], completion[sl]], 1)
            logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
            logp, _ = chunked_token_logprobs(logits[:, P - 1:-1], completion[sl],
                                             chunk_tokens=a.chunk_tokens or None)
            del logits
        loss, _ = ppo_clip_loss(logp, logp.detach(), adv[sl], cmask[sl],
                                num_tokens=B * T, num_seqs=B)
        loss.backward()
        total += loss.item()
        del logp, loss
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return {"seconds": time.perf_counter() - t0, "loss": total}


def _trl_step(model: Any, tok: Any, a: argparse.Namespace, device: Any, out: Path) -> dict:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    prompts = [f"Write a story about the number {i}." for i in range(a.batch // a.n)]
    ds = Dataset.from_list([{"prompt": p} for p in prompts])
    peft_config = None
    if a.lora:
        import peft

        peft_config = peft.LoraConfig(r=a.lora, lora_alpha=2 * a.lora, task_type="CAUSAL_LM",
                                      target_modules="all-linear")
    args = GRPOConfig(
        output_dir=str(out), per_device_train_batch_size=a.batch, num_generations=a.n,
        steps_per_generation=1, gradient_accumulation_steps=1,
        max_completion_length=a.tokens, generation_kwargs={"min_new_tokens": a.tokens},
        temperature=1.0, learning_rate=1e-6, max_steps=1, logging_steps=1000,
        save_strategy="no", report_to="none", use_cpu=device.type == "cpu",
        gradient_checkpointing=False, bf16=False, beta=0.0, dataloader_num_workers=0,
        disable_tqdm=True, seed=0,
    )

    def reward(completions, **_):
        return [float(len(c)) for c in completions]

    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=ds,
                          processing_class=tok, peft_config=peft_config)
    t0 = time.perf_counter()
    _reset_peak(device)
    trainer.train()
    return {"seconds": time.perf_counter() - t0}


def child(a: argparse.Namespace) -> dict[str, Any]:
    """Load, reset the peak, run one step; the measurement as a dict."""
    import torch

    from bestk.train.config import LoRAConfig, ModelConfig
    from bestk.train.hf import enable_gradient_checkpointing
    from bestk.train.policy import load_policy

    torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    lora = LoRAConfig(r=a.lora, target_modules="all-linear") if a.lora and \
        a.trainer == "bestk" else LoRAConfig()
    model, tok = load_policy(ModelConfig(path=a.model, dtype=a.dtype, lora=lora), None)
    model.to(device)
    if a.checkpointing:
        enable_gradient_checkpointing(model)
    base_kib = _status_kib("VmRSS")
    if a.trainer == "bestk":
        res = _bestk_step(model, a, device)
    else:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            res = _trl_step(model, tok, a, device, Path(tmp))
    peak_kib = _status_kib("VmHWM")
    res.update(base_mib=base_kib / 1024, peak_mib=peak_kib / 1024,
               step_mib=(peak_kib - base_kib) / 1024)
    if device.type == "cuda":
        res["cuda_peak_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
    return res


def _child_args(a: argparse.Namespace, opts: dict[str, Any]) -> list[str]:
    args = [sys.executable, __file__, "--child", "--model", a.model, "--batch", str(a.batch),
            "--n", str(a.n), "--tokens", str(a.tokens), "--prompt-tokens", str(a.prompt_tokens),
            "--threads", str(a.threads), "--device", a.device, "--dtype", a.dtype,
            "--lora", str(a.lora), "--chunk-tokens", str(a.chunk_tokens),
            "--trainer", opts["trainer"], "--logprobs", opts.get("logprobs", "naive")]
    if opts.get("micro_batch"):
        args += ["--micro-batch", str(opts["micro_batch"])]
    if opts.get("checkpointing"):
        args.append("--gradient-checkpointing")
    return args


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="HF model directory or .gguf file")
    ap.add_argument("--batch", type=int, default=16, help="completions per step")
    ap.add_argument("--n", type=int, default=8, help="completions per prompt")
    ap.add_argument("--tokens", type=int, default=64, help="tokens per completion")
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--lora", type=int, default=0, help="LoRA rank (0: full fine-tune)")
    ap.add_argument("--chunk-tokens", type=int, default=0,
                    help="positions per chunk of the chunked log-probs (0: its default)")
    ap.add_argument("--only", default=None, help="comma-separated variants: " +
                    ", ".join(VARIANTS))
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--trainer", default="bestk", choices=["bestk", "trl"],
                    help=argparse.SUPPRESS)
    ap.add_argument("--logprobs", default="naive",
                    choices=["naive", "naive-unshared", "chunked"],
                    help=argparse.SUPPRESS)
    ap.add_argument("--micro-batch", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--gradient-checkpointing", dest="checkpointing", action="store_true",
                    help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.batch % a.n:
        ap.error(f"--batch ({a.batch}) must be a multiple of --n ({a.n})")
    if a.child:
        print(json.dumps(child(a)))
        return
    names = a.only.split(",") if a.only else list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        ap.error(f"unknown variant(s) {unknown}; valid: {', '.join(VARIANTS)}")
    results: dict[str, Any] = {}
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    for name in names:
        proc = subprocess.run(_child_args(a, VARIANTS[name]), capture_output=True, text=True,
                              env=env)
        if proc.returncode:
            last = (proc.stderr.strip().splitlines() or ["?"])[-1]
            results[name] = {"error": last}
        else:
            results[name] = json.loads(proc.stdout.strip().splitlines()[-1])
        if not a.json:
            print(name, results[name], file=sys.stderr)
    setup = {k: getattr(a, k) for k in ("model", "batch", "n", "tokens", "prompt_tokens",
                                        "threads", "device", "dtype", "lora")}
    if a.json:
        print(json.dumps({"setup": setup, "results": results}, indent=1))
        return
    print(f"{Path(a.model).name}: {a.batch} completions x {a.tokens} tokens "
          f"(+{a.prompt_tokens} prompt), {a.dtype}, lora r={a.lora}, {a.device}")
    print("| variant | base MiB | peak MiB | step MiB | s |")
    print("|---|---|---|---|---|")
    for name, r in results.items():
        if "error" in r:
            print(f"| {name} | error: {r['error']} | | | |")
        else:
            print(f"| {name} | {r['base_mib']:.0f} | {r['peak_mib']:.0f} | "
                  f"{r['step_mib']:.0f} | {r['seconds']:.1f} |")


if __name__ == "__main__":
    main()
