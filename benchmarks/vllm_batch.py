"""Sampling throughput of the vllm engine against how many sequences it decodes at once.

    python benchmarks/vllm_batch.py --model SmolLM2-135M-Instruct.Q4_1.gguf \\
        [--setting 64:0.5 --setting 256:0.5 --setting 1024:4] [--prompts 16] [--n 32]

Each ``--setting SEQS:GIB`` (``vllm.max_num_seqs`` : ``vllm.kv_cache_gb``) runs in a process
of its own (one engine per process, as in a run): the model is loaded, the engine built
(compiled), one small warm-up batch sampled, then ``--prompts`` held-out prompts of the
pretrained testbed's task x ``--n`` samples (temperature 0.7, at most ``--max-new-tokens``
tokens) are generated and timed, the policy's log-prob pass left out (only generation is
timed). Prints one JSON line per setting: sequences, generated tokens, seconds, tokens/s.
Run it on an otherwise idle machine and compare the settings of one invocation only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

TASK = {"digits": 2, "b_digits": 1, "ops": "+-", "num_eval": 512,
        "format": "Calculate {x} {op} {y}. Give only the final answer as a number."}


def one(a: argparse.Namespace, seqs: int, kv: float) -> dict[str, float]:
    """Time one setting in this process."""
    import torch

    from bestk.tasks import load_task
    from bestk.train.config import TrainConfig
    from bestk.train.config.io import apply_overrides
    from bestk.train.model.chat import render_task_prompts
    from bestk.train.model.policy import load_policy
    from bestk.train.rollout.engine import open_engines
    from bestk.train.validation import resolve_config

    torch.set_num_threads(a.threads)
    cfg = resolve_config(apply_overrides(TrainConfig(), [
        f"model.path={a.model}", f"threads={a.threads}", "task.name=arithmetic",
        "eval.engine=vllm", "rollout.engine=vllm", "vllm.dtype=bfloat16",
        "eval.temperature=0.7", "eval.top_p=1.0", "eval.top_k=0",
        f"rollout.max_new_tokens={a.max_new_tokens}", f"vllm.kv_cache_gb={kv}",
        f"vllm.max_num_seqs={seqs}"]))
    model, tok = load_policy(cfg.model, None)
    engines = open_engines(cfg, model, tok, a.max_new_tokens)
    try:
        task = load_task("arithmetic", TASK, seed=0, reward="arithmetic_last")
        render_task_prompts(task, tok, "auto")
        prompts = [e["prompt"] for e in task.eval[: a.prompts]]
        gen = torch.Generator().manual_seed(0)
        eng = engines.eval
        eng.sync()
        eng.sample(prompts[:4], n=4, max_new_tokens=a.max_new_tokens, generator=gen,
                   defer_policy_pass=True)  # warm-up
        t0 = time.perf_counter()
        ro = eng.sample(prompts, n=a.n, max_new_tokens=a.max_new_tokens, generator=gen,
                        defer_policy_pass=True)
        dt = time.perf_counter() - t0
    finally:
        engines.close()
    toks = float(ro.completion_mask.sum())
    return {"max_num_seqs": seqs, "kv_cache_gb": kv, "sequences": len(prompts) * a.n,
            "tokens": toks, "seconds": round(dt, 2), "tokens_per_s": round(toks / dt, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="the model (HF directory or .gguf)")
    ap.add_argument("--setting", action="append", default=None,
                    help="SEQS:GIB = vllm.max_num_seqs:vllm.kv_cache_gb (repeat)")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child is not None:
        seqs, kv = a.child.split(":")
        print(json.dumps(one(a, int(seqs), float(kv))), flush=True)
        return
    for setting in a.setting or ["64:0.5", "256:0.5", "1024:4"]:
        try:
            seqs, kv = setting.split(":")
            int(seqs), float(kv)
        except ValueError:
            ap.error(f"--setting {setting!r}: expected SEQS:GIB, e.g. 1024:4")
        args = [sys.executable, __file__, "--child", setting, "--model", a.model,
                "--prompts", str(a.prompts), "--n", str(a.n),
                "--max-new-tokens", str(a.max_new_tokens), "--threads", str(a.threads)]
        env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
        out = subprocess.run(args, env=env, capture_output=True, text=True)
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        if out.returncode != 0 or not lines:
            raise SystemExit(f"setting {setting} failed:\n{out.stderr[-2000:]}")
        print(lines[-1], flush=True)


if __name__ == "__main__":
    main()
