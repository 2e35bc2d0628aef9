"""bestk.lab.claims.table: every claim declares its SESOI with its source, and when each part
of the rule was declared against each testbed's data."""

from __future__ import annotations

import pytest

from bestk.lab.claims.table import (
    CLAIMS,
    DECLARED_SESOI,
    DEFAULT_SESOI,
    PAPER_EFFECTS,
    SESOI,
    TESTBEDS,
    check_registry,
    declared_sesoi,
)
from tests.conftest import ROOT


def test_every_trained_claim_declares_its_sesoi_with_a_source():
    trained = [c for c in CLAIMS if c.kind == "trained"]
    # exact claims have none, except a rule on samples that declares one
    assert set(SESOI) == {c.id for c in trained} | {"softmax-allocation-pretrained"}
    for c in trained:
        value, source = SESOI[c.id]
        effect, _ = PAPER_EFFECTS[c.id]
        assert source, c.id
        if c.control:
            assert value is None, c.id
        elif c.id in DECLARED_SESOI:
            assert value is not None and 0 < value <= (effect or value), c.id
        else:  # no effect reported: the default
            assert effect is None and value == DEFAULT_SESOI == 0.02, c.id
            assert "default" in source
    # the smallest effect the sources report, where they report several
    assert SESOI["softmax-vs-grpo"][0] == 0.004 and "Countdown" in SESOI["softmax-vs-grpo"][1]
    assert SESOI["softmax-allocation"][0] == pytest.approx(0.096 - 0.051)
    assert SESOI["kappo-apo-matches-pkpo"][0] == next(
        c.margin for c in CLAIMS if c.id == "kappo-apo-matches-pkpo")
    stalls = {c.id for c in CLAIMS if c.claims_b_stalls}
    assert stalls == {"softmax-sparse-vs-reinforce", "grpo-sparse-vs-reinforce"}


def test_a_missing_or_bad_sesoi_is_refused():
    with pytest.raises(ValueError, match="declare its SESOI"):
        declared_sesoi("softmax-vs-grpo", declared={})  # the source reports an effect
    with pytest.raises(ValueError, match="no entry in PAPER_EFFECTS"):
        declared_sesoi("no-such-claim")
    good = dict(SESOI)
    check_registry(sesoi=good)
    for claim_id, entry, match in (
            ("softmax-vs-grpo", (0.05, "too large"), "no larger than"),
            ("maxrl-pareto", (0.0, "zero"), "finite effect > 0"),
            ("maxrl-pareto", (0.02, ""), "needs a source"),
            ("maxrl-pareto", (None, "none"), "A/A control has no SESOI"),
            ("aa-control", (0.02, "a control"), "A/A control has no SESOI")):
        with pytest.raises(ValueError, match=match):
            check_registry(sesoi={**good, claim_id: entry})
    with pytest.raises(ValueError, match="no SESOI declared"):
        check_registry(sesoi={k: v for k, v in good.items() if k != "pkpo-passk"})


def test_the_pretrained_testbed_s_claims_are_declared_before_its_runs():
    """Issue: on the pretrained testbed (a) GRPO sharpens (the precondition: pass@1 up, pass@16
    up by less than the SESOI), (b) each @k method's pass@16 beats GRPO's, (c) pass@1 within
    0.02; the A/A control runs there too; until its grid has run, its arms are pending."""
    from bestk.lab.claims.table import TESTBEDS

    (spec,) = [c for c in CLAIMS if c.id == "atk-passk-pretrained"]
    assert {(a.testbed, a.a, a.b) for a in spec.arms} == {
        ("smollm2", m, "grpo") for m in ("maxrl", "pkpo(k=16)", "softmax_grpo(tau=0.1)",
                                         "kappo_grpo(k=16)")}
    assert spec.primary.label == "pass@16" and spec.direction == "greater"
    assert spec.noninferiority.metric.label == "pass@1" and spec.noninferiority.margin == 0.02
    pre = spec.precondition
    assert (pre.wide, pre.narrow, pre.tolerance) == ("pass@16", "pass@1", SESOI[spec.id][0])
    (aa,) = [c for c in CLAIMS if c.id == "aa-control"]
    assert any(a.testbed == "smollm2" for a in aa.arms)
    tb = TESTBEDS["smollm2"]
    assert tb.primary_k == 16 and tb.min_seeds >= 12 and tb.pending_why


