"""The ``bestk`` command line (``bestk`` and ``python -m bestk`` are the same program).

Each command group lives next to the code it drives and is attached here with
``app.command`` / ``app.add_typer``.
"""

from __future__ import annotations

import typer

from bestk._typer import Group

app = typer.Typer(
    name="bestk",
    cls=Group,
    help="@k-aware reinforcement learning for language models: ArgMaxRL, KAPPO, SoftmaxGRPO.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: typer's rich help costs ~0.3 s
)


@app.callback()
def _root() -> None:
    """@k-aware reinforcement learning for language models: ArgMaxRL, KAPPO, SoftmaxGRPO."""


@app.command("estimators")
def list_estimators() -> None:
    """List the registered advantage estimators and their options."""
    import inspect

    from rich.console import Console
    from rich.table import Table

    import bestk

    table = Table(title="bestk estimators")
    table.add_column("name")
    table.add_column("options (default)")
    for name in sorted(bestk.ESTIMATORS):
        opts = bestk.estimator_options(name)
        text = ", ".join(
            f"{k}" if v is inspect.Parameter.empty else f"{k}={v!r}" for k, v in opts.items()
        )
        table.add_row(name, text or "-")
    Console().print(table)


# Command groups living next to the code they drive. Each module defines
# ``register(app: typer.Typer) -> None`` and keeps heavy imports inside its command bodies,
# so ``bestk --help`` stays fast.
_COMMAND_MODULES: list[str] = [
    "bestk.lab.commands",
    "bestk.kappo.commands",
    "bestk.train.commands",
]


def _register_commands() -> None:
    import importlib

    for module in _COMMAND_MODULES:
        importlib.import_module(module).register(app)


_register_commands()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
