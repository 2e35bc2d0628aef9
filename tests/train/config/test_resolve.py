"""``bestk.train.config.resolve.fill_defaults``: the rules of a config's resolution, checked
with a stand-in algorithm and stand-in model facts (no registry, no model file)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import SimpleNamespace

from bestk.train.config import CHUNKED_FROM_VOCAB, DEFAULT_OUT, DEFAULT_SFT_STEPS, TrainConfig
from bestk.train.config.resolve import ModelFacts, fill_defaults


@dataclass(frozen=True)
class Algo:
    default_n: int = 5
    out_suffix: str = "-x"


def test_the_null_fields_are_the_algorithms_and_the_models():
    reads = []

    def read(path):
        reads.append(path)
        return ModelFacts(SimpleNamespace(temperature=0.6, top_p=None, top_k=7), None)

    cfg = TrainConfig()
    for sec in (cfg.rollout, cfg.eval):  # null: the model's generation_config, else defaults
        sec.temperature = sec.top_p = sec.top_k = None
    got = fill_defaults(cfg, Algo(), read)
    assert got.rollout.n == 5 and got.out == DEFAULT_OUT + "-x"
    assert got.sft.steps == DEFAULT_SFT_STEPS  # the tiny model is warmed up
    assert (got.rollout.temperature, got.rollout.top_p, got.rollout.top_k) == (0.6, 1.0, 7)
    assert (got.eval.temperature, got.eval.top_k) == (0.6, 7)
    assert reads == [None]  # the model's files are read once
    assert cfg.rollout.n is None and cfg.out is None  # the given config is not changed


def test_values_set_in_the_config_are_kept():
    cfg = TrainConfig()
    cfg.rollout.n, cfg.out, cfg.sft.steps = 3, "here", 7
    cfg.rollout.temperature = 0.9
    got = fill_defaults(cfg, Algo(), lambda p: ModelFacts(SimpleNamespace(temperature=0.1), None))
    assert (got.rollout.n, got.out, got.sft.steps, got.rollout.temperature) == (3, "here", 7, 0.9)


def test_a_model_path_is_expanded_before_it_is_read_and_skips_the_warm_up():
    cfg = TrainConfig()
    cfg.model.path, cfg.out = "~/m", "~/run"
    reads = []
    got = fill_defaults(cfg, Algo(), lambda p: reads.append(p) or ModelFacts(None, None))
    home = os.path.expanduser("~")
    assert reads == [os.path.join(home, "m")] and got.out == os.path.join(home, "run")
    assert got.sft.steps == 0


def test_chunked_logprobs_auto_follows_the_vocabulary():
    def with_vocab(v):
        cfg = TrainConfig()
        cfg.model.path = "m"
        return fill_defaults(cfg, Algo(), lambda p: ModelFacts(None, v)).loss.chunked_logprobs

    assert with_vocab(CHUNKED_FROM_VOCAB) is True
    assert with_vocab(CHUNKED_FROM_VOCAB - 1) is False
    assert with_vocab(None) is False
