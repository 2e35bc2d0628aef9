"""Real Hugging Face models in ``bestk train``: a local Qwen2 with a BPE tokenizer trained here
and a chat template, a GSM8K-format parquet, LoRA through PEFT (only adapters train; the
reference is the base model with adapters disabled, no second copy), checkpoints and resume
with LoRA, a loadable ``final/``, and the autocast switch."""

from __future__ import annotations

import contextlib
import copy
import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from bestk.cli import app
from bestk.tasks import load_task
from bestk.train.config import LoRAConfig, TrainConfig
from bestk.train.config.io import apply_overrides
from bestk.train.model.chat import chat_messages, chat_prompt, render_messages, render_task_prompts
from bestk.train.model.hf import autocast
from bestk.train.model.logprobs import sequence_logprobs
from bestk.train.model.lora import AdaptersDisabled, add_lora, merged_state_dict, reference_policy
from bestk.train.optim import PolicyOptimizer
from bestk.train.rollout.sampler import sample
from bestk.train.run.directory import read_metrics
from bestk.train.runtime.files import list_checkpoints
from bestk.train.trainer import Trainer
from tests.conftest import ROOT

pytestmark = pytest.mark.usefixtures("restore_torch_threads")


def _config(model_dir, data, out, *extra: str) -> TrainConfig:
    train_path, test_path = data
    cfg = TrainConfig()
    apply_overrides(cfg, [
        f"out={out}", f"model.path={model_dir}", "threads=1", "task.name=dataset",
        f"task.options={{path: {train_path}, eval_path: {test_path}}}",
        "sft.steps=2", "sft.batch_size=4", "rollout.prompts_per_step=2", "rollout.n=2",
        "rollout.max_new_tokens=6", "eval.n=2", "eval.num_prompts=2", "eval.every=2",
        "optim.lr=0.05", "estimator=grpo", *extra,
    ])
    return cfg


LORA = ["model.lora.r=4", "model.lora.alpha=8", "model.lora.target_modules=[q_proj, v_proj]",
        "loss.kl_coef=0.1", "checkpoint_every=2", "max_steps=4"]


def _base(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir).eval()


def _rollout(trainer):
    gen = torch.Generator().manual_seed(0)
    prompts = [e["prompt"] for e in trainer.task.eval[:2]]
    return sample(trainer.model, trainer.tokenizer, prompts, n=2, max_new_tokens=5,
                  generator=gen)


def _logp(model, ro):
    with torch.no_grad():
        return sequence_logprobs(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids,
                                 ro.completion_mask)[0]


class Crash(RuntimeError):
    pass


