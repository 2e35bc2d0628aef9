import subprocess
import sys

from typer.testing import CliRunner

from bestk.cli import app


def test_python_m_bestk_help_lists_commands():
    out = subprocess.run(
        [sys.executable, "-m", "bestk", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "estimators" in out


def test_estimators_command_lists_registry_with_options():
    res = CliRunner().invoke(app, ["estimators"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    for name in ("argmaxrl", "maxrl", "softmax_grpo", "grpo", "rloo", "reinforce", "pkpo"):
        assert name in res.output
    assert "baseline='loo'" in res.output and "tau=0.1" in res.output
