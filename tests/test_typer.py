"""What every ``bestk`` command shares (bestk._typer): a ``ValueError`` or ``OSError`` is one
line ``error: ...`` and exit status 2, an ``--out`` naming a file is refused before any work,
``bestk --version``."""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from bestk._typer import cli_errors, os_error_message, out_directory, out_file
from bestk.cli import app
from tests.conftest import TINY

pytestmark = pytest.mark.usefixtures("restore_torch_threads")


def one_line_error(result) -> str:
    """Exit status 2 and exactly one line ``error: ...``, no traceback."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def invoke(args: list) -> str:
    return one_line_error(CliRunner().invoke(app, [str(a) for a in args]))


def _sets(*items: str) -> list[str]:
    return [x for s in items for x in ("--set", s)]


def _bank(tmp: Path) -> Path:
    bank = tmp / "bank.jsonl"
    bank.write_text("".join(json.dumps({"prompt_id": f"q{i}", "rewards": [0, 1, 1, 0]}) + "\n"
                            for i in range(4)))
    return bank


#: Every command that writes a directory, with OUT where that directory goes (fast settings).
DIRECTORY_COMMANDS = {
    "train": lambda tmp, out: ["train", "--out", out, "--quiet", "--max-steps", "1",
                               *_sets(*TINY)],
    "compare": lambda tmp, out: ["compare", "--out", out, "--estimators", "grpo", "--seeds",
                                 "1", "--max-steps", "1", "--quiet", *_sets(*TINY)],
    "lab bandit": lambda tmp, out: ["lab", "bandit", "--fast", "--quiet", "-o", out],
    "lab digits": lambda tmp, out: ["lab", "digits", "--fast", "--quiet", "--rewards", "binary",
                                    "--learners", "ml", "--lr-grid", "0.003", "-o", out],
    "lab kappo": lambda tmp, out: ["lab", "kappo", "--fast", "--quiet", "--ks", "1", "--methods",
                                   "apo", "--kinds", "binary", "-o", out],
    "lab sparse": lambda tmp, out: ["lab", "sparse", "--fast", "--quiet", "--learners", "ml",
                                    "-o", out],
    "plot weights": lambda tmp, out: ["plot", "weights", "-o", out],
}

#: Every command that writes a file, with OUT as that file.
FILE_COMMANDS = {
    "calibrate": lambda tmp, out: ["calibrate", _bank(tmp), "--k", "2", "--beta", "0.1",
                                   "-o", out],
    "eval --json": lambda tmp, out: ["eval", "--model", tmp, "--json", out],
    "eval --bank": lambda tmp, out: ["eval", "--model", tmp, "--bank", out],
}


@pytest.mark.parametrize("name", list(DIRECTORY_COMMANDS))
def test_out_naming_a_file_is_one_line_before_any_work(tmp_path, name):
    plain = tmp_path / "afile"
    plain.write_text("x")
    line = invoke(DIRECTORY_COMMANDS[name](tmp_path, plain))
    assert f"'{plain}' is a file, not a directory" in line
    line = invoke(DIRECTORY_COMMANDS[name](tmp_path, plain / "sub"))
    assert f"'{plain / 'sub'}'" in line and f"'{plain}' is a file" in line
    assert plain.read_text() == "x"


@pytest.mark.parametrize("name", list(FILE_COMMANDS))
def test_an_output_file_under_a_file_or_a_directory_is_one_line(tmp_path, name):
    plain = tmp_path / "afile"
    plain.write_text("x")
    line = invoke(FILE_COMMANDS[name](tmp_path, plain / "out.json"))
    assert f"its parent '{plain}' is a file" in line
    line = invoke(FILE_COMMANDS[name](tmp_path, tmp_path))
    assert f"'{tmp_path}' is a directory" in line


@pytest.fixture
def read_only(monkeypatch):
    """``read_only(root)``: every write under ``root`` fails with EROFS, as on a read-only
    mount (tests may run as root, where ``chmod`` stops no write)."""

    def install(root: Path) -> None:
        root_s = str(root)

        def under(path) -> bool:
            return isinstance(path, (str, os.PathLike)) and os.fspath(path).startswith(root_s)

        def refuse(path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))

        real_os_open, real_mkdir, real_open = os.open, os.mkdir, builtins.open

        def os_open(path, flags, *a, **kw):
            if under(path) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
                refuse(path)
            return real_os_open(path, flags, *a, **kw)

        def mkdir(path, *a, **kw):
            if under(path):
                if os.path.isdir(path):
                    raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path)
                refuse(path)
            return real_mkdir(path, *a, **kw)

        def open_(file, mode="r", *a, **kw):
            if under(file) and any(c in mode for c in "wax+"):
                refuse(file)
            return real_open(file, mode, *a, **kw)

        monkeypatch.setattr(os, "open", os_open)
        monkeypatch.setattr(os, "mkdir", mkdir)
        monkeypatch.setattr(builtins, "open", open_)
        monkeypatch.setattr(io, "open", open_)

    return install


@pytest.mark.parametrize("name", list(DIRECTORY_COMMANDS))
def test_a_read_only_out_is_one_line(tmp_path, read_only, name):
    ro = tmp_path / "ro"
    ro.mkdir()
    args = DIRECTORY_COMMANDS[name](tmp_path, ro)
    read_only(ro)
    line = invoke(args)
    assert "Read-only file system" in line and str(ro) in line
    assert "choose a writable" in line


def test_a_read_only_calibration_file_is_one_line(tmp_path, read_only):
    ro = tmp_path / "ro"
    ro.mkdir()
    args = FILE_COMMANDS["calibrate"](tmp_path, ro / "cal.json")
    read_only(ro)
    line = invoke(args)
    assert f"{ro}" in line and "Read-only file system; choose a writable location" in line


@pytest.mark.parametrize("name", list(FILE_COMMANDS))
def test_a_read_only_output_file_is_named_before_any_work(tmp_path, read_only, monkeypatch,
                                                          name):
    """``--json`` / ``--bank`` / ``-o`` in a place that cannot be written: the line names the
    target (not the temporary file the write went through), and the command checks it before
    it evaluates or calibrates anything."""
    from bestk.kappo import calibration
    from bestk.train import commands

    def no_work(*args, **kw):
        raise AssertionError("the command worked before checking its output file")

    monkeypatch.setattr(commands, "eval_config", no_work)
    monkeypatch.setattr(calibration, "calibrate", no_work)
    ro = tmp_path / "ro"
    ro.mkdir()
    target = ro / "sub" / "out.json"
    args = FILE_COMMANDS[name](tmp_path, target)
    read_only(ro)
    assert invoke(args) == f"error: {target}: Read-only file system; choose a writable location"
    assert list(ro.iterdir()) == []


def test_atomic_writes_name_their_target_not_the_temporary(tmp_path, read_only):
    from bestk._atomic import write_text_atomic

    (tmp_path / "adir").mkdir()
    with pytest.raises(IsADirectoryError) as e:
        write_text_atomic(tmp_path / "adir", "x")
    assert e.value.filename == str(tmp_path / "adir") and e.value.filename2 is None
    assert os.listdir(tmp_path / "adir") == [] and sorted(os.listdir(tmp_path)) == ["adir"]
    ro = tmp_path / "ro"
    ro.mkdir()
    read_only(ro)
    with pytest.raises(OSError) as e:
        write_text_atomic(ro / "x.json", "x")
    assert e.value.errno == errno.EROFS and e.value.filename == str(ro / "x.json")


def test_os_errors_of_any_command_in_a_real_process(tmp_path):
    """No command lets a traceback out: ``python -m bestk lab kappo -o FILE``."""
    plain = tmp_path / "afile"
    plain.write_text("x")
    p = subprocess.run([sys.executable, "-m", "bestk", "lab", "kappo", "--fast", "--quiet",
                        "-o", str(plain)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr.splitlines() == [f"error: --out/-o '{plain}' is a file, not a directory"]


def test_cli_errors_turns_value_and_os_errors_into_one_line(capsys):
    with pytest.raises(typer.Exit) as e, cli_errors():
        raise ValueError("bad value")
    assert e.value.exit_code == 2
    assert capsys.readouterr().err == "error: bad value\n"
    with pytest.raises(typer.Exit), cli_errors():
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/x/y")
    assert capsys.readouterr().err == (
        "error: /x/y: No space left on device; free some space and run the same command\n")
    with pytest.raises(typer.Exit), cli_errors(lambda e: "described"):
        raise PermissionError(errno.EACCES, "Permission denied", "/x")
    assert capsys.readouterr().err == "error: described\n"
    with pytest.raises(KeyError), cli_errors():  # a bug is not an input error
        raise KeyError("k")


def test_os_error_message_and_out_paths(tmp_path):
    e = OSError(errno.EROFS, os.strerror(errno.EROFS), "/ro/x")
    assert os_error_message(e) == "/ro/x: Read-only file system; choose a writable location"
    f = tmp_path / "f"
    f.write_text("")
    assert out_directory(tmp_path / "new" / "dir") == tmp_path / "new" / "dir"
    assert out_file(tmp_path / "new" / "x.json", "--json") == tmp_path / "new" / "x.json"
    with pytest.raises(ValueError, match="--out '.*/f' is a file, not a directory"):
        out_directory(f)
    with pytest.raises(ValueError, match="cannot be a directory: its parent '.*/f' is a file"):
        out_directory(f / "a" / "b")
    with pytest.raises(ValueError, match="--json '.*' is a directory; give a file name"):
        out_file(tmp_path, "--json")


def test_version():
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output == f"bestk {version('bestk')}\n"
    p = subprocess.run([sys.executable, "-m", "bestk", "--version"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and p.stdout == f"bestk {version('bestk')}\n"
