"""The ``bestk`` command line (``bestk`` and ``python -m bestk`` are the same program).

Each command group lives next to the code it drives and is attached here with
``app.command`` / ``app.add_typer``.
"""

from __future__ import annotations

import typer

from bestk._typer import Group
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


# Command groups living next to the code they drive. Each module defines
# ``register(app: typer.Typer) -> None`` and keeps heavy imports inside its command bodies,
# so ``bestk --help`` stays fast.
for _commands in (lab_commands, kappo_commands, train_commands, compare_commands):
    _commands.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