def test_lora_run_with_chat_template_crash_resume_and_final(tiny_hf_model, gsm8k_parquet,
                                                             tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    # Uninterrupted reference run.
    ref_run = Trainer(_config(tiny_hf_model, gsm8k_parquet, tmp_path / "a", *LORA))
    ref_run.run(progress=False)

    # The same run, crashed after step 3 was logged but before its checkpoint, then resumed.
    def crash(step, metrics):
        if step == 3:
            raise Crash

    out = tmp_path / "b"
    with pytest.raises(Crash):
        Trainer(_config(tiny_hf_model, gsm8k_parquet, out, *LORA), on_step=crash).run(
            progress=False)
    trainer = Trainer.resume(out)
    assert trainer.step == 2 and trainer.state.kind == "resume"
    trainer.run(progress=False)
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl") if r["phase"] == "train"] \
        == [1, 2, 3, 4]

    # Resume with LoRA reproduces the uninterrupted run exactly.
    a, b = ref_run.model.state_dict(), trainer.model.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)

    # The chat template wrapped each prompt as a user message with the generation prompt.
    ex = trainer.task.train[0]
    assert ex["prompt"] == (f"<|im_start|>user\n{ex['user_prompt']}<|im_end|>\n"
                            "<|im_start|>assistant\n")

    # Only the adapters trained: the base weights are the ones on disk, the adapters moved.
    base = _base(tiny_hf_model)
    merged_free = {k.replace(".base_layer", ""): v
                   for k, v in trainer.model.get_base_model().state_dict().items()
                   if ".lora_" not in k}
    for k, v in base.state_dict().items():
        torch.testing.assert_close(merged_free[k], v, rtol=0, atol=0)
    lora_b = [v for k, v in trainer.model.named_parameters() if "lora_B" in k]
    assert lora_b and all(float(v.detach().abs().max()) > 0 for v in lora_b)  # initialised at 0
    trainable = {k for k, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_" in k for k in trainable)
    assert len(trainer.optim.optimizer.param_groups[0]["params"]) == len(trainable)

    # The reference: the policy with adapters disabled, equal to the base model, no weights.
    assert isinstance(trainer.ref_model, AdaptersDisabled)
    assert list(trainer.ref_model.parameters()) == [] and trainer.ref_model.state_dict() == {}
    ro = _rollout(trainer)
    ref_lp, base_lp, pol_lp = _logp(trainer.ref_model, ro), _logp(base, ro), _logp(
        trainer.model, ro)
    mask = ro.completion_mask.bool()
    torch.testing.assert_close(ref_lp[mask], base_lp[mask], rtol=1e-6, atol=1e-6)
    assert float((pol_lp - base_lp)[mask].abs().max()) > 1e-4  # the adapters change the policy
    assert any(r.get("kl_ref", 0) != 0 for r in read_metrics(out / "metrics.jsonl")
               if r["phase"] == "train")
    from safetensors import safe_open

    with safe_open(str(list_checkpoints(out / "checkpoints")[-1]), "pt") as f:
        assert not any(k.startswith("ref.") for k in f.keys())  # no second copy on disk

    # final/ is a plain HF model (adapters merged) computing the LoRA policy; final/adapter/
    # reloads the adapters onto the base model.
    final = AutoModelForCausalLM.from_pretrained(out / "final").eval()
    torch.testing.assert_close(_logp(final, ro)[mask], pol_lp[mask], rtol=1e-5, atol=1e-5)
    again = PeftModel.from_pretrained(_base(tiny_hf_model), out / "final" / "adapter").eval()
    torch.testing.assert_close(_logp(again, ro)[mask], pol_lp[mask], rtol=1e-5, atol=1e-5)

    # ``bestk eval`` on final/ uses the chat template too.
    res = CliRunner().invoke(app, ["eval", "--model", str(out / "final"), "--task", "dataset",
                                   "-n", "2", "--set", f"task.options={{path: "
                                   f"{gsm8k_parquet[0]}, num_eval: 2}}",
                                   "--set", "rollout.max_new_tokens=4"])
    assert res.exit_code == 0, res.output
    assert "pass@k" in res.output


def test_full_fine_tune_of_a_local_model_keeps_a_copy_as_reference(tiny_hf_model,
                                                                   gsm8k_parquet, tmp_path):
    cfg = _config(tiny_hf_model, gsm8k_parquet, tmp_path / "full", "max_steps=1",
                  "loss.kl_coef=0.1", "model.chat_template=none")
    trainer = Trainer(cfg)
    trainer.run(progress=False)
    assert "user_prompt" not in trainer.task.train[0]  # chat_template none: the raw text
    assert not isinstance(trainer.ref_model, AdaptersDisabled)
    assert all(not p.requires_grad for p in trainer.ref_model.parameters())
    assert all(p.requires_grad for p in trainer.model.parameters())


def test_render_task_prompts(tiny_hf_model):
    from transformers import AutoTokenizer

    from bestk.train.model.policy import build_char_tokenizer

    tok = AutoTokenizer.from_pretrained(tiny_hf_model)
    task = load_task("strings", {"num_train": 8, "num_eval": 2})
    raw = [e["prompt"] for e in task.train]
    assert not render_task_prompts(task, tok, "none") and [e["prompt"] for e in task.train] == raw
    assert not render_task_prompts(task, build_char_tokenizer("0123"), "auto")  # no template
    assert render_task_prompts(task, tok, "auto")
    assert [e["user_prompt"] for e in task.train] == raw
    assert task.eval[0]["prompt"] == tok.apply_chat_template(
        [{"role": "user", "content": task.eval[0]["user_prompt"]}], tokenize=False,
        add_generation_prompt=True)
    once = [e["prompt"] for e in task.train]
    render_task_prompts(task, tok, "auto")  # idempotent
    assert [e["prompt"] for e in task.train] == once
    with pytest.raises(ValueError, match="auto or none"):
        render_task_prompts(task, tok, "chatml")


def _chat_task(tmp_path, system_prompt=None):
    import json

    rows = [{"prompt": [{"role": "user", "content": "plain"}], "answer": "1"},
            {"prompt": [{"role": "system", "content": "Own system."},
                        {"role": "user", "content": "with its own system"}], "answer": "2"},
            {"prompt": [{"role": "user", "content": "prefilled"},
                        {"role": "assistant", "content": "Sure:"}], "answer": "3"},
            {"prompt": "a text prompt", "answer": "4"}]
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_task("jsonl", {"path": str(path), "eval_path": str(path)},
                     system_prompt=system_prompt)


def test_render_task_prompts_of_chat_messages_and_a_system_prompt(tiny_hf_model, tmp_path):
    from transformers import AutoTokenizer

    from bestk.train.model.policy import build_char_tokenizer

    tok = AutoTokenizer.from_pretrained(tiny_hf_model)
    task = _chat_task(tmp_path, system_prompt="Be brief.")
    assert render_task_prompts(task, tok, "auto")
    plain, own, prefilled, text = task.train
    sys_msg = {"role": "system", "content": "Be brief."}
    assert plain["prompt_messages"] == [sys_msg, {"role": "user", "content": "plain"}]
    assert plain["prompt"] == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"
                               "plain<|im_end|>\n<|im_start|>assistant\n")
    assert plain["user_prompt"] == "plain"
    assert own["prompt_messages"][0] == {"role": "system", "content": "Own system."}  # kept
    assert prefilled["prompt"].endswith("<|im_start|>assistant\nSure:")  # continued, no new turn
    assert text["prompt_messages"] == [sys_msg, {"role": "user", "content": "a text prompt"}]
    assert text["user_prompt"] == "a text prompt"
    assert [e["prompt"] for e in task.eval] == [e["prompt"] for e in task.train]
    # without a system prompt a text prompt renders exactly as before, a message list as itself
    task = _chat_task(tmp_path)
    render_task_prompts(task, tok, "auto")
    assert task.train[3]["prompt"] == chat_prompt(tok, "a text prompt")
    assert "prompt_messages" not in task.train[3]
    assert task.train[0]["prompt"] == chat_prompt(tok, "plain")
    assert task.train[1]["prompt"] == render_messages(tok, task.train[1]["prompt_messages"])
    # nothing to render them with: one line, no garbage prompts
    for mode, tk, why in (("none", tok, "model.chat_template is none"),
                          ("auto", build_char_tokenizer("abc"), "the tokenizer has no chat "
                                                                "template")):
        with pytest.raises(ValueError, match=f"prompts are chat messages, which only a chat "
                           f"template can show the model, but {why}"):
            render_task_prompts(_chat_task(tmp_path), tk, mode)
    strings = load_task("strings", {"num_train": 8, "num_eval": 2}, system_prompt="Hi.")
    with pytest.raises(ValueError, match="task.system_prompt is set, which only a chat template"):
        render_task_prompts(strings, tok, "none")


