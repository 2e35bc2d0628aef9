"""``bestk calibrate`` and ``bestk plot weights`` end to end (typer CliRunner)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from bestk.cli import app
from bestk.kappo import Calibration, calibrate

runner = CliRunner()


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def bank_rows(P=6, M=10, seed=0, binary=True):
    rng = np.random.default_rng(seed)
    rows, bank = [], {}
    for i in range(P):
        vals = (rng.random(M) < 0.4).astype(int) if binary else rng.normal(size=M).round(3)
        bank[f"q{i}"] = vals
        if i % 2:  # mix both row formats
            rows.append({"prompt_id": f"q{i}", "rewards": vals.tolist()})
        else:
            rows.extend({"prompt_id": f"q{i}", "reward": v} for v in vals.tolist())
    return rows, bank


@pytest.mark.parametrize("kind", ["binary", "winrate"])
def test_calibrate_jsonl(tmp_path, kind):
    rows, bank = bank_rows(binary=kind == "binary")
    src = write_jsonl(tmp_path / "bank.jsonl", rows)
    out = tmp_path / "cal.json"
    res = runner.invoke(
        app, ["calibrate", str(src), "--k", "4", "--beta", "0.1", "--kind", kind, "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert "prompts" in res.output and "checksum" in res.output
    cal = Calibration.load(out)
    direct = calibrate(bank, 4, 0.1, kind=kind)
    assert cal.checksum == direct.checksum and cal.kind == kind and cal.M == 10
    for name, arr in direct.values.items():
        np.testing.assert_array_equal(cal.values[name], arr)


def test_python_calibrate_accepts_a_bank_path(tmp_path):
    rows, bank = bank_rows(binary=False)
    src = write_jsonl(tmp_path / "bank.jsonl", rows)
    cal = calibrate(src, 2, 0.3, kind="winrate")
    assert cal.checksum == calibrate(bank, 2, 0.3, kind="winrate").checksum
    with pytest.raises(ValueError, match="not 0/1"):
        calibrate(str(src), 2, 0.3, kind="binary")


def test_calibrate_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows, bank = bank_rows(binary=True)
    table = pa.table(
        {
            "prompt_id": [r["prompt_id"] for r in rows],
            "rewards": [r.get("rewards", [r.get("reward")]) for r in rows],
        }
    )
    src = tmp_path / "bank.parquet"
    pq.write_table(table, src)
    out = tmp_path / "cal.json"
    res = runner.invoke(app, ["calibrate", str(src), "--k", "2", "--beta", "0.5", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert Calibration.load(out).checksum == calibrate(bank, 2, 0.5).checksum


@pytest.mark.parametrize(
    "rows,kind,match",
    [
        (['{"prompt_id": "a", "reward": 1}', "{oops"], "binary", "row 2: invalid JSON"),
        ([{"reward": 1}], "binary", "row 1: missing 'prompt_id'"),
        ([{"prompt_id": "a", "reward": 1}, {"prompt_id": "a", "reward": 0.5}], "binary",
         "row 2: reward 0.5 is not 0/1"),
        ([{"prompt_id": "a", "rewards": [1, 0]}, {"prompt_id": "b", "reward": 1}], "binary",
         "row 2: prompt 'b' has 1 reference reward"),
        ([{"prompt_id": "a", "reward": "x"}], "winrate", "row 1: reward 'x' is not a finite"),
        (['{"prompt_id": "a", "reward": NaN}'], "winrate", "row 1: reward nan"),
        ([{"prompt_id": "a", "reward": 1, "rewards": [1]}], "winrate", "exactly one of"),
        ([{"prompt_id": None, "reward": 1}], "winrate", "prompt_id must be"),
        ([[1, 2]], "winrate", "row 1: expected a JSON object"),
        ([{"prompt_id": "a", "rewards": [0, 1]}], "other", "unknown --kind"),
    ],
)
def test_calibrate_bad_banks(tmp_path, rows, kind, match):
    src = write_jsonl(tmp_path / "bank.jsonl", rows)
    out = tmp_path / "cal.json"
    res = runner.invoke(
        app, ["calibrate", str(src), "--k", "2", "--beta", "0.1", "--kind", kind, "-o", str(out)]
    )
    assert res.exit_code != 0
    err = res.stderr if hasattr(res, "stderr") else res.output
    assert match in err, err
    assert len(err.strip().splitlines()) == 1  # one-line error
    assert not out.exists()


def test_calibrate_bad_parameters(tmp_path):
    rows, _ = bank_rows()
    src = write_jsonl(tmp_path / "bank.jsonl", rows)
    for args, match in ((["--k", "0", "--beta", "0.1"], "--k"), (["--k", "2", "--beta", "-1"],
                                                                  "--beta")):
        res = runner.invoke(app, ["calibrate", str(src), *args, "-o", str(tmp_path / "c.json")])
        assert res.exit_code != 0 and match in res.output
    res = runner.invoke(
        app, ["calibrate", str(tmp_path / "nope.jsonl"), "--k", "2", "--beta", "0.1", "-o", "c"]
    )
    assert res.exit_code != 0 and "does not exist" in res.output


def _one_line_error(res, *needles):
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_calibrate_with_a_directory_as_bank_or_out(tmp_path):
    rows, _ = bank_rows()
    src = write_jsonl(tmp_path / "bank.jsonl", rows)
    d = tmp_path / "adir"
    d.mkdir()
    res = runner.invoke(app, ["calibrate", str(d), "--k", "2", "--beta", "0.1", "-o",
                              str(tmp_path / "c.json")])
    _one_line_error(res, f"bank '{d}' is a directory")
    res = runner.invoke(app, ["calibrate", str(src), "--k", "2", "--beta", "0.1", "-o", str(d)])
    _one_line_error(res, f"--out '{d}' is a directory")


def test_calibrate_refuses_to_write_over_its_own_bank(tmp_path):
    """``bestk calibrate bank.jsonl -o bank.jsonl`` replaced its input: refused, untouched."""
    rows, _ = bank_rows()
    src = write_jsonl(tmp_path / "bank.jsonl", rows)
    before = src.read_bytes()
    res = runner.invoke(app, ["calibrate", str(src), "--k", "2", "--beta", "0.1", "-o",
                              str(src)])
    _one_line_error(res, f"--out '{src}' is the bank file it calibrates from")
    assert src.read_bytes() == before


def test_calibrate_out_in_an_unwritable_place_is_one_line(tmp_path, monkeypatch):
    import errno
    import os

    rows, _ = bank_rows()
    src = write_jsonl(tmp_path / "bank.jsonl", rows)
    real_replace = os.replace

    def read_only(a, b, *args, **kw):  # EROFS injected at the atomic rename
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(b))

    monkeypatch.setattr(os, "replace", read_only)
    res = runner.invoke(app, ["calibrate", str(src), "--k", "2", "--beta", "0.1", "-o",
                              str(tmp_path / "c.json")])
    monkeypatch.setattr(os, "replace", real_replace)
    _one_line_error(res, f"{tmp_path / 'c.json'}: Read-only file system")


@pytest.mark.parametrize("kind", ["binary", "winrate"])
def test_beta_below_the_supported_bound_is_refused(tmp_path, kind):
    from bestk.kappo.calibration import MIN_BETA

    rows, bank = bank_rows(binary=kind == "binary")
    src = write_jsonl(tmp_path / "bank.jsonl", rows)
    out = tmp_path / "c.json"
    res = runner.invoke(app, ["calibrate", str(src), "--k", "4", "--beta", "1e-300", "--kind",
                              kind, "-o", str(out)])
    _one_line_error(res, "--beta must be >= 1e-30", "1e-300")
    assert not out.exists()
    with pytest.raises(ValueError, match="beta must be >= 1e-30"):
        calibrate(bank, 4, 1e-300, kind=kind)
    # at the bound every value is finite (the solver is exact there), so files hold no nulls
    cal = calibrate(bank, 4, MIN_BETA, kind=kind)
    assert all(np.isfinite(v).all() for k, v in cal.values.items() if k != "beta_eff")
    if kind == "binary":  # a_k > 0 and beta_eff finite wherever the pass rate is below 1
        below = cal.values["n_success"] < cal.bank_sizes
        assert below.any() and (cal.values["a_k"][below] > 0).all()
        assert np.isfinite(cal.values["beta_eff"][below]).all()
    # a file written with a smaller beta (by hand, or by an older bestk) does not load
    data = cal.to_dict()
    data["beta"] = 1e-300
    with pytest.raises(ValueError, match="beta must be >= 1e-30"):
        Calibration.from_dict(data)


def test_plot_weights(tmp_path):
    pytest.importorskip("matplotlib")
    res = runner.invoke(app, ["plot", "weights", "-o", str(tmp_path), "--taus", "0.1,1.0"])
    assert res.exit_code == 0, res.output
    for name in ("weights.png", "kappo_beta_eff.png", "kappo_winrate_T.png"):
        f = tmp_path / name
        assert f.exists() and f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_weights_writes_into_the_current_directory_by_default(tmp_path, monkeypatch):
    """Not into ``docs/img`` of wherever it runs (the project's figures: ``-o docs/img``)."""
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["plot", "weights", "--taus", "1.0"])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "kappo_beta_eff.png", "kappo_winrate_T.png", "weights.png"]


