"""What sharing the KAPPO reference bank saves: one run that samples its own bank against the
same run reading it from ``kappo.bank`` (what ``bestk compare`` does for every KAPPO run of a
seed), side by side in one process.

    python benchmarks/kappo_bank.py                      # the language-permute-kappo settings
    python benchmarks/kappo_bank.py --algorithm dpo      # @k-DPO (the bank keeps completions)
    python benchmarks/kappo_bank.py --steps 20 --bank-prompts 512   # quicker

Prints the wall time of each run, the bank's share of the unshared run, and checks that both
runs logged the same training steps (the bank is the same, so the run is the same).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import torch

from bestk.train.config import TrainConfig
from bestk.train.config.io import apply_overrides
from bestk.train.run.directory import read_metrics
from bestk.train.trainer import Trainer

#: The task, RL and KAPPO settings of the ``language-permute-kappo`` testbed (make_results).
BASE = ["task.name=permute",
        "task.options={min_len: 4, max_len: 8, num_train: 2048, graded: false}",
        "rollout.prompts_per_step=32", "eval.n=64", "checkpoint_every=1000", "threads=1",
        "kappo.beta=0.1", "kappo.bank_size=30", "kappo.kind=binary"]
def is_timing(key: str) -> bool:
    """A metric of time or speed (what two identical runs may differ in)."""
    return key.startswith("time") or key in ("completions_per_s", "pairs_per_s")


def _run(out: Path, overrides: list[str], sft: dict | None) -> tuple[Trainer, float]:
    cfg = TrainConfig()
    apply_overrides(cfg, [*overrides, f"out={out}"])
    t0 = time.perf_counter()
    tr = Trainer(cfg, resume="new", warm_start=sft)
    tr.run(progress=False)
    return tr, time.perf_counter() - t0


def _train_rows(out: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not is_timing(k)}
            for r in read_metrics(out / "metrics.jsonl") if r["phase"] == "train"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algorithm", choices=("apo", "dpo"), default="apo")
    ap.add_argument("--steps", type=int, default=80, help="RL steps per run")
    ap.add_argument("--bank-prompts", default="null",
                    help="kappo.bank_prompts (default null: every training prompt)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    over = [*BASE, f"algorithm={args.algorithm}", f"max_steps={args.steps}",
            f"eval.every={args.steps}", f"kappo.bank_prompts={args.bank_prompts}"]
    tmp = Path(tempfile.mkdtemp(prefix="kappo_bank_"))
    try:
        cfg = TrainConfig()
        apply_overrides(cfg, [*over, f"out={tmp / 'sft'}"])
        tr = Trainer(cfg, resume="new")
        t0 = time.perf_counter()
        tr.sft()
        t_sft = time.perf_counter() - t0
        sft = {k: v.detach().clone() for k, v in tr.model.state_dict().items()}
        tr.close()
        own, t_own = _run(tmp / "own", over, sft)
        bank = tmp / "bank"
        shutil.copytree(own.out, bank, ignore=shutil.ignore_patterns("checkpoints", "final"))
        shared, t_shared = _run(tmp / "shared", [*over, f"kappo.bank={bank}"], sft)
        same = _train_rows(own.out) == _train_rows(shared.out)
        k = own.cfg.kappo
        prompts = own.calibration.num_prompts
        print(f"algorithm={args.algorithm} steps={args.steps} bank: {prompts} prompts x "
              f"{k.bank_size} = {prompts * k.bank_size:,} samples (SFT {t_sft:.0f} s, not "
              "counted)")
        print(f"  run sampling its own bank:   {t_own:7.1f} s")
        print(f"  run given the bank:          {t_shared:7.1f} s")
        print(f"  bank share of the own run:   {(t_own - t_shared) / t_own:7.1%}  "
              f"(ratio {t_own / t_shared:.2f}x)")
        print(f"  same training steps:         {same}")
        return 0 if same else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
