"""``bestk compare`` (see ``docs/training.md``, "Comparing estimators").

Heavy imports happen inside the command body so ``bestk --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from bestk._typer import cli_errors, fail, out_directory

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from bestk.compare.methods import Method

__all__ = ["register"]


def compare_command(
    estimators: str = typer.Option(
        "grpo,argmaxrl,maxrl,softmax_grpo,pkpo", "--estimators",
        help="Comma-separated methods: an estimator name, or LABEL=ESTIMATOR for a variant "
        "(e.g. 'grpo,grpo_success=grpo').",
    ),
    seeds: int = typer.Option(3, "--seeds", help="Seeds per method (paired)."),
    out: Path = typer.Option(Path("runs/compare"), "--out", help="Directory of the runs."),
    config: Path | None = typer.Option(None, "--config", help="Base YAML config."),
    max_steps: int | None = typer.Option(None, "--max-steps"),
    set_: list[str] = typer.Option([], "--set", help="Base config overrides (all runs)."),
    set_for: list[str] = typer.Option(
        [], "--set-for", help="LABEL:key=value override for one method's runs only, e.g. "
        "'grpo_success:advantage_reward=success' or 'pkpo:optim.lr=1e-4' (repeatable).",
    ),
    control: list[str] = typer.Option(
        [], "--control", help="Add an A/A control of this method: same weights and prompts, "
        "independent sampling noise (repeatable).",
    ),
    workers: int = typer.Option(1, "--workers", help="Worker processes (single-threaded)."),
    lr_sweep: str | None = typer.Option(
        None, "--lr-sweep", help="Comma-separated learning rates: pick each method's on a "
        "validation split of the training prompts before the test runs (the grid grows past "
        "an edge until the chosen rate is interior).",
    ),
    sweep_seeds: int = typer.Option(2, "--sweep-seeds", help="Seeds per rate of the sweep."),
    max_extensions: int = typer.Option(
        3, "--max-extensions", help="Most rates the sweep adds past its grid's edges per "
        "method (0: the grid as given).",
    ),
    select_by: str | None = typer.Option(
        None, "--select-by", help="Validation metric the sweep maximises, e.g. pass@1 "
        "(default: the mean over k = 1, 2, 4, ... of pass@k).",
    ),
    common_lr_from: str | None = typer.Option(
        None, "--common-lr-from", help="Sweep only this method and run every method at its "
        "chosen rate (one rate for all).",
    ),
    val_prompts: int = typer.Option(256, "--val-prompts", help="Validation prompts (sweep)."),
    resume: bool = typer.Option(True, "--resume/--no-resume",
                                help="Continue the grid in --out (finished runs reused); "
                                "--no-resume starts over, keeping the earlier grid's files in "
                                "OUT/previous-attempt/."),
    quiet: bool = typer.Option(False, "--quiet"),
) -> None:
    """Matched runs of several methods (same SFT weights, prompts, rollout budget, optimiser);
    a table of final pass@k / best@k with CIs over seeds and one overlay plot."""
    from bestk.compare.grid import run_compare
    from bestk.compare.jobs import CompareInterrupted
    from bestk.train.commands import check_flag_conflicts

    try:
        with cli_errors():
            out_directory(out)
            check_flag_conflicts([("--max-steps", "max_steps", max_steps)], set_)
            methods = _methods(estimators, set_for)
            grid = _lr_grid(lr_sweep)
            table = run_compare(
                methods, seeds=seeds, out=out, config=config, max_steps=max_steps, overrides=set_,
                progress=not quiet, controls=control, workers=workers, lr_sweep=grid,
                sweep_seeds=sweep_seeds, val_prompts=val_prompts, resume=resume,
                max_extensions=max_extensions, select_by=select_by, common_lr_from=common_lr_from,
            )
    except CompareInterrupted as e:  # 130 after Ctrl-C, 143 after SIGTERM (a preemption)
        typer.echo(str(e), err=True)
        raise typer.Exit(e.status) from None
    typer.echo(table)


def _methods(estimators: str, set_for: list[str]) -> list[Method]:
    """The methods of ``--estimators`` (``NAME`` or ``LABEL=ESTIMATOR``, each label once) with
    their ``--set-for LABEL:key=value`` overrides (each key once per method)."""
    from bestk.compare.methods import Method
    from bestk.train.config.io import check_each_key_once

    specs: dict[str, tuple[str, list[str]]] = {}
    for item in (e.strip() for e in estimators.split(",")):
        if not item:
            continue
        label, _, est = item.partition("=")
        label, est = label.strip(), est.strip() or label.strip()
        if label in specs:
            fail(f"--estimators lists {label!r} twice; give each method once (a variant of "
                 f"an estimator gets a label of its own: {label},{label}_2={est})")
        specs[label] = (est, [])
    for item in set_for:
        label, sep, kv = item.partition(":")
        if not sep or "=" not in kv:
            fail(f"--set-for expects LABEL:key=value, got {item!r}")
        if label not in specs:
            fail(f"--set-for {item!r}: {label!r} is not among the methods {list(specs)}")
        specs[label][1].append(kv)
    for lb, (_, ov) in specs.items():  # each key once per method, as --set
        check_each_key_once(ov, f"--set-for {lb}:")
    return [Method(lb, est, overrides=tuple(ov)) for lb, (est, ov) in specs.items()]


def _lr_grid(lr_sweep: str | None) -> list[float] | None:
    """The learning rates of ``--lr-sweep`` (``None``: no sweep); not numbers, or none at
    all, is refused (an empty grid would silently run no sweep)."""
    if lr_sweep is None:
        return None
    try:
        grid = [float(x) for x in lr_sweep.split(",") if x.strip()]
    except ValueError:
        fail(f"--lr-sweep must be comma-separated numbers, got {lr_sweep!r}")
    if not grid:
        fail(f"--lr-sweep {lr_sweep!r} lists no learning rate; give comma-separated "
             "rates, or drop --lr-sweep")
    return grid


def register(app: typer.Typer) -> None:
    """Attach ``compare`` to the ``bestk`` app."""
    app.command("compare")(compare_command)
