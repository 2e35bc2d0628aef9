"""Start-up time of ``bestk --help`` and of every subcommand's ``--help``, side by side with
``python -c "import typer, rich"`` (the issue's yardstick) and a minimal two-command typer app
(the floor of any typer CLI with subcommands).

Each command runs ``--repeats`` times, interleaved round-robin so that load on a shared machine
hits every command alike; we report the median wall time, its ratio to ``import typer, rich``,
and whether the process imported torch (``-X importtime``).

    python benchmarks/cli_startup.py [--repeats 9]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUBCOMMANDS = [
    [], ["estimators"], ["train"], ["eval"], ["compare"], ["calibrate"], ["lab"],
    ["lab", "bandit"], ["lab", "digits"], ["lab", "sparse"], ["lab", "kappo"], ["plot"],
    ["plot", "weights"],
]

MINIMAL_APP = '''
import typer
app = typer.Typer(rich_markup_mode=None)
@app.command()
def hello(name: str = typer.Option("x", "--name", help="who")) -> None:
    """Say hello."""
@app.command()
def bye() -> None:
    """Say bye."""
app()
'''


def _time(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _imports_torch(cmd: list[str], env: dict[str, str]) -> bool:
    res = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], env=env, check=True,
                         capture_output=True, text=True)
    return any(line.rstrip().endswith("| torch") for line in res.stderr.splitlines())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    env = dict(os.environ)
    src = Path(__file__).resolve().parents[1] / "src"
    env["PYTHONPATH"] = f"{src}{os.pathsep}{env.get('PYTHONPATH', '')}"
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        app = Path(tmp) / "minimal_typer_app.py"
        app.write_text(MINIMAL_APP)
        cases = {
            'python -c "pass"': [py, "-c", "pass"],
            'python -c "import typer, rich"': [py, "-c", "import typer, rich"],
            "minimal typer app --help": [py, str(app), "--help"],
            "minimal typer app hello --help": [py, str(app), "hello", "--help"],
        }
        for sub in SUBCOMMANDS:
            cases[" ".join(["bestk", *sub, "--help"])] = [py, "-m", "bestk", *sub, "--help"]
        times: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(args.repeats):
            for name, cmd in cases.items():
                times[name].append(_time(cmd, env))
        base = statistics.median(times['python -c "import typer, rich"'])
        print(f"median of {args.repeats} runs each, interleaved; python {sys.version.split()[0]}")
        print(f"{'command':44s} {'median s':>9s} {'/ typer,rich':>13s}  imports torch")
        for name, cmd in cases.items():
            med = statistics.median(times[name])
            torch_flag = "yes" if _imports_torch(cmd, env) else "no"
            print(f"{name:44s} {med:9.3f} {med / base:13.2f}  {torch_flag}")


if __name__ == "__main__":
    main()
