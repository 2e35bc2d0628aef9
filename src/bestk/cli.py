"""The ``bestk`` command line (``bestk`` and ``python -m bestk`` are the same program).

Each command group lives next to the code it drives and is attached here with
``app.command`` / ``app.add_typer``.
"""

from __future__ import annotations

from pathlib import Path

import typer

from bestk._typer import Group, out_file
from bestk.compare import commands as compare_commands
from bestk.kappo import commands as kappo_commands
from bestk.lab import commands as lab_commands
from bestk.train import commands as train_commands

app = typer.Typer(
    name="bestk",
    cls=Group,
    help="@k-aware reinforcement learning for language models: ArgMaxRL, KAPPO, SoftmaxGRPO.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: typer's rich help costs ~0.3 s
)


def version_text() -> str:
    """``bestk <version>``: the installed distribution's version (``importlib.metadata``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"bestk {version('bestk')}"
    except PackageNotFoundError:  # run from a source tree that is not installed
        from bestk import __version__

        return f"bestk {__version__}"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """@k-aware reinforcement learning for language models: ArgMaxRL, KAPPO, SoftmaxGRPO."""


#: The columns of ``bestk estimators`` (rows from :func:`bestk.estimators.estimator_table`).
ESTIMATOR_COLUMNS = ("name", "unbiased gradient of", "rewards", "prompt ids", "options (default)")


def estimators_markdown() -> str:
    """The estimator table as Markdown (``bestk estimators --markdown``; docs/estimators.md
    holds it verbatim, tests/test_cli.py checks)."""
    from bestk.estimators import estimator_table

    lines = ["| " + " | ".join(ESTIMATOR_COLUMNS) + " |",
             "|" + "---|" * len(ESTIMATOR_COLUMNS)]
    for row in estimator_table():
        lines.append("| " + " | ".join([f"`{row[0]}`", *row[1:]]) + " |")
    return "\n".join(lines) + "\n"


@app.command("estimators")
def list_estimators(
    markdown: bool = typer.Option(False, "--markdown", help="Print the table as Markdown."),
) -> None:
    """List the registered advantage estimators: objective, rewards, options."""
    if markdown:
        typer.echo(estimators_markdown(), nl=False)
        return
    from rich.console import Console
    from rich.table import Table

    from bestk.estimators import estimator_table

    table = Table(title="bestk estimators")
    for column in ESTIMATOR_COLUMNS:
        table.add_column(column)
    for row in estimator_table():
        table.add_row(*row)
    Console().print(table)


@app.command("metrics")
def metrics_command(
    file: Path = typer.Argument(..., help="Scored samples: JSONL, CSV or parquet, one row "
                                "per sample, or one row per prompt with a list of rewards."),
    prompt: str | None = typer.Option(
        None, "--prompt", help="The prompt-id column (default: the first of prompt_id, doc_id, "
        "prompt, id, question); a dotted name reads a nested field."),
    reward: str | None = typer.Option(
        None, "--reward", help="The reward or correctness column (default: the first of "
        "reward, rewards, correct, score, exact_match, acc, pass)."),
    fmt: str | None = typer.Option(None, "--format", help="jsonl, csv or parquet (default: "
                                   "from the suffix)."),
    where: list[str] = typer.Option([], "--where", help="Keep rows whose KEY equals VALUE "
                                    "(repeatable), e.g. --where step=30 for a run's "
                                    "samples.jsonl."),
    threshold: float | None = typer.Option(
        None, "--threshold", help="A sample succeeds when its reward is >= this (default: "
        "pass@k only for 0/1 rewards)."),
    all_k: bool = typer.Option(False, "--all-k", help="k up to the largest per-prompt n, each "
                               "k over the prompts with at least k samples (default: up to the "
                               "smallest n, every k over every prompt)."),
    ci: float = typer.Option(0.95, "--ci", help="Interval level (bootstrap over prompts)."),
    n_boot: int = typer.Option(1000, "--n-boot", help="Bootstrap resamples."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
    json_out: Path | None = typer.Option(None, "--json", help="Also write the table as JSON."),
    plot: Path | None = typer.Option(None, "--plot", help="Also draw the curves as a PNG."),
) -> None:
    """Unbiased pass@k and best@k (k = 1..n) with intervals, from any engine's scored samples.

    lm-eval's --log_samples file: bestk metrics samples_TASK_*.jsonl --prompt doc_id
    --reward exact_match. Your own vLLM outputs: write one JSON line per prompt,
    {"prompt_id": ..., "reward": [r1, ..., rn]}, and run bestk metrics FILE.
    """
    from bestk.samples import metrics_text, parse_where, plot_metrics, read_samples, sample_metrics

    if json_out is not None:
        out_file(json_out, "--json", [("the input file", file)])
    if plot is not None:
        out_file(plot, "--plot", [("the input file", file)]
                 + ([("the --json file", json_out)] if json_out is not None else []))
    samples = read_samples(file, prompt_key=prompt, reward_key=reward, fmt=fmt,
                           where=parse_where(where))
    result = sample_metrics(samples, all_k=all_k, threshold=threshold, ci=ci, n_boot=n_boot,
                            seed=seed)
    typer.echo(metrics_text(result), nl=False)
    if json_out is not None:
        import json

        from bestk._atomic import write_text_atomic

        write_text_atomic(json_out, json.dumps(result.as_dict(), indent=1) + "\n")
        typer.echo(f"-> {json_out}")
    if plot is not None:
        plot_metrics(result, plot)
        typer.echo(f"-> {plot}")


# Command groups living next to the code they drive. Each module defines
# ``register(app: typer.Typer) -> None`` and keeps heavy imports inside its command bodies,
# so ``bestk --help`` stays fast.
for _commands in (lab_commands, kappo_commands, train_commands, compare_commands):
    _commands.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