def test_chat_messages():
    assert chat_messages("x") == [{"role": "user", "content": "x"}]
    assert chat_messages("x", "S") == [{"role": "system", "content": "S"},
                                       {"role": "user", "content": "x"}]
    own = [{"role": "system", "content": "O"}, {"role": "user", "content": "x"}]
    assert chat_messages(own, "S") == own and chat_messages(own, "S") is not own


def test_a_run_on_a_chat_format_dataset(tiny_hf_model, tmp_path):
    """TRL's conversational ``prompt`` column through ``bestk train``: the model sees the
    chat template's rendering of the messages, not the Python text of the list."""
    import json

    from tests.conftest import gsm8k_rows

    for name, n in (("train", 12), ("test", 4)):
        rows = [{"prompt": [{"role": "system", "content": "Solve it."},
                            {"role": "user", "content": r["question"]}], "answer": r["answer"]}
                for r in gsm8k_rows(n, offset=0 if name == "train" else 500)]
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = _config(tiny_hf_model, (tmp_path / "train.jsonl", tmp_path / "test.jsonl"),
                  tmp_path / "run", "task.options.prompt_field=prompt", "max_steps=1",
                  "sft.steps=1")
    trainer = Trainer(cfg)
    trainer.run()
    ex = trainer.task.train[0]
    assert ex["prompt"].startswith("<|im_start|>system\nSolve it.<|im_end|>\n<|im_start|>user\n")
    assert "[{" not in ex["prompt"] and ex["user_prompt"] == gsm8k_rows(1)[0]["question"]
    assert [r["phase"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl")][-1] == "eval"


def test_merged_state_dict_is_w_plus_scaled_ba(tiny_hf_model):
    model = add_lora(_base(tiny_hf_model), LoRAConfig(r=2, alpha=6.0,
                                                      target_modules=["q_proj", "o_proj"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p))
    merged = merged_state_dict(model)
    base = _base(tiny_hf_model).state_dict()
    assert merged.keys() == base.keys()
    layer = model.get_base_model().model.layers[1].self_attn.q_proj
    a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    want = base["model.layers.1.self_attn.q_proj.weight"] + (6.0 / 2) * (b @ a)
    torch.testing.assert_close(merged["model.layers.1.self_attn.q_proj.weight"], want)
    torch.testing.assert_close(merged["model.layers.1.mlp.up_proj.weight"],
                               base["model.layers.1.mlp.up_proj.weight"], rtol=0, atol=0)


def test_lora_adapters_are_float32_or_in_the_model_s_dtype(tiny_hf_model):
    """model.lora.dtype: float32 adapters (PEFT's upcast) with ``float32``, the bfloat16
    model's own dtype with ``model`` and with the default ``auto`` on a bfloat16 model;
    bfloat16 adapters compute the float32 adapters' output up to bfloat16 rounding and are
    stepped through float32 masters (only they train)."""
    base = _base(tiny_hf_model).to(torch.bfloat16)
    up = add_lora(copy.deepcopy(base), LoRAConfig(r=2, target_modules=["q_proj", "v_proj"],
                                                  dtype="float32"))
    auto = add_lora(copy.deepcopy(base), LoRAConfig(r=2, target_modules=["q_proj", "v_proj"]))
    assert all(p.dtype == torch.bfloat16 for n, p in auto.named_parameters() if ".lora_" in n)
    own = add_lora(copy.deepcopy(base), LoRAConfig(r=2, target_modules=["q_proj", "v_proj"],
                                                   dtype="model"))
    lora = {n: p for n, p in own.named_parameters() if ".lora_" in n}
    assert lora and all(p.dtype == torch.bfloat16 for p in lora.values())
    assert all(p.dtype == torch.float32 for n, p in up.named_parameters() if ".lora_" in n)
    with torch.no_grad():  # the same adapters in both (B != 0, so they act)
        for (n, p), (n2, q) in zip(up.named_parameters(), own.named_parameters(), strict=True):
            assert n == n2
            if ".lora_" in n:
                p.copy_(torch.randn_like(p) * 0.1)
                q.copy_(p.to(q.dtype))
    ids = torch.tensor([[3, 5, 7, 9, 11]])
    with torch.no_grad():
        a, b = up(input_ids=ids).logits.float(), own(input_ids=ids).logits.float()
    assert not torch.equal(a, b)  # computed differently ...
    torch.testing.assert_close(b, a, rtol=0.05, atol=0.05)  # ... to bfloat16 precision
    opt = PolicyOptimizer(own, apply_overrides(TrainConfig(), ["optim.lr=1e-2"]))
    assert opt.adamw.active and len(opt.masters()) == len(lora)
    assert all(m.dtype == torch.float32 for m in opt.masters().values())
    with pytest.raises(ValueError, match="model.lora.dtype"):
        apply_overrides(TrainConfig(), ["model.lora.dtype=float16"])


def test_lora_errors_and_the_reference_of_a_plain_model(tiny_hf_model):
    with pytest.raises(ValueError, match="model.lora.target_modules"):
        add_lora(_base(tiny_hf_model), LoRAConfig(r=2, target_modules=["no_such_proj"]))
    with pytest.raises(ValueError, match="r must be >= 1"):
        add_lora(_base(tiny_hf_model), LoRAConfig(r=0))
    plain = _base(tiny_hf_model)
    ref = reference_policy(plain)
    assert ref is not plain and all(not p.requires_grad for p in ref.parameters())
    cfg = TrainConfig()  # the schema refuses the values as they are read
    with pytest.raises(ValueError, match="'model.lora.r' must be an integer >= 0"):
        apply_overrides(cfg, ["model.lora.r=-1"])
    with pytest.raises(ValueError, match="'model.lora.target_modules' must be a list of module"):
        apply_overrides(cfg, ["model.lora.r=4", "model.lora.target_modules=[]"])


def test_autocast_is_bf16_on_cuda_only(monkeypatch):
    assert isinstance(autocast("cpu", "auto"), contextlib.nullcontext)
    assert isinstance(autocast("cpu", "none"), contextlib.nullcontext)
    with pytest.raises(ValueError, match="bf16 needs a CUDA device"):
        autocast("cpu", "bf16")
    with pytest.raises(ValueError, match="auto, bf16 or none"):
        autocast("cpu", "fp8")
    assert isinstance(autocast("cuda", "none"), contextlib.nullcontext)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert isinstance(autocast("cuda:0", "auto"), contextlib.nullcontext)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    with pytest.warns(UserWarning) if not torch.cuda.is_available() else contextlib.nullcontext():
        ctx = autocast("cuda:0", "auto")  # built here; torch warns that CUDA is absent
    assert isinstance(ctx, torch.autocast)
    assert ctx.device == "cuda" and ctx.fast_dtype == torch.bfloat16
    cfg = TrainConfig()  # the schema's rule between model.autocast and device
    with pytest.raises(ValueError, match="'model.autocast' is bf16, which needs a CUDA device"):
        apply_overrides(cfg, ["model.autocast=bf16"])
    assert apply_overrides(cfg, ["model.autocast=bf16", "device=cuda"]).model.autocast == "bf16"


def test_the_real_model_recipe_is_a_valid_config():
    """examples/train/qwen2.5-0.5b-gsm8k-lora.yaml (docs/training.md) parses and passes every
    check that needs neither the GPU nor the downloaded files."""

    from bestk.train.config.io import load_config
    from bestk.train.validation import check_names, check_values

    path = ROOT / "examples/train/qwen2.5-0.5b-gsm8k-lora.yaml"
    cfg = load_config(path)
    check_names(cfg)
    check_values(cfg)
    assert cfg.model.lora.r == 16 and cfg.model.lora.target_modules == "all-linear"
    assert (cfg.task.name, cfg.device, cfg.model.chat_template) == ("dataset", "cuda", "auto")
    assert cfg.report_to == ["tensorboard"] and cfg.loss.kl_coef > 0


# -- final/ of a model read from a GGUF file -------------------------------------------------------
#: The ``config.quantization_config`` that transformers 5.24 (its GGUF quantizer; 5.10 records
#: nothing) leaves on a model it read from a GGUF file and dequantized into float tensors.
GGUF_RECORD = {"quant_method": "gguf"}


def _as_read_from_gguf(model, quantizer: object = None):
    """``model`` (a PEFT model: its base) as transformers 5.24 leaves it: the record,
    ``is_quantized``, ``quantization_method`` and ``quantizer`` as ``hf_quantizer``
    (``None``: what transformers 5.10's ``save_pretrained`` can serialize, unlike a stand-in
    object)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    base.config.quantization_config = dict(GGUF_RECORD)
    base.hf_quantizer, base.is_quantized, base.quantization_method = quantizer, True, "gguf"
    return base


def test_as_plain_model_hides_the_gguf_record_and_gives_it_back(tiny_hf_model):
    from transformers import AutoModelForCausalLM

    from bestk.train.model.hf import QUANTIZER_ATTRIBUTES, as_plain_model, gguf_quantization

    model = AutoModelForCausalLM.from_pretrained(tiny_hf_model)
    assert gguf_quantization(model) is None
    before = model.config.to_dict()
    with as_plain_model(model):  # nothing to hide: untouched
        assert model.config.to_dict() == before
    quantizer = object()  # stands for the GgufHfQuantizer
    _as_read_from_gguf(model, quantizer)
    assert gguf_quantization(model) == GGUF_RECORD
    state = {k: vars(model)[k] for k in QUANTIZER_ATTRIBUTES}
    with as_plain_model(model):
        assert "quantization_config" not in model.config.to_dict()
        assert gguf_quantization(model) is None and model.hf_quantizer is None
        assert not model.is_quantized and not hasattr(model, "quantization_method")
    assert gguf_quantization(model) == GGUF_RECORD
    assert {k: vars(model)[k] for k in QUANTIZER_ATTRIBUTES} == state
    with pytest.raises(KeyError), as_plain_model(model):
        raise KeyError  # given back on an error too
    assert gguf_quantization(model) == GGUF_RECORD and model.hf_quantizer is quantizer
    del model.is_quantized, model.quantization_method  # attributes it lacked stay absent
    with as_plain_model(model):
        pass
    assert "is_quantized" not in vars(model) and "quantization_method" not in vars(model)


@pytest.mark.parametrize("lora", [False, True])
def test_final_of_a_gguf_model_is_a_plain_float_model_that_trl_trains(tiny_hf_model, tmp_path,
                                                                       lora):
    """final/ of a model read from a GGUF file (with LoRA: merged, + adapter/) has no
    ``quantization_config``, so TRL's GRPOTrainer (and any transformers Trainer) trains it
    rather than refusing a "purely quantized" model; the live model keeps its record."""
    pytest.importorskip("trl")
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    from bestk.train.config import ModelConfig
    from bestk.train.model.hf import save_final
    from bestk.train.model.policy import load_policy
    from tests._trl_tiny import grpo_config

    lora_cfg = LoRAConfig(r=2, target_modules=["q_proj"]) if lora else LoRAConfig()
    model, tok = load_policy(ModelConfig(path=str(tiny_hf_model), lora=lora_cfg), None)
    base = _as_read_from_gguf(model)
    save_final(tmp_path, model, tok)
    final = tmp_path / "final"
    config = json.loads((final / "config.json").read_text())
    assert "quantization_config" not in config and config["dtype"] == "float32"
    assert (final / "adapter").is_dir() == lora
    assert base.config.quantization_config == GGUF_RECORD and base.is_quantized  # as it was

    rows = [{"prompt": f"Tom has {i} apples."} for i in range(8)]
    trainer = GRPOTrainer(
        model=str(final), reward_funcs=lambda completions, **_: [float(len(c)) for c in
                                                                  completions],
        args=grpo_config(tmp_path / "trl", max_steps=1, num_generations=2,
                         per_device_train_batch_size=2),
        train_dataset=Dataset.from_list(rows), processing_class=AutoTokenizer.from_pretrained(
            final))
    assert not getattr(trainer.model, "is_quantized", False)
    trainer.train()
    assert trainer.state.global_step == 1


# -- stop ids and gradient checkpointing ----------------------------------------------------------
def test_stop_token_ids_are_the_tokenizers_eos_and_every_generation_config_eos(tiny_hf_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bestk.train.model.hf import stop_token_ids

    tok = AutoTokenizer.from_pretrained(tiny_hf_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_hf_model)
    eos, start, pad = (tok.convert_tokens_to_ids(t)
                       for t in ("<|im_end|>", "<|im_start|>", "<|endoftext|>"))
    assert stop_token_ids(model, tok) == [eos]
    model.generation_config.eos_token_id = [pad, eos, start]  # a list, as Llama 3 ships
    assert stop_token_ids(model, tok) == [eos, pad, start]
    lora = add_lora(model, LoRAConfig(r=2))
    assert stop_token_ids(lora, tok) == [eos, pad, start]
    model.generation_config.eos_token_id = None
    assert stop_token_ids(model, tok) == [eos]


def _grads_of_a_pg_loss(model, ids, mask, mlp_calls: list[int]):
    """Gradients of a policy-gradient loss with an entropy bonus; ``mlp_calls`` counts the
    runs of the first layer's MLP (its ``forward``: the recomputation runs no module hooks)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    mlp = base.model.layers[0].mlp
    forward = mlp.forward

    def counted(*args, **kwargs):
        mlp_calls.append(1)
        return forward(*args, **kwargs)

    mlp.forward = counted
    try:
        model.train()
        model.zero_grad(set_to_none=True)
        logp, ent = sequence_logprobs(model, ids[:, :3], mask[:, :3], ids[:, 3:], mask[:, 3:],
                                      with_entropy=True)
        adv = torch.linspace(-1, 1, ids.shape[0])[:, None]
        (-(adv * logp).mean() - 0.01 * ent.mean()).backward()
    finally:
        mlp.forward = forward
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("lora", [False, True])
def test_gradient_checkpointing_gives_the_same_gradients(tiny_hf_model, lora):
    """The gradients of a policy-gradient loss with and without gradient checkpointing agree
    (relative error <= 1e-5 per parameter), with and without LoRA; the layers really run
    again in the backward pass."""
    from transformers import AutoModelForCausalLM

    from bestk.train.model.hf import enable_gradient_checkpointing

    def build():
        m = AutoModelForCausalLM.from_pretrained(tiny_hf_model)
        return add_lora(m, LoRAConfig(r=4, target_modules="all-linear")) if lora else m

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 300, (4, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # a left-padded prompt
    calls_plain: list[int] = []
    plain = _grads_of_a_pg_loss(build(), ids, mask, calls_plain)
    calls_ckpt: list[int] = []
    model = enable_gradient_checkpointing(build())
    ckpt = _grads_of_a_pg_loss(model, ids, mask, calls_ckpt)
    assert len(calls_plain) == 1 and len(calls_ckpt) == 2  # recomputed in the backward pass
    assert plain.keys() == ckpt.keys() and plain
    if lora:
        assert all("lora_" in n for n in plain)
    for name, grad in plain.items():
        err = float((ckpt[name] - grad).norm() / grad.norm().clamp_min(1e-30))
        assert err <= 1e-5, (name, err)


def test_gradient_checkpointing_of_a_model_without_support():
    from bestk.train.model.hf import enable_gradient_checkpointing

    with pytest.raises(ValueError, match="does not support"):
        enable_gradient_checkpointing(torch.nn.Linear(2, 2))


REWARDS_PY = '''
def fmt(prompt, completion, **_):
    """1 when the completion writes a GSM8K-style final answer line."""
    return float("####" in completion)


def length(prompt, completion, **_):
    """Share of 10 characters written; does not apply to an empty completion."""
    return None if not completion else min(len(completion), 10) / 10
'''


def _chat_dataset(tmp_path, tok):
    """A ``save_to_disk`` DatasetDict (train / test) with TRL's conversational prompt column:
    even rows carry their own long system message, odd rows only the user message (they get
    ``task.system_prompt``). Returns its directory and the shortest rendered prompt length."""
    import datasets

    from tests.conftest import gsm8k_rows

    def rows(n, offset):
        out = []
        for i, r in enumerate(gsm8k_rows(n, offset)):
            msgs = [{"role": "user", "content": r["question"]}]
            if i % 2 == 0:
                msgs.insert(0, {"role": "system", "content": "You are a careful tutor who "
                                "explains every step of the computation to the student."})
            out.append({"prompt": msgs, "answer": r["answer"]})
        return out

    saved = tmp_path / "saved"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows(12, 0)),
                          "test": datasets.Dataset.from_list(rows(4, 500))}
                         ).save_to_disk(str(saved))
    user_only = [{"role": "system", "content": "Be brief."},
                 {"role": "user", "content": gsm8k_rows(1)[0]["question"]}]
    text = tok.apply_chat_template(user_only, tokenize=False, add_generation_prompt=True)
    shortest = len(tok(text, add_special_tokens=False)["input_ids"])
    return saved, shortest


def test_real_data_rewards_samples_and_eval_of_the_run(tiny_hf_model, tmp_path, capsys,
                                                        monkeypatch):
    """Chat datasets end to end: a chat-format ``save_to_disk`` dataset with a system prompt, two
    reward functions from a file path with weights, a prompt length limit cutting the long
    prompts from the left, top-k, LoRA with adapter-only checkpoints, the evaluation samples,
    and ``bestk eval --run`` evaluating on exactly the training run's prompts."""
    import json

    from safetensors import safe_open
    from transformers import AutoTokenizer

    import bestk.train.rollout.evaluate as evaluate_module
    from bestk.train.runtime.files import list_checkpoints

    tok = AutoTokenizer.from_pretrained(tiny_hf_model)
    saved, shortest = _chat_dataset(tmp_path, tok)
    (tmp_path / "my_rewards.py").write_text(REWARDS_PY)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    cfg = TrainConfig()
    apply_overrides(cfg, [
        f"out={out}", f"model.path={tiny_hf_model}", "threads=1", "task.name=dataset",
        f"task.options={{path: {saved}, eval_path: {saved}, prompt_field: prompt}}",
        "task.system_prompt=Be brief.", "task.reward=[my_rewards.py:fmt, my_rewards.py:length]",
        "task.reward_weights=[1.0, 0.5]", f"rollout.max_prompt_length={shortest}",
        "rollout.top_k=5", "sft.steps=1", "sft.batch_size=4", "rollout.prompts_per_step=2",
        "rollout.n=2", "rollout.max_new_tokens=6", "eval.n=2", "eval.num_prompts=3",
        "eval.every=2", "optim.lr=0.05", "estimator=grpo", "max_steps=2", *LORA[:3],
    ])
    trainer = Trainer(cfg)
    trainer.run(progress=True)  # the header is shown with the progress bar
    err = capsys.readouterr().err

    # The model saw the chat template's rendering, the system prompt where a row had none.
    prompts = [ex["prompt"] for ex in trainer.task.train]
    assert sum(p.startswith("<|im_start|>system\nBe brief.<|im_end|>") for p in prompts) == 6
    assert sum("careful tutor" in p for p in prompts) == 6
    # The long prompts are cut from the left, counted in the header and in each step.
    assert "sampling: temperature=1.0 (config) top_p=1.0 (config) top_k=5 (config)" in err
    assert f"prompts: 8 of 16 longer than rollout.max_prompt_length={shortest}" in err
    records = read_metrics(out / "metrics.jsonl")
    train = [r for r in records if r["phase"] == "train"]
    assert all(0 <= r["prompts_truncated"] <= 2 for r in train)
    # Each function's mean under its own name; the estimator saw the weighted sum.
    for r in [*train, *(r for r in records if r["phase"] == "eval")]:
        assert {"rewards/fmt/mean", "rewards/length/mean"} <= set(r)
    ro = _rollout(trainer)
    exs = [e for e in trainer.task.eval[:2] for _ in range(2)]
    scores = trainer.task.score_detailed(exs, ro.texts)
    np_total = scores.columns["fmt"] + 0.5 * np.nan_to_num(scores.columns["length"])
    assert np.allclose(trainer.task.score(exs, ro.texts), np_total)

    # samples.jsonl: each evaluation's first prompts as the model saw them, with the rewards.
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert sorted({s["step"] for s in samples}) == [0, 2]
    first = samples[0]
    assert first["prompt"] == trainer.eval_examples[0]["prompt"]
    assert set(first["rewards"]) == {"fmt", "length"} and "success" in first

    # Adapter-only checkpoints: the adapters and their optimizer state, not the base model.
    ckpt = list_checkpoints(out / "checkpoints")[-1]
    with safe_open(str(ckpt), "pt") as f:
        keys = [k for k in f.keys() if k.startswith("model.")]
        assert keys and all(".lora_" in k for k in keys)
        assert json.loads(f.metadata()["state"])["weights"] == "adapters"
    assert ckpt.stat().st_size < (tiny_hf_model / "model.safetensors").stat().st_size

    # bestk eval --run: the run's task, template, system prompt, rewards and eval settings.
    seen: list[list[str]] = []
    real = evaluate_module.evaluate

    def spy(engine, task, examples, **kw):
        seen.append([ex["prompt"] for ex in examples])
        return real(engine, task, examples, **kw)

    monkeypatch.setattr(evaluate_module, "evaluate", spy)
    res = CliRunner().invoke(app, ["eval", "--run", str(out), "--set", "eval.n=3",
                                   "--json", str(tmp_path / "m.json")])
    assert res.exit_code == 0, res.output
    assert seen == [[ex["prompt"] for ex in trainer.eval_examples]]  # byte-equal prompts
    m = json.loads((tmp_path / "m.json").read_text())
    assert m["n"] == 3 and m["num_prompts"] == 3 and "rewards/length/mean" in m
    bad = CliRunner().invoke(app, ["eval", "--run", str(out), "-n", "2", "--set", "eval.n=3"])
    assert bad.exit_code == 2 and "-n 2 and --set eval.n=3 disagree" in bad.output
    # ... and a LoRA run's final/adapter, loaded onto the run's base model.
    seen.clear()
    res = CliRunner().invoke(app, ["eval", "--model", str(out / "final" / "adapter"),
                                   "--run", str(out)])
    assert res.exit_code == 0, res.output
    assert seen == [[ex["prompt"] for ex in trainer.eval_examples]]
