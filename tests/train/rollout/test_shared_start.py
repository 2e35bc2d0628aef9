"""``bestk.train.rollout.shared_start``: runs that start alike share their step-0 evaluation;
anything that shapes the evaluation keeps it apart."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bestk.compare import run_compare
from bestk.train.config import TrainConfig
from bestk.train.config.io import apply_overrides
from bestk.train.model.policy import load_policy
from bestk.train.rollout.evaluate import EvalResult
from bestk.train.rollout.shared_start import (
    shared_start_evaluation,
    start_digest,
    start_key,
)
from bestk.train.run.directory import read_metrics
from bestk.train.validation import resolve_config
from tests import conftest

pytestmark = pytest.mark.usefixtures("restore_torch_threads")


def _cfg(*extra: str):
    return resolve_config(apply_overrides(TrainConfig(), [*conftest.TINY, *extra]))


def _model(seed: int = 0):
    cfg = _cfg()
    return load_policy(cfg.model, "0123456789", seed=seed)[0]


EX = [{"id": i, "prompt": f"p{i}", "answer": "x"} for i in range(3)]


def _key(cfg, model, eval_seed=0, examples=EX):
    return start_key(cfg, model, eval_seed, examples)


def _result(seed: int) -> EvalResult:
    rng = np.random.default_rng(seed)
    r = rng.random((3, 2))
    return EvalResult({"pass@1": float(r.mean()), "entropy": 1.5}, r, ["a", "b", "c", "d",
                      "e", "f"], [{"id": i, "prompt": f"p{i}", "answer": "x"} for i in range(3)],
                      {"part": np.where(r > 0.5, r, np.nan)}, rng.integers(1, 5, (3, 2)) * 1.0)


def test_the_key_follows_what_shapes_the_evaluation_and_nothing_else():
    model = _model()
    base = _key(_cfg(), model)
    # how a run learns does not shape its step-0 evaluation; nor does the run's seed
    # itself (what it shapes -- weights, prompts, noise -- is in the key on its own)
    for same in ("estimator=maxrl", "optim.lr=0.5", "eval.every=7", "max_steps=9",
                 "loss.clip_high=0.5", "advantage_reward=success", "eval.shared_start=/x",
                 "seed=1"):
        assert _key(_cfg(same), model) == base, same
    # what is sampled and how, the noise, the prompts and the weights do
    for other in ("eval.n=3", "eval.temperature=0.5", "rollout.max_new_tokens=5", "threads=2",
                  "task.options={num_train: 64, num_eval: 5, max_len: 4}", "eval.seed=4"):
        assert _key(_cfg(other), model) != base, other
    assert _key(_cfg(), model, 1) != base
    assert _key(_cfg(), model, examples=EX[:2]) != base
    assert _key(_cfg(), model, examples=[{**EX[0], "answer": "y"}, *EX[1:]]) != base
    assert _key(_cfg(), _model(seed=3)) != base


def test_fresh_lora_adapters_of_any_seed_digest_as_their_base_and_trained_ones_do_not():
    """``W + s B A`` with ``B = 0`` is ``W``: adapters drawn with different seeds on one base
    share a start; once ``B`` moves, the adapter is part of the digest."""
    import torch

    lora = ("model.lora.r=2", "model.lora.target_modules=all-linear")
    cfg = _cfg(*lora)
    torch.manual_seed(0)
    base = load_policy(cfg.model, "0123456789", seed=0)[0]
    a = load_policy(cfg.model, "0123456789", seed=0)[0]
    b = load_policy(cfg.model, "0123456789", seed=0)[0]
    with torch.no_grad():  # the same base weights, adapters A drawn differently
        b.load_state_dict(a.state_dict())
        for name, p in b.named_parameters():
            if "lora_A" in name:
                p.normal_()
    assert any(not torch.equal(x, y) for x, y in zip(a.state_dict().values(),
                                                    b.state_dict().values(), strict=True))
    assert start_digest(a) == start_digest(b)
    assert _key(cfg, a) == _key(cfg, b)
    with torch.no_grad():
        next(p for n, p in b.named_parameters() if "lora_B" in n).add_(1e-3)
    assert start_digest(a) != start_digest(b)
    del base


def test_a_start_is_stored_once_and_read_back_equal(tmp_path):
    cfg, model = _cfg(f"eval.shared_start={tmp_path / 's'}"), _model()
    calls: list[int] = []

    def sample(seed: int):
        def run() -> EvalResult:
            calls.append(seed)
            return _result(seed)
        return run

    first = shared_start_evaluation(cfg, model, 0, 0, sample(1), EX)
    again = shared_start_evaluation(cfg, model, 0, 0, sample(2), EX)  # read, not sampled
    assert calls == [1]
    assert again.metrics == first.metrics and again.texts == first.texts
    assert again.examples == first.examples
    for a, b in ((again.rewards, first.rewards), (again.lengths, first.lengths),
                 (again.columns["part"], first.columns["part"])):
        np.testing.assert_array_equal(a, b)  # NaN where a reward function returned None
    # later steps, another noise, or no directory: sampled every time
    shared_start_evaluation(cfg, model, 0, 5, sample(3), EX)
    shared_start_evaluation(cfg, model, 1, 0, sample(4), EX)
    shared_start_evaluation(_cfg(), model, 0, 0, sample(5), EX)
    assert calls == [1, 3, 4, 5]
    # a stored file under another key (or unreadable) is not read
    (path,) = (tmp_path / "s").glob(f"start-{_key(cfg, model)}.json")
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "key": "other"}))
    shared_start_evaluation(cfg, model, 0, 0, sample(6), EX)
    path.write_text("{not json")
    shared_start_evaluation(cfg, model, 0, 0, sample(7), EX)
    assert calls == [1, 3, 4, 5, 6, 7]


def test_a_grid_evaluates_each_start_once_and_its_runs_start_equal(tmp_path):
    """Two methods and an A/A control on one seed: the two methods share one step-0
    evaluation (one file), the control (other noise) has its own; the shared start is
    what each run logged."""
    out = tmp_path / "c"
    run_compare(["grpo", "maxrl"], seeds=1, out=out, max_steps=1, progress=False,
                overrides=[*conftest.TINY, "checkpoint_every=1"], controls=["grpo"])
    files = sorted((out / "_start").glob("start-*.json"))
    assert len(files) == 2
    runs = {d: json.loads((out / d / "seed0" / "result.json").read_text())
            for d in ("grpo", "maxrl")}
    assert runs["grpo"]["start"] == runs["maxrl"]["start"]
    starts = [next(r for r in read_metrics(out / d / "seed0" / "metrics.jsonl")
                   if r["phase"] == "eval") for d in ("grpo", "maxrl")]
    assert starts[0] == starts[1]
    stored = {json.loads(f.read_text())["metrics"]["pass@1"] for f in files}
    assert runs["grpo"]["start"]["pass@1"] in stored
