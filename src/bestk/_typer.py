"""What every ``bestk`` command shares: the command group class (one-line errors for missing
extras, a ``--help`` that stays fast), :func:`fail` (the one-line ``error:`` exit) and
:func:`number_list` (comma-separated option values)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

import typer
from typer.core import TyperGroup

from bestk._optional import missing_from

__all__ = ["Group", "fail", "number_list"]


def fail(message: object) -> NoReturn:
    """Stop the command: one line ``error: MESSAGE`` on stderr and exit status 2 (how every
    bestk command reports bad input, with no traceback)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def number_list(text: str, name: str, kind: Callable[[str], Any] = float, *,
                positive: bool = False) -> tuple[Any, ...]:
    """``"1,2,4"`` -> ``(1, 2, 4)`` with ``kind`` (``int`` or ``float``); a
    ``typer.BadParameter`` naming the option ``name`` when it is empty, not numbers, or (with
    ``positive``) not all > 0."""
    what = "integers" if kind is int else "numbers"
    try:
        vals = tuple(kind(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter(f"{name} must be comma-separated {what}, got {text!r}") from None
    if not vals:
        raise typer.BadParameter(f"{name} is empty")
    if positive and any(not v > 0 for v in vals):
        raise typer.BadParameter(f"{name} must be positive {what}, got {text!r}")
    return vals


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
