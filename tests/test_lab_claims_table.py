"""bestk.lab.claims.table: every claim declares its SESOI before the runs, with its source."""

from __future__ import annotations

import pytest

from bestk.lab.claims.table import (
    CLAIMS,
    DECLARED_SESOI,
    DEFAULT_SESOI,
    PAPER_EFFECTS,
    SESOI,
    check_registry,
    declared_sesoi,
)


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
