"""The rollout-engine registry, through an engine registered by the test itself (the recipe of
docs/design.md, "Adding a rollout engine"): a sampler whose log-probs are not the policy's.

The ``shifted`` engine samples with the ``hf`` loop but reports every token's log-probability
0.3 nats below the policy's (as a sampler ``q`` with ``log q = log pi - 0.3`` on the sampled
tokens would), and the policy's own in ``Rollout.policy_logprobs``. Then, exactly:
``rollout/logprob_mismatch`` = 0.3, ``rollout/logprob_kl`` = ``e^0.3 - 1 - 0.3``, and the
truncated importance weight of every token is ``min(e^0.3, cap)``, so the first update's
gradient is that factor times the uncorrected one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pytest
import torch

from bestk.train.rollout import engine as engines
from bestk.train.rollout.engine import ENGINES, EngineSpec, HFEngine
from bestk.train.run.directory import read_metrics
from bestk.train.trainer import Trainer
from tests.conftest import tiny_config

SHIFT = 0.3


@dataclass
class ShiftedEngine:
    inner: HFEngine

    @property
    def device(self) -> torch.device:
        return self.inner.device

    def sample(self, prompts, *, n, max_new_tokens, generator, batch_size=None):
        ro = self.inner.sample(prompts, n=n, max_new_tokens=max_new_tokens,
                               generator=generator, batch_size=batch_size)
        mask = ro.completion_mask.to(ro.logprobs.dtype)
        return replace(ro, logprobs=(ro.logprobs - SHIFT) * mask,
                       policy_logprobs=ro.logprobs.clone())

    def sync(self) -> None:
        self.inner.sync()


@dataclass
class ShiftedBackend:
    model: object
    tokenizer: object

    def engine(self, options):
        return ShiftedEngine(HFEngine(self.model, self.tokenizer, options))

    def close(self) -> None:
        pass


@pytest.fixture
def shifted(monkeypatch):
    spec = EngineSpec(lambda model, tok, cfg, max_new: ShiftedBackend(model, tok), None, {},
                      "test: the hf loop, log-probs reported 0.3 nats low")
    monkeypatch.setitem(ENGINES, "shifted", spec)


def _first_step(tmp_path, name, *extra):
    tr = Trainer(tiny_config(tmp_path / name, "max_steps=1", "rollout.engine=shifted", *extra))
    tr.run(progress=False)
    return next(r for r in read_metrics(tr.out / "metrics.jsonl") if r["phase"] == "train")


def test_a_registered_engine_is_chosen_by_name_and_its_mismatch_logged(tmp_path, shifted):
    m = _first_step(tmp_path, "a")
    assert m["rollout/logprob_mismatch"] == pytest.approx(SHIFT, rel=1e-6)
    assert m["rollout/logprob_kl"] == pytest.approx(math.exp(SHIFT) - 1 - SHIFT, rel=1e-5)


@pytest.mark.parametrize("cap", [1.2, 5.0])
def test_the_importance_cap_scales_the_update_by_the_truncated_weight(tmp_path, shifted, cap):
    plain = _first_step(tmp_path, "plain", "optim.grad_clip=0")
    capped = _first_step(tmp_path, f"cap{cap}", "optim.grad_clip=0",
                         f"loss.sampler_importance_cap={cap}")
    factor = min(math.exp(SHIFT), cap)
    assert capped["grad_norm"] == pytest.approx(factor * plain["grad_norm"], rel=1e-4)
    assert capped["pg_loss"] == pytest.approx(factor * plain["pg_loss"], rel=1e-4, abs=1e-9)


def test_the_hf_engine_logs_no_mismatch(tmp_path):
    tr = Trainer(tiny_config(tmp_path / "hf", "max_steps=1"))
    tr.run(progress=False)
    m = next(r for r in read_metrics(tr.out / "metrics.jsonl") if r["phase"] == "train")
    assert "rollout/logprob_mismatch" not in m and m["time/sync_s"] >= 0


def test_an_unknown_engine_is_refused_naming_the_valid_ones(tmp_path):
    with pytest.raises(ValueError, match="unknown rollout engine 'nope'; valid: hf, vllm"):
        Trainer(tiny_config(tmp_path / "x", "eval.engine=nope"))
    assert not (tmp_path / "x").exists()


def test_open_engines_builds_one_backend_per_name(tmp_path, shifted):
    tr = Trainer(tiny_config(tmp_path / "b", "rollout.engine=shifted", "eval.engine=shifted"))
    try:
        assert len(tr.engines.backends) == 1
        assert isinstance(tr.engines.rollout, ShiftedEngine)
        assert tr.engines.eval.inner.options["temperature"] == tr.cfg.eval.temperature
    finally:
        tr.close()
    assert engines.ENGINES["hf"].module is None
