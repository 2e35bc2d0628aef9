"""The command group class of every ``bestk`` command group (``bestk``, ``bestk lab``,
``bestk plot``): one-line errors for missing extras and a ``--help`` that stays fast."""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

from bestk._optional import missing_from

__all__ = ["Group"]


class Group(TyperGroup):
    """A typer command group with two additions.

    * A missing optional dependency, wherever a subcommand needs it
      (:class:`bestk._optional.MissingDependency`, or a plain ``ImportError`` of a module of
      :data:`bestk._optional.OPTIONAL`), becomes one line
      ``error: bestk lab digits needs scikit-learn: pip install "bestk[lab]"`` on stderr and
      exit status 2, without a traceback.
    * The group's own ``--help`` flag defaults to ``False`` rather than typer's ``None``: typer
      coerces a ``None`` flag through a pydantic adapter, and importing pydantic for it would
      double the start-up time of every ``bestk SUBCOMMAND --help``
      (``benchmarks/cli_startup.py``).
    """

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except ImportError as e:
            sub = f" {ctx.invoked_subcommand}" if ctx.invoked_subcommand else ""
            missing = missing_from(e, who=f"{ctx.command_path}{sub}")
            if missing is None:
                raise
            typer.echo(f"error: {missing}", err=True)
            raise typer.Exit(2) from None

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        if option is not None and option.default is None:
            option.default = False
        return option
