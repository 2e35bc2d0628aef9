"""bestk._seeds: one named-stream seed rule."""

import io
import re
import tokenize
from pathlib import Path

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


def _scope(s: Stream) -> str:
    return s.name.rpartition(".")[0]


def test_every_module_stream_is_listed_and_keys_are_unique_per_rule():
    defined = {v for v in vars(_seeds).values() if isinstance(v, Stream)}
    assert defined == set(STREAMS)
    for rule in ("derived", "offset", "affine"):
        # derived keys are unique over all streams (independent streams); offset and affine
        # ones within a scope (``lab.digits``...: the streams one run draws)
        ids = [s.key if rule == "derived" else (_scope(s), s.key, s.scale, s.terms)
               for s in STREAMS if s.rule == rule]
        assert ids and len(ids) == len(set(ids)), rule
    assert len({s.name for s in STREAMS}) == len(STREAMS)


def test_eval_bank_sampling_is_seed_plus_one():
    """``bestk eval --bank`` has always sampled its bank with ``--seed`` + 1."""
    assert _seeds.EVAL_BANK_SAMPLING.seed(0) == 1 and _seeds.EVAL_BANK_SAMPLING.seed(41) == 42


def test_affine_stream_is_scaled_seed_plus_key_plus_weighted_components():
    s = Stream("t", 1, rule="affine", scale=31, terms=(("first", 97), ("n", 1)))
    assert s.seed(5, first=3, n=4) == 5 * 31 + 1 + 97 * 3 + 4
    assert s.seed(5, n=4, first=3) == s.seed(5, first=3, n=4)  # components by name
    with pytest.raises(ValueError, match="takes components"):
        s.seed(5, first=3)
    with pytest.raises(ValueError, match="takes components"):
        s.seed(5, first=3, n=4, other=1)
    with pytest.raises(ValueError, match="affine stream; it has no step"):
        s.seed(5, 1, first=3, n=4)


def test_components_and_scale_belong_to_affine_streams_only():
    with pytest.raises(ValueError, match="has no components"):
        Stream("t", 5).seed(3, 9, n=1)
    with pytest.raises(ValueError, match="has no components"):
        Stream("t", 5, rule="offset").seed(3, n=1)
    with pytest.raises(ValueError, match="for affine streams"):
        Stream("t", 5, scale=7)
    with pytest.raises(ValueError, match="for affine streams"):
        Stream("t", 5, rule="offset", terms=(("n", 1),))


@pytest.mark.parametrize(("stream", "kwargs", "legacy"), [
    # the expressions these streams replaced, so the committed results reproduce bit for bit
    (_seeds.TASK_EVAL_PROMPTS, {}, lambda s: s + 1_000_003),
    (_seeds.LAB_BANDIT_CURVES, {"bandit": 2}, lambda s: s + 1000 * 2),
    (_seeds.LAB_BANDIT_SWEEP, {"bandit": 2}, lambda s: s + 1000 * 2 + 500_000),
    (_seeds.LAB_DIGITS_TEST_SPLIT, {}, lambda s: s),
    (_seeds.LAB_DIGITS_VALIDATION_SPLIT, {}, lambda s: s + 1),
    (_seeds.LAB_DIGITS_EVAL_COMPOSITES, {"parts": 3, "validation": 1},
     lambda s: s * 7 + 3 + True),
    (_seeds.LAB_DIGITS_INIT, {"slot_seed": 1000}, lambda s: s * 7919 + 1000),
    (_seeds.LAB_DIGITS_ROLLOUTS, {"reward": 2, "n": 8}, lambda s: s * 1_000_003 + 2 * 10_007 + 8),
    (_seeds.LAB_DIGITS_BATCHES, {"first_slot_seed": 4}, lambda s: s * 31 + 1 + 97 * 4),
    (_seeds.LAB_KAPPO_BINARY, {}, lambda s: s),
    (_seeds.LAB_KAPPO_WINRATE, {}, lambda s: s + 1),
])
@pytest.mark.parametrize("seed", [0, 3, 12345])
def test_legacy_streams_give_the_seeds_they_replaced(stream, kwargs, legacy, seed):
    assert stream.seed(seed, **kwargs) == legacy(seed)


#: arithmetic on a seed (``seed + 1``, ``cfg.seed * 7``, ``10 * seed``) or a SeedSequence of
#: one's own: a seed derivation that belongs in bestk._seeds as a named stream.
_DERIVATION = re.compile(r"\w*seed\s*[-+*%]|[-+*%]\s*(?:\w+\s*\.\s*)*\w*seed\b|SeedSequence\s*\(")


def _code_lines(path: Path) -> dict[int, str]:
    """Each line's code tokens (strings and comments left out), joined by spaces."""
    lines: dict[int, list[str]] = {}
    for t in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if t.type not in (tokenize.STRING, tokenize.COMMENT):
            lines.setdefault(t.start[0], []).append(t.string)
    return {n: " ".join(parts).strip() for n, parts in lines.items()}


def test_derivation_pattern_finds_seed_arithmetic():
    hits = ["seed = seed + 1", "x ( seed = cfg . seed * 7919 + sd )", "a = 3 * seed",
            "1 + cfg . seed", "np . random . SeedSequence ( [ seed , 1 ] )",
            "sampling_seed + 77_001"]
    misses = ["seed = seed", "n = sweep_seeds * 2", "manual_seed ( 0 )", "seeds + 1"]
    assert all(_DERIVATION.search(h) for h in hits)
    assert not any(_DERIVATION.search(m) for m in misses)


def test_no_seed_is_derived_outside_the_seeds_module():
    root = Path(_seeds.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == "_seeds.py":
            continue
        found += [f"{rel}:{n}: {code}" for n, code in _code_lines(path).items()
                  if _DERIVATION.search(code)]
    assert not found, "derive seeds with a named bestk._seeds.Stream:\n" + "\n".join(found)
