"""What every ``bestk`` command shares: the command group class (one-line errors for missing
extras and for every ``ValueError`` / ``OSError`` a command lets out, a ``--help`` that stays
fast), :func:`fail` (the one-line ``error:`` exit), :func:`cli_errors` (the same as a context
manager, for a command that describes OS errors its own way) and :func:`number_list`
(comma-separated option values)."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn, TypeVar, overload

import typer
from typer.core import TyperGroup

from bestk._atomic import os_error_line
from bestk._optional import missing_from

#: A path as the ``--out`` checks take and return it (a ``str`` or a ``Path``).
PathT = TypeVar("PathT", bound="str | os.PathLike[str]")
#: The numbers of :func:`number_list` (``int`` or ``float``).
N = TypeVar("N", bound=float)

__all__ = ["Group", "fail", "cli_errors", "os_error_message", "out_directory", "out_file",
           "number_list"]


def fail(message: object) -> NoReturn:
    """Stop the command: one line ``error: MESSAGE`` on stderr and exit status 2 (how every
    bestk command reports bad input, with no traceback)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def os_error_message(e: OSError) -> str:
    """One line for an OS error of any command: ``PATH: reason`` (:func:`bestk._atomic.
    os_error_line`) and, for a full disk or a path that cannot be written, what to do."""
    text = os_error_line(e)
    if e.errno == errno.ENOSPC:
        text += "; free some space and run the same command"
    elif e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        text += "; choose a writable location"
    elif e.errno in (errno.ENOTDIR, errno.EEXIST, errno.EISDIR):
        text += "; choose another output path"
    return text


@contextmanager
def cli_errors(describe: Callable[[OSError], str] = os_error_message) -> Iterator[None]:
    """Turn a ``ValueError`` (bad input) or an ``OSError`` (described by ``describe``) raised
    in the block into one line ``error: ...`` on stderr and exit status 2 (:func:`fail`).

    :class:`Group` applies it to every command; a command wraps its body in it itself only to
    describe OS errors its own way (``bestk train`` says whether a checkpoint is intact).
    """
    try:
        yield
    except ValueError as e:
        fail(e)
    except OSError as e:
        fail(describe(e))


def _blocking_file(path: str | os.PathLike[str]) -> Path | None:
    """The existing non-directory that ``path`` or one of its parents is, if any."""
    for p in (Path(path), *Path(path).parents):
        if p.exists():
            return None if p.is_dir() else p
    return None


def out_directory(path: PathT, option: str = "--out") -> PathT:
    """``path`` unchanged if it is a directory or can be made one; a ``ValueError`` naming
    ``option`` when it, or a parent of it, is an existing file (checked before any work)."""
    block = _blocking_file(path)
    if block is not None:
        if str(block) == str(path):
            raise ValueError(f"{option} {str(path)!r} is a file, not a directory")
        raise ValueError(f"{option} {str(path)!r} cannot be a directory: its parent "
                         f"{str(block)!r} is a file")
    return path


def out_file(path: PathT, option: str,
             keep: Sequence[tuple[str, str | os.PathLike[str]]] = ()) -> PathT:
    """``path`` unchanged if a file can be written there; a ``ValueError`` naming ``option``
    when it is a directory, a parent of it is an existing file, or it is (or lies inside) one
    of ``keep`` -- ``(what, path)`` pairs such as ``("the input file", FILE)`` or ``("a file
    of the run 'r0'", r0/config.yaml)``: a command never overwrites its own input or a run's
    files; an ``OSError`` naming ``path`` when its directory (or the nearest existing one above
    it) cannot be written (read-only, no permission, full): checked before any work, with a
    probe file made and removed at once."""
    real = os.path.realpath(str(path))
    for what, other in keep:
        mine = os.path.realpath(other)
        if real == mine or Path(mine) in Path(real).parents:
            raise ValueError(f"{option} {str(path)!r} is {what}; writing it would destroy it: "
                             "give another path")
    if Path(path).is_dir():
        raise ValueError(f"{option} {str(path)!r} is a directory; give a file name")
    block = _blocking_file(Path(path).parent)
    if block is not None:
        raise ValueError(f"{option} {str(path)!r}: its parent {str(block)!r} is a file, not "
                         "a directory")
    where = next((p for p in Path(path).absolute().parents if p.is_dir()), None)
    if where is not None:
        try:
            fd, probe = tempfile.mkstemp(prefix=".bestk-probe-", dir=where)
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise type(e)(e.errno, e.strerror, str(path)) from None
    return path


@overload
def number_list(text: str, name: str, *, positive: bool = False) -> tuple[float, ...]: ...


@overload
def number_list(text: str, name: str, kind: Callable[[str], N], *,
                positive: bool = False) -> tuple[N, ...]: ...


def number_list(text: str, name: str, kind: Callable[[str], float] = float, *,
                positive: bool = False) -> tuple[float, ...]:
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
    """A typer command group with three additions.

    * A missing optional dependency, wherever a subcommand needs it
      (:class:`bestk._optional.MissingDependency`, or a plain ``ImportError`` of a module of
      :data:`bestk._optional.OPTIONAL`), becomes one line
      ``error: bestk lab digits needs scikit-learn: pip install "bestk[lab]"`` on stderr and
      exit status 2, without a traceback.
    * Every ``ValueError`` or ``OSError`` a subcommand lets out is one line ``error: ...`` and
      exit status 2 (:func:`cli_errors`): ``--out`` naming a file, a read-only or full disk,
      bad values found deep in a library call.
    * The group's own ``--help`` flag defaults to ``False`` rather than typer's ``None``: typer
      coerces a ``None`` flag through a pydantic adapter, and importing pydantic for it would
      double the start-up time of every ``bestk SUBCOMMAND --help``
      (``benchmarks/cli_startup.py``).
    """

    # ``ctx``: typer's vendored click Context (typer._click), which typer does not export
    def invoke(self, ctx: Any) -> Any:
        try:
            with cli_errors():
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
