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


def test_plot_weights(tmp_path):
    pytest.importorskip("matplotlib")
    res = runner.invoke(app, ["plot", "weights", "-o", str(tmp_path), "--taus", "0.1,1.0"])
    assert res.exit_code == 0, res.output
    for name in ("weights.png", "kappo_beta_eff.png", "kappo_winrate_T.png"):
        f = tmp_path / name
        assert f.exists() and f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