def test_a_sharpening_tolerance_must_be_zero_or_the_claim_s_sesoi():
    good = dict(SESOI)
    with pytest.raises(ValueError, match="sharpening tolerance > 0 is the claim's SESOI"):
        check_registry(sesoi={**good, "atk-passk-pretrained": (0.01, "smaller")})


def _git(*args: str) -> str | None:
    """``git <args>`` in this checkout, or ``None`` outside one (an sdist, a shallow clone
    without the commit)."""
    import subprocess

    try:
        out = subprocess.run(["git", *args], cwd=ROOT,
                             capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def test_when_each_part_of_the_rule_was_declared_is_what_git_says():
    """RULE_DECLARED and TestbedSpec.first_data are the commits and times git records (the
    first commit adding a testbed's data file), and the parts that came after a testbed's
    first data are listed on its arms: the toy testbeds' SESOI was not declared before
    their data, the pretrained testbed's rule was (pre-registered)."""
    from bestk.lab.claims import evaluate_claims
    from bestk.lab.claims.table import RULE_DECLARED

    if _git("rev-parse", "--is-shallow-repository") != "false":
        pytest.skip("not a git checkout holding the project's whole history")
    for part, (commit, when, _) in RULE_DECLARED.items():
        got = _git("log", "-1", "--format=%aI", commit)
        if got is None:
            pytest.skip("not a git checkout holding the project's history")
        assert got == when, part
    for t in TESTBEDS.values():
        if t.first_data is None:
            continue
        file = f"docs/results/data/{t.data}.json"
        first = _git("log", "--reverse", "--diff-filter=A", "--format=%h %aI", "--", file)
        assert first and first.splitlines()[0].split() == [t.first_data[0][:7], t.first_data[1]
                                                           ], (t.id, first)
    doc = evaluate_claims({})
    by = {e["id"]: e for e in doc["claims"]}
    assert "sesoi" in by["maxrl-pareto@digits-binary"]["declared_after_data"]
    assert "sharpening" in by["kappo-apo-sharpening@language-permute-kappo[k=4]"][
        "declared_after_data"]
    pre = by["atk-passk-pretrained@smollm2[maxrl]"]
    assert pre["declared_after_data"] == [] and pre["preregistered_at"] == "862ee4e"
    assert doc["testbeds"]["smollm2"]["preregistered_at"] == "862ee4e"
    assert set(doc["rule_declared"]) == set(RULE_DECLARED)
    # the pre-registration precedes every part of the rule that judges the testbed's arms
    pre_time = _git("log", "-1", "--format=%aI", "862ee4e")
    assert pre_time is not None
    assert all(RULE_DECLARED[p][1] <= pre_time or p == "premise"
               for p in ("claims", "sesoi", "contradicted", "sharpening"))


_DATA = ROOT / "docs" / "results" / "data"


def _node(doc, path: tuple[str, ...]):
    """The container holding ``path``'s last segment in ``doc``, and that segment (a key or
    an index), walking the path as :class:`~bestk.lab.claims.specs.PilotValue` does."""
    from fnmatch import fnmatchcase

    def step(node, seg):
        if isinstance(node, list):
            return int(seg)
        (key,) = [seg] if seg in node else [k for k in node if fnmatchcase(k, seg)]
        return key

    for seg in path[:-1]:
        doc = doc[step(doc, seg)]
    return doc, step(doc, path[-1])


def test_the_pilot_numbers_of_the_testbed_texts_come_from_their_records(tmp_path):
    """Issue 42: the pilot numbers in a testbed's text are read from the committed pilot
    records, not typed in: results.md's section quotes them as committed (same rounding),
    and a record with other values changes the rendered text to those."""
    import json
    import shutil

    from tests.conftest import benchmark_script

    rend = benchmark_script("results_render")
    quoting = {t: s for t, s in TESTBEDS.items() if s.pilot_values}
    assert set(quoting) == {"smollm2-rollouts", "smollm2", "language-permute-kappo"}
    assert "{" not in "".join(s.why for s in TESTBEDS.values() if not s.pilot_values)
    committed = {t: {p.name: p.read(_DATA) for p in s.pilot_values} for t, s in quoting.items()}
    assert committed == {
        "smollm2-rollouts": {"base_pass1": "0.126", "base_pass16": "0.424"},
        "smollm2": {"steps_start": "0.46", "steps_50": "0.84", "warm_start": "0.84"},
        "language-permute-kappo": {"start": "0.112", "end_1e4": "0.148", "end_3e4": "0.143"}}
    for t, values in committed.items():
        section = rend._testbed_section(t, None)
        assert TESTBEDS[t].why.format_map(values) in section and "{" not in section, t
    # what the comments beside the declarations say the indices are
    steps = json.loads((_DATA / "pilots/smollm2-steps.json").read_text())["grpo lr 3e-05"]
    assert steps["curve"]["steps"][0] == 0 and steps["curve"]["steps"][5] == 50
    runs = json.loads((_DATA / "pilots/language-permute-kappo.json").read_text())["runs"]
    assert [(r["method"], r["lr"], r["seed"]) for r in runs[:2]] == [
        ("apo(k=1)", 1e-4, "seed0"), ("apo(k=1)", 3e-4, "seed0")]

    data = tmp_path / "data"
    shutil.copytree(_DATA / "pilots", data / "pilots")
    docs: dict[str, dict] = {}
    for i, p in enumerate(p for s in quoting.values() for p in s.pilot_values):
        doc = docs.setdefault(p.file, json.loads((data / p.file).read_text()))
        node, key = _node(doc, p.path)
        node[key] = 0.5 + 0.011 * i
    for file, doc in docs.items():
        (data / file).write_text(json.dumps(doc))
    for t, s in quoting.items():
        moved = {p.name: p.read(data) for p in s.pilot_values}
        assert set(moved.values()).isdisjoint(committed[t].values()), t
        assert s.why.format_map(moved) in rend._testbed_section(t, None, data), t


def test_a_missing_pilot_record_or_value_is_an_error_naming_the_file_and_path(tmp_path):
    import json
    import re
    from dataclasses import replace

    from bestk.lab.claims.specs import PilotValue
    from tests.conftest import benchmark_script

    rend = benchmark_script("results_render")
    with pytest.raises(ValueError, match=r"pilots/smollm2-base\.json.*no file"):
        rend._testbed_section("smollm2-rollouts", None, tmp_path)
    (tmp_path / "p.json").write_text(json.dumps(
        {"run a": {"curve": [0.25]}, "run b": {"curve": [0.5]}}))
    ok = PilotValue("x", "p.json", ("run a", "curve", "0"), "{:.2f}")
    assert ok.read(tmp_path) == "0.25"
    for path, why in [(("run c", "curve", "0"), "no keys match 'run c' at the top"),
                      (("run a", "curve", "1"), "no item '1' at run a/curve"),
                      (("run a", "score"), "no keys match 'score' at run a"),
                      (("run *", "curve", "0"), "2 keys match 'run *' at the top"),
                      (("run a", "curve"), "[0.25] does not format as '{:.2f}'")]:
        where = re.escape(f"pilot value 'x': p.json '{'/'.join(path)}': ")
        with pytest.raises(ValueError, match=where + re.escape(why)):
            replace(ok, path=path).read(tmp_path)
    assert replace(ok, path=("*b", "curve", "0")).read(tmp_path) == "0.50"
    # a field of why without its pilot value, or a value the text does not quote
    spec = TESTBEDS["smollm2-rollouts"]
    with pytest.raises(ValueError, match="fields of why"):
        replace(spec, pilot_values=spec.pilot_values[:1])
    with pytest.raises(ValueError, match="fields of why"):
        replace(spec, why=spec.why.replace("{base_pass1}", "0.126"))
