"""How a run starts: the rewards it logs (several functions), its sampling values (the
model's ``generation_config`` for ``null`` keys, the header line), its prompt length check,
and the sampling options the rollout gets (top-k, prompt cut), bit-identical when off."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bestk.tasks import load_task
from bestk.train.config import TrainConfig
from bestk.train.config.io import apply_overrides
from bestk.train.model.policy import load_policy
from bestk.train.rollout.sampler import sample
from bestk.train.rollout.scoring import score_batch
from bestk.train.rollout.settings import sampling_options
from bestk.train.setup import check_run_prompts
from bestk.train.trainer import Trainer
from bestk.train.validation import resolve_defaults
from tests.conftest import TINY, set_args, tiny_config

pytestmark = pytest.mark.usefixtures("restore_torch_threads")


def test_score_batch_logs_each_function_of_several():
    task = load_task("strings", {"num_train": 8, "num_eval": 4},
                     reward=["exact", "positional"], reward_weights=[2.0, 1.0])
    exs = task.train[:2]
    texts = [exs[0]["answer"], "x"]
    metrics: dict[str, float] = {}
    total = score_batch(task, exs, texts, metrics)
    assert total.tolist() == [3.0, 0.0]
    assert metrics == {"rewards/exact/mean": 0.5, "rewards/positional/mean": 0.5}
    one = load_task("strings", {"num_train": 8, "num_eval": 4})
    metrics = {}
    assert score_batch(one, exs, texts, metrics).tolist() == [1.0, 0.0] and metrics == {}


def test_null_sampling_keys_take_the_model_generation_config(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"temperature": 0.7, "top_k": 20, "eos_token_id": 2}))
    cfg = apply_overrides(TrainConfig(), [f"model.path={tmp_path}", "rollout.temperature=null",
                                          "rollout.top_p=null", "rollout.top_k=null",
                                          "eval.top_k=null"])
    got = resolve_defaults(cfg)
    r, e = got.rollout, got.eval
    assert (r.temperature, r.top_p, r.top_k) == (0.7, 1.0, 20)
    assert (e.temperature, e.top_p, e.top_k) == (1.0, 1.0, 20)  # set keys are kept
    assert cfg.rollout.temperature is None  # the given config is not changed
    from bestk.train.rollout.settings import sampling_header

    assert sampling_header(got) == (
        "sampling: temperature=0.7 (generation_config) top_p=1.0 (config) top_k=20 "
        "(generation_config); eval: temperature=1.0 (config) top_p=1.0 (config) top_k=20 "
        "(generation_config)")
    # The default config keeps 1.0 / 1.0 / 0 (the file sets none of them for it).
    plain = resolve_defaults(apply_overrides(TrainConfig(), [f"model.path={tmp_path}"]))
    assert (plain.rollout.temperature, plain.rollout.top_p, plain.rollout.top_k) == (1.0, 1.0, 0)
    (tmp_path / "generation_config.json").write_text(json.dumps({"top_p": 3}))
    with pytest.raises(ValueError, match="the model's generation_config top_p must be in"):
        resolve_defaults(cfg)


def _tiny(*extra: str):
    cfg = apply_overrides(TrainConfig(), ["task.options={num_train: 16, num_eval: 4}", *extra])
    task = load_task("strings", cfg.task.options)
    model, tok = load_policy(cfg.model, task.alphabet, seed=0)
    return cfg, task, model, tok


def test_prompt_length_check_and_cut():
    cfg, task, model, tok = _tiny("rollout.max_prompt_length=8")
    lengths = [len(ex["prompt"]) for ex in [*task.train, *task.eval]]  # one token a character
    assert check_run_prompts(cfg, task, tok) == sum(n > 8 for n in lengths) > 0
    cfg.rollout.prompt_truncation = "error"
    with pytest.raises(ValueError, match=r"prompts are longer than rollout.max_prompt_length = 8"):
        check_run_prompts(cfg, task, tok)
    cfg.rollout.prompt_truncation = "left"
    prompts = [ex["prompt"] for ex in task.train[:4]]
    ro = sample(model, tok, prompts, n=2, max_new_tokens=3,
                generator=torch.Generator().manual_seed(0), **sampling_options(cfg))
    assert ro.prompt_ids.shape[1] == 8
    assert ro.metrics == {"prompts_truncated": float(sum(len(p) > 8 for p in prompts))}
    cut = tok(prompts[0][-8:], add_special_tokens=False)["input_ids"]
    assert ro.prompt_ids[0].tolist() == cut  # the last 8 tokens


def test_sampling_options_off_are_bit_identical_and_top_k_one_is_greedy():
    cfg, task, model, tok = _tiny()
    prompts = [ex["prompt"] for ex in task.train[:3]]

    def run(**kw):
        return sample(model, tok, prompts, n=2, max_new_tokens=4,
                      generator=torch.Generator().manual_seed(1), **kw)

    base, opts = run(), run(**sampling_options(cfg))
    assert torch.equal(base.completion_ids, opts.completion_ids) and opts.metrics == {}
    assert torch.equal(base.logprobs, opts.logprobs)
    greedy = run(top_k=1)
    with torch.no_grad():
        first = model(**tok(prompts, padding=True, return_tensors="pt",
                            add_special_tokens=False)).logits[:, -1].argmax(-1)
    assert np.array_equal(greedy.completion_ids[::2, 0].numpy(), first.numpy())


def _long_prompts(tmp_path, n: int = 20, chars: int = 300):
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"{i}:" + "x" * chars, "answer": "1"}) + "\n"
                            for i in range(n)))
    return ["task.name=jsonl", f"task.options={{path: {path}, num_eval: 4}}"]


def test_prompts_beyond_the_model_context_are_refused_before_work(tmp_path):
    """20 prompts of 300 characters for the tiny model (``max_positions`` 128, a token a
    character): refused in one line when the run starts, before the SFT, naming the context
    and the fix; 100k-character prompts used to run the kernel out of memory. A prompt cut to
    ``rollout.max_prompt_length`` fits; the SFT warm-up, which sees whole prompts, is then
    refused on its own."""
    from tests.conftest import invoke, one_line_error

    long = [*_long_prompts(tmp_path), "rollout.max_new_tokens=8", "max_steps=1"]
    out = tmp_path / "run"
    with pytest.raises(ValueError) as e:
        Trainer(tiny_config(out, *long))
    assert str(e.value) == (
        "20 of 20 prompts do not fit the model's context of 128 tokens with "
        "rollout.max_new_tokens=8 (the longest has 303 tokens); set "
        "rollout.max_prompt_length=120 (or less) to keep the last tokens of each, or shorten "
        "them")
    assert not out.exists()
    sets = set_args(*TINY, *long)
    line = one_line_error(invoke("train", "--out", out, "--quiet", *sets))
    assert line == f"error: {e.value}"
    with pytest.raises(ValueError, match="the SFT warm-up trains on whole prompts and answers: "
                       "16 of its 16 examples are longer than the model's context of 128 tokens "
                       "\\(the longest has 305\\); set sft.steps=0, or shorten them"):
        Trainer(tiny_config(out, *long, "rollout.max_prompt_length=120"))
    Trainer(tiny_config(out, *long, "rollout.max_prompt_length=120", "sft.steps=0")).close()
    with pytest.raises(ValueError, match="rollout.max_new_tokens=128 leaves no room for a "
                       "prompt in the model's context of 128 tokens"):
        Trainer(tiny_config(tmp_path / "other", "rollout.max_new_tokens=128"))


def test_a_reward_that_raises_is_found_before_the_sft(tmp_path):
    """A reward function that raises on the task's own fields (a keyword the data does not
    have) or on an empty completion is found by a probe call when the run starts: one line
    naming the function, before the SFT warm-up (which it used to follow, ending in a
    traceback at the step-0 evaluation), nothing left in ``--out``."""
    from tests.conftest import RAISING, invoke, one_line_error

    path = tmp_path / "raising.py"
    path.write_text(RAISING)
    for name, why in (("wrong_field", "TypeError"), ("crash", "ZeroDivisionError")):
        out = tmp_path / name
        sets = [x for s in [*TINY, f"task.reward={path}:{name}"] for x in ("--set", s)]
        line = one_line_error(invoke("train", "--out", out, "--quiet", "--max-steps", "1",
                                     *sets))
        assert line.startswith(f"error: reward function {name!r} of task 'strings/reverse' "
                               f"raised {why}")
        assert line.endswith("(a probe call before any work)")
        assert not out.exists()


def test_train_warns_once_about_prompt_characters_the_tiny_tokenizer_does_not_know(
        tmp_path, capsys):
    """Emoji, NUL and non-ASCII prompts of a dataset given to the tiny model (whose character
    tokenizer knows printable ASCII) were silently read as unknown tokens: one warning now,
    as ``bestk eval`` gives, with the count of such prompts; none for a task it knows."""
    data = tmp_path / "data.jsonl"
    questions = ["😀 smile", "nul\x00byte", "日本語", "naïve", "plain 1 + 1"] * 4
    data.write_text("".join(json.dumps({"question": q, "answer": "2"}) + "\n" for q in questions))
    cfg = tiny_config(tmp_path / "run", "task.name=dataset", "max_steps=1",
                      "rollout.max_new_tokens=4", f"task.options={{path: {data}, num_eval: 4}}")
    Trainer(cfg).close()
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(
        "warning: 16 of 20 prompts hold characters the model's tokenizer does not know (e.g. ")
    assert "the tiny model's character tokenizer knows only the task's alphabet" in warnings[0]
    Trainer(tiny_config(tmp_path / "plain", "max_steps=1")).close()
    assert "warning" not in capsys.readouterr().err
