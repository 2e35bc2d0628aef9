"""A real pretrained model end to end: ``bestk train`` on a real model, SmolLM2-135M-Instruct
from its GGUF file (the ``smollm2_gguf`` fixture), with LoRA, micro-batches of one completion and
gradient checkpointing, on CPU."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.usefixtures("restore_torch_threads")


# In the default run (42 s on an idle 2-core CPU, most of it the GGUF load; minutes under load)
def test_smollm2_gguf_trains_with_lora_micro_batches_and_checkpointing(
        smollm2_gguf, tmp_path, hide_modules):
    from bestk.train.config import TrainConfig
    from bestk.train.config.io import apply_overrides
    from bestk.train.trainer import Trainer

    out = tmp_path / "run"
    cfg = apply_overrides(TrainConfig(), [
        f"out={out}", f"model.path={smollm2_gguf}", "threads=2",
        "model.lora.r=2", "model.lora.target_modules=[q_proj]",
        "model.gradient_checkpointing=true", "loss.micro_batch_size=1",
        "task.name=arithmetic", "task.options={digits: 1, num_eval: 2}",
        "sft.steps=0", "max_steps=2", "rollout.prompts_per_step=1", "rollout.n=2",
        "rollout.max_new_tokens=8", "eval.n=2", "eval.num_prompts=2", "eval.every=2",
        "checkpoint_every=2",
    ])
    tr = Trainer(cfg)
    base = tr.model.get_base_model()
    assert base.is_gradient_checkpointing  # model.gradient_checkpointing reached the model
    prompt = tr.rl_prompts[0]["prompt"]
    assert prompt.startswith("<|im_start|>") and prompt.endswith("<|im_start|>assistant\n")
    tr.run(progress=False)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r["phase"] == "eval"]
    assert [r["step"] for r in evals] == [0, 2]  # pass@k before and after RL
    assert all(0 <= r[f"pass@{k}"] <= 1 for r in evals for k in (1, 2))
    train = [r for r in records if r["phase"] == "train"]
    assert len(train) == 2 and all(r["grad_norm"] >= 0 and r["loss"] == r["loss"] for r in train)

    hide_modules("gguf")  # final/ is an ordinary Hugging Face directory
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(out / "final")
    tok = AutoTokenizer.from_pretrained(out / "final")
    assert model.config.vocab_size == 49152 and tok.eos_token == "<|im_end|>"
    assert "<|im_start|>" in tok.apply_chat_template(
        [{"role": "user", "content": "1+1="}], tokenize=False, add_generation_prompt=True)


@pytest.mark.slow  # loads the GGUF file, then final/ into TRL, and trains a step: about a minute
def test_final_of_the_gguf_model_trains_in_trls_grpo_trainer(smollm2_gguf, tmp_path):
    """final/ of SmolLM2 read from its GGUF file is a plain float model: TRL's GRPOTrainer
    trains it (transformers 5.24 records the file's quantization on the model it loads, and
    TRL refuses a directory that keeps it: "cannot perform fine-tuning on purely quantized
    models")."""
    pytest.importorskip("trl")
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    from bestk.train.config import ModelConfig
    from bestk.train.model.hf import save_final
    from bestk.train.model.policy import load_policy
    from tests._trl_tiny import grpo_config

    model, tok = load_policy(ModelConfig(path=str(smollm2_gguf)), None)
    save_final(tmp_path, model, tok)
    del model
    final = tmp_path / "final"
    assert "quantization_config" not in json.loads((final / "config.json").read_text())
    trainer = GRPOTrainer(
        model=str(final), reward_funcs=lambda completions, **_: [float(len(c)) for c in
                                                                  completions],
        args=grpo_config(tmp_path / "trl", max_steps=1, num_generations=2,
                         per_device_train_batch_size=2, max_completion_length=4),
        train_dataset=Dataset.from_list([{"prompt": "1+1="}, {"prompt": "2+2="}]),
        processing_class=AutoTokenizer.from_pretrained(final))
    trainer.train()
    assert trainer.state.global_step == 1
