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


def test_estimators_table_shows_the_registry_metadata_and_docs_hold_it():
    res = CliRunner().invoke(app, ["estimators"], env={"COLUMNS": "220"})
    assert "J_{N-1} (baseline=mean)" in res.output and "0/1" in res.output
    md = CliRunner().invoke(app, ["estimators", "--markdown"]).output
    assert md.splitlines()[0].startswith("| name | unbiased gradient of | rewards |")
    assert "| `pkpo` | best@k | any | no | k, variant='sloo_minus_one' |" in md
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[1] / "docs" / "estimators.md").read_text()
    assert md in docs, "docs/estimators.md: paste `bestk estimators --markdown` over the table"
