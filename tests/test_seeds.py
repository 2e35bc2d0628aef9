"""bestk._seeds: one named-stream seed rule."""

import numpy as np
import pytest

from bestk import _seeds
from bestk._seeds import STREAMS, Stream


def test_derived_stream_is_the_seed_sequence_of_seed_step_key():
    s = Stream("t", 5)
    want = int(np.random.SeedSequence([3, 9, 5]).generate_state(1)[0])
    assert s.seed(3, 9) == want
    assert s.seed(3, 9) != s.seed(3, 10) != s.seed(4, 9)


def test_offset_stream_adds_its_key_and_has_no_step():
    s = Stream("t", 1_000_003, rule="offset")
    assert s.seed(7) == 1_000_010
    with pytest.raises(ValueError, match="offset stream"):
        s.seed(7, 1)


def test_every_module_stream_is_listed_and_keys_are_unique_per_rule():
    defined = {v for v in vars(_seeds).values() if isinstance(v, Stream)}
    assert defined == set(STREAMS)
    for rule in ("derived", "offset"):
        keys = [s.key for s in STREAMS if s.rule == rule]
        assert len(keys) == len(set(keys)), rule
    assert len({s.name for s in STREAMS}) == len(STREAMS)


def test_eval_bank_sampling_is_seed_plus_one():
    """``bestk eval --bank`` has always sampled its bank with ``--seed`` + 1."""
    assert _seeds.EVAL_BANK_SAMPLING.seed(0) == 1 and _seeds.EVAL_BANK_SAMPLING.seed(41) == 42