def test_calibrate_a_bank_that_is_not_utf8_names_it(tmp_path):
    src = tmp_path / "bank.jsonl"
    src.write_bytes(b'{"prompt_id": "caf\xe9", "rewards": [0, 1]}\n')
    res = runner.invoke(app, ["calibrate", str(src), "--k", "2", "--beta", "0.1", "-o",
                              str(tmp_path / "c.json")])
    _one_line_error(res, f"'{src}'", "is not UTF-8 text")


@pytest.mark.parametrize("args, line", [
    (["--group-size", "1"], "--group-size must be an integer in [2, 10000], got 1"),
    (["-M", "100000000"], "--group-size must be an integer in [2, 10000], got 100000000"),
    (["--beta", "-1"], "--beta must be a finite number > 0, got -1.0"),
    (["--beta", "nan"], "--beta must be a finite number > 0, got nan"),
    (["--beta", "inf"], "--beta must be a finite number > 0, got inf"),
    (["--taus", "abc"], "--taus must be comma-separated numbers, got 'abc'"),
    (["--taus", "0.1,-1"], "--taus must be positive numbers, got '0.1,-1'"),
    (["--taus", "0.1,inf"], "--taus must be finite numbers, got '0.1,inf'"),
])
def test_plot_weights_bad_values_are_one_error_line(tmp_path, args, line):
    """Not click's usage block (``Usage: ... Error: Invalid value``), nor a figure half made:
    one ``error:`` line and exit status 2 before anything is written."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "img"
    res = runner.invoke(app, ["plot", "weights", "-o", str(out), *args])
    _one_line_error(res, f"error: {line}")
    assert not out.exists()


@pytest.mark.skipif(not __import__("os").path.exists("/dev/zero"), reason="needs /dev/zero")
@pytest.mark.parametrize("args", [
    ["calibrate", "/dev/zero", "--k", "2", "--beta", "0.1", "-o", "{tmp}/c.json"],
    ["calibrate", "/dev/null", "--k", "2", "--beta", "0.1", "-o", "{tmp}/c.json"],
    ["metrics", "/dev/zero", "--format", "jsonl"],
])
def test_a_device_as_input_is_one_line_not_an_endless_read(tmp_path, args):
    """``bestk calibrate /dev/zero`` once read one endless line until it was OOM-killed (21 GB):
    refused before a byte is read. Run in a process whose memory is capped (4 GiB), so that a
    reader that does read it fails at once rather than filling the machine."""
    import resource
    import subprocess
    import sys

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    p = subprocess.run([sys.executable, "-m", "bestk", *(a.format(tmp=tmp_path) for a in args)],
                       capture_output=True, text=True, timeout=120, preexec_fn=cap)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr[-2000:]
    assert lines[0].startswith("error: ") and "is not a regular file" in lines[0], lines[0]
    assert args[1] in lines[0] and not (tmp_path / "c.json").exists()
