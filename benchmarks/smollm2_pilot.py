"""Choose the pretrained testbed's task: the base SmolLM2-135M-Instruct on candidate tasks.

    python benchmarks/smollm2_pilot.py --model SmolLM2-135M-Instruct.Q4_1.gguf \\
        --candidate "add2|arithmetic|{digits: 2, ops: '+', num_eval: 1024}" \\
        --prompts 512 --n 32 [--system "Reply with the number only."] [--temperature 1.0]

Each ``--candidate`` is ``name|task|options`` (options as YAML, the ``task.options`` of
``bestk train``), optionally ``|reward`` (``task.reward``). The model is loaded once and one
rollout engine (``--engine``: vLLM by default, bfloat16, compiled) evaluates every candidate
on the first ``--prompts`` held-out prompts of its task in the model's chat template, ``--n``
samples each, at ``--temperature`` (top-p 1, no top-k), at most ``--max-new-tokens`` tokens:
unbiased pass@k for k = 1..n, distinct answers per prompt and token entropy
(:func:`bestk.train.rollout.evaluate.evaluate`).

The testbed needs a task where the base model's held-out pass@1 lies in [0.1, 0.5] (room to
sharpen, and a reward that is not all zero) and its pass@16 is at most 0.9 (room for pass@k to
move); the record says for each candidate whether it qualifies (``qualifies``).

``--entropy-samples M`` measures the token entropy on the first ``M`` samples of each prompt
only (``eval.entropy_samples``): with vLLM the entropies come from a forward of the policy
after sampling, most of the time otherwise.

``--samples-out FILE`` (one candidate) also writes every sample's 0/1 success and length in
tokens, ``(prompts, n)`` each, with the run's settings: the data of the training-free
gradient-allocation check (``benchmarks/smollm2_allocation.py``).

Results merge into ``--out`` (default ``docs/results/data/pilots/smollm2-base.json``), keyed
by candidate, temperature, system prompt, prompts and samples, atomically, with the commit
that ran them; a candidate already there is not re-run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "docs" / "results" / "data" / "pilots" / "smollm2-base.json"
#: The testbed's window for the base model (issue: pass@1 in [0.1, 0.5], pass@16 <= 0.9).
PASS1_RANGE = (0.1, 0.5)
PASS16_MAX = 0.9
#: The pass@k kept in the record.
KEEP_KS = (1, 2, 4, 8, 16, 32)


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def parse_candidate(text: str) -> dict[str, Any]:
    """``name|task|options[|reward]`` -> its parts (options parsed as YAML)."""
    import yaml

    parts = text.split("|")
    if len(parts) not in (3, 4) or not all(p.strip() for p in parts[:2]):
        raise ValueError(f"--candidate {text!r}: expected name|task|options[|reward]")
    options = yaml.safe_load(parts[2]) or {}
    if not isinstance(options, dict):
        raise ValueError(f"--candidate {text!r}: options must be a YAML mapping")
    return {"name": parts[0].strip(), "task": parts[1].strip(), "options": options,
            "reward": parts[3].strip() if len(parts) == 4 and parts[3].strip() else None}


def qualifies(metrics: dict[str, float]) -> bool:
    """Whether a base model's record fits the testbed's window (module docstring)."""
    lo, hi = PASS1_RANGE
    return lo <= metrics["pass@1"] <= hi and metrics["pass@16"] <= PASS16_MAX


def key(c: dict[str, Any], a: argparse.Namespace) -> str:
    settings = {"candidate": c, "temperature": a.temperature, "system": a.system,
                "prompts": a.prompts, "n": a.n, "max_new_tokens": a.max_new_tokens}
    if getattr(a, "entropy_samples", None) is not None:  # keys of earlier records stay valid
        settings["entropy_samples"] = a.entropy_samples
    return json.dumps(settings, sort_keys=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="the base model (HF directory or .gguf)")
    ap.add_argument("--candidate", action="append", required=True,
                    help="name|task|options[|reward] (repeat)")
    ap.add_argument("--prompts", type=int, default=512, help="held-out prompts per candidate")
    ap.add_argument("--n", type=int, default=32, help="samples per prompt")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--max-new-tokens", type=int, default=12)
    ap.add_argument("--system", default=None, help="system prompt (task.system_prompt)")
    ap.add_argument("--engine", default="vllm", choices=["hf", "vllm"])
    ap.add_argument("--entropy-samples", type=int, default=None,
                    help="measure token entropy on the first this many samples of each prompt "
                         "(eval.entropy_samples; default all: with vllm most of the time)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--samples-out", type=Path, default=None,
                    help="(one candidate) every sample's success and length, as JSON")
    a = ap.parse_args()
    if a.n < 16:
        ap.error("--n must be >= 16 (the window reads pass@16)")
    cands = [parse_candidate(c) for c in a.candidate]
    if a.samples_out is not None and len(cands) != 1:
        ap.error("--samples-out takes exactly one --candidate")

    import torch

    from bestk.lab.common.io import write_text_atomic
    from bestk.tasks import load_task
    from bestk.train.config import TrainConfig
    from bestk.train.config.io import apply_overrides
    from bestk.train.model.chat import render_task_prompts
    from bestk.train.model.policy import load_policy
    from bestk.train.rollout.engine import open_engines
    from bestk.train.rollout.evaluate import evaluate
    from bestk.train.validation import resolve_config

    torch.set_num_threads(a.threads)
    commit = _commit()  # the code this process runs (HEAD may move while it runs)
    record: dict[str, Any] = json.loads(a.out.read_text()) if a.out.is_file() else {}
    todo = [c for c in cands if key(c, a) not in record or a.samples_out is not None]
    if not todo:
        print("every candidate is already in", a.out)
        return
    cfg = resolve_config(apply_overrides(TrainConfig(), [
        f"model.path={a.model}", f"threads={a.threads}", "task.name=arithmetic",
        f"eval.engine={a.engine}", f"rollout.engine={a.engine}", "vllm.dtype=bfloat16",
        f"eval.temperature={a.temperature}", "eval.top_p=1.0", "eval.top_k=0",
        f"rollout.max_new_tokens={a.max_new_tokens}", "vllm.kv_cache_gb=0.5",
    ]))
    model, tok = load_policy(cfg.model, None)
    engines = open_engines(cfg, model, tok, a.max_new_tokens)
    try:
        for c in todo:
            task = load_task(c["task"], c["options"], seed=0, reward=c["reward"],
                             system_prompt=a.system)
            render_task_prompts(task, tok, "auto")
            examples = task.eval[: a.prompts]
            if len(examples) < a.prompts:
                raise ValueError(f"candidate {c['name']}: {len(examples)} held-out prompts, "
                                 f"fewer than --prompts {a.prompts}")
            t0 = time.perf_counter()
            res = evaluate(engines.eval, task, examples, n=a.n, max_new_tokens=a.max_new_tokens,
                           seed=0, entropy_samples=a.entropy_samples)
            m = res.metrics
            row = {k: m[k] for k in (*(f"pass@{k}" for k in KEEP_KS if k <= a.n),
                                     "distinct", "entropy", "response_len", "reward_mean")}
            row.update({"qualifies": qualifies(m), "seconds": time.perf_counter() - t0,
                        "commit": commit, "examples": [
                            {"prompt": e["prompt"][-40:], "answer": e["answer"],
                             "samples": res.texts[i * a.n: i * a.n + 3]}
                            for i, e in enumerate(examples[:3])]})
            record[key(c, a)] = row
            write_text_atomic(a.out, json.dumps(record, indent=1, sort_keys=True) + "\n")
            if a.samples_out is not None:
                write_text_atomic(a.samples_out, json.dumps({
                    "model": Path(a.model).name, "candidate": c, "temperature": a.temperature,
                    "system": a.system, "max_new_tokens": a.max_new_tokens, "seed": 0,
                    "commit": row["commit"], "seconds": row["seconds"],
                    "success": task.success(res.rewards).astype(int).tolist(),
                    "tokens": res.lengths.astype(int).tolist()}) + "\n")
            print(f"{c['name']}: pass@1={row['pass@1']:.3f} pass@16={row['pass@16']:.3f} "
                  f"distinct={row['distinct']:.2f} entropy={row['entropy']:.2f} "
                  f"qualifies={row['qualifies']} ({row['seconds']:.0f} s)", flush=True)
    finally:
        engines.close()


if __name__ == "__main__":
    main()
