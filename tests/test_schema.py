"""``bestk._schema``: the pydantic mechanism the trainer's config and the lab's settings share
(value types, what a field wants, one-line errors; the lab configs as validated dataclasses
whose ``asdict`` and result keys are unchanged)."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import pytest
from pydantic import BaseModel, Field

from bestk._schema import SCHEMA_CONFIG, Float, Int, Str, want
from bestk.lab.bandit import BanditConfig
from bestk.lab.digits import DigitsConfig
from bestk.lab.kappo import KappoLabConfig
from bestk.lab.sparse import SparseConfig


class _Example(BaseModel):
    model_config = SCHEMA_CONFIG

    count: Int = Field(1, ge=1)
    maybe: Int | None = Field(None, ge=0, json_schema_extra={"null": "none at all"})
    rate: Float = Field(0.5, ge=0, lt=1)
    scale: Float = Field(1.0, gt=0)
    name: Str = "x"
    small: Annotated[int, Field(le=3)] = 0


@pytest.mark.parametrize(
    "field, text",
    [
        ("count", "an integer >= 1"),
        ("maybe", "an integer >= 0 or null (none at all)"),
        ("rate", "a number in [0, 1)"),
        ("scale", "a number > 0"),
        ("name", "a string"),
        ("small", "an integer <= 3"),
    ],
)
def test_want_says_the_type_and_the_bounds(field, text):
    assert want(_Example.model_fields[field]) == text


def test_the_value_types_keep_omegaconfs_conversions():
    ok = _Example(count="3", rate=0, name=5)
    assert (ok.count, ok.rate, ok.name) == (3, 0.0, "5") and isinstance(ok.rate, float)
    for bad in ({"count": True}, {"count": 2.0}, {"rate": True}, {"rate": float("nan")}):
        with pytest.raises(ValueError):
            _Example(**bad)


def test_lab_configs_are_validated_dataclasses_with_one_line_errors():
    for cls in (BanditConfig, DigitsConfig, SparseConfig, KappoLabConfig):
        assert dataclasses.is_dataclass(cls)
        assert dataclasses.asdict(cls.fast()) == {  # asdict (results.json) as before
            f.name: getattr(cls.fast(), f.name) for f in dataclasses.fields(cls)}
    with pytest.raises(ValueError, match="^steps must be an integer >= 1, got 0$"):
        BanditConfig(steps=0)
    cfg = DigitsConfig.fast()
    with pytest.raises(ValueError, match="^n must be a rollout count >= 2, got 1$"):
        cfg.n = 1  # an assignment is checked too
    assert cfg.n == 4
    cfg.learners = ["ml", "grpo"]  # a list becomes the field's tuple
    assert cfg.learners == ("ml", "grpo")
    with pytest.raises(ValueError, match="^test_fraction must be a number in \\[0.05, 0.9\\]"):
        SparseConfig(test_fraction=0.95)
    with pytest.raises(ValueError, match="^unknown setting 'nope'; valid: ks, methods,"):
        KappoLabConfig(nope=1)
    with pytest.raises(ValueError, match="^ks\\[0\\] must be an integer, got True$"):
        KappoLabConfig(ks=(True,))
    with pytest.raises(ValueError, match="strictly between 0 and bank_size=20"):
        KappoLabConfig(successes=(3, 20))  # the rule between two fields


def test_lab_result_keys_are_unchanged():
    # the keys finished runs are saved under: a refactor must not change them (a resumed run
    # would redo finished work); a changed default changes them on purpose, and then here
    # (last: the exploratory passk_training / loo_max learners; before: the SFT stage,
    # @k-GRPO's beta grid, 60 steps of 32 images, 160 seeds)
    assert DigitsConfig().key() == "acda51ede57c5e4a"
    assert DigitsConfig.fast().key() == "3252d3111c367d95"
    assert DigitsConfig(seeds=161).key() != DigitsConfig().key()
    assert DigitsConfig(threads=2).key() == DigitsConfig().key()  # no effect on results
