"""Benchmark ``bestk calibrate`` on a generated reference bank (target: < 10 s end to end).

Generates a bank of P prompts x M reference rewards (default 10,000 x 30) as JSONL, in both row
formats (one ``"reward"`` per row, i.e. 300,000 rows, and one ``"rewards"`` list per prompt),
then times the real command line (``python -m bestk calibrate ...`` in a subprocess, so import
and start-up are included) for the binary and the win-rate calibration.

    python benchmarks/calibrate.py                # 10,000 x 30, all four combinations
    python benchmarks/calibrate.py --prompts 1000 # smaller
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TARGET_S = 10.0


def write_bank(path: Path, P: int, M: int, kind: str, per_row: bool, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    if kind == "binary":
        p = rng.beta(0.5, 0.5, size=(P, 1))
        vals = (rng.random((P, M)) < p).astype(int)
    else:
        vals = rng.normal(rng.normal(size=(P, 1)), 1.0, size=(P, M)).round(4)
    with path.open("w") as f:
        for i in range(P):
            pid = f"prompt-{i:06d}"
            if per_row:
                f.writelines(
                    json.dumps({"prompt_id": pid, "reward": v}) + "\n" for v in vals[i].tolist()
                )
            else:
                f.write(json.dumps({"prompt_id": pid, "rewards": vals[i].tolist()}) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=10_000)
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--beta", type=float, default=0.1)
    args = ap.parse_args()

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for kind in ("binary", "winrate"):
            for per_row in (True, False):
                bank = tmp / f"bank-{kind}-{'rows' if per_row else 'lists'}.jsonl"
                write_bank(bank, args.prompts, args.samples, kind, per_row)
                out = tmp / f"cal-{kind}.json"
                cmd = [
                    sys.executable, "-m", "bestk", "calibrate", str(bank), "--k", str(args.k),
                    "--beta", str(args.beta), "--kind", kind, "-o", str(out),
                ]
                t0 = time.perf_counter()
                proc = subprocess.run(cmd, capture_output=True, text=True)
                elapsed = time.perf_counter() - t0
                if proc.returncode != 0:
                    print(proc.stdout, proc.stderr, file=sys.stderr)
                    return 1
                rows = sum(1 for _ in bank.open())
                results.append((kind, "reward per row" if per_row else "rewards list", rows,
                                elapsed, bank.stat().st_size / 1e6))
    print(f"bestk calibrate: {args.prompts:,} prompts x {args.samples} rewards, "
          f"k={args.k}, beta={args.beta} (wall time incl. interpreter start-up)")
    print(f"{'kind':8s} {'row format':15s} {'rows':>9s} {'MB':>6s} {'seconds':>8s}  target")
    ok = True
    for kind, fmt, rows, sec, mb in results:
        passed = sec < TARGET_S
        ok &= passed
        print(f"{kind:8s} {fmt:15s} {rows:9,d} {mb:6.1f} {sec:8.2f}  "
              f"{'< 10 s OK' if passed else '>= 10 s FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
