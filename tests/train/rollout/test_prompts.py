"""bestk.train.rollout.prompts: prompts longer than rollout.max_prompt_length are cut from the
left on token ids (the count of cut prompts reported) or refused; without a limit, or when
nothing is too long, the batch is exactly the tokenizer's own."""

from __future__ import annotations

import pytest
import torch

from bestk.train.model.policy import build_char_tokenizer
from bestk.train.rollout.prompts import (
    TRUNCATION,
    check_prompt_lengths,
    encode_prompts,
    left_truncate,
    prompt_lengths,
)


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer("abcdefgh0123")


def _plain(tok, prompts):
    return tok(list(prompts), padding=True, return_tensors="pt", add_special_tokens=False)


def test_left_truncate():
    assert left_truncate([1, 2, 3, 4], 2) == [3, 4]
    assert left_truncate([1, 2], 5) == [1, 2]
    assert left_truncate((1, 2, 3), 3) == [1, 2, 3]


def test_no_limit_or_nothing_too_long_is_the_tokenizers_own_batch(tok):
    prompts = ["abc", "a", "abcdef0"]
    plain = _plain(tok, prompts)
    for limit in (None, 7, 100):
        enc = encode_prompts(tok, prompts, max_length=limit, truncation="error")
        assert torch.equal(enc.input_ids, plain["input_ids"])
        assert torch.equal(enc.attention_mask, plain["attention_mask"])
        assert enc.lengths == [3, 1, 7] and enc.cut == 0


def test_long_prompts_keep_their_last_tokens(tok):
    prompts = ["abcdefgh", "ab", "0123456"[:5]]
    enc = encode_prompts(tok, prompts, max_length=4)
    assert enc.cut == 2 and enc.lengths == [8, 2, 5]
    assert enc.input_ids.shape == (3, 4)
    want = _plain(tok, ["efgh", "ab", "1234"])  # the cut text tokenizes to the same ids here
    assert torch.equal(enc.input_ids, want["input_ids"])
    assert torch.equal(enc.attention_mask, want["attention_mask"])
    assert enc.attention_mask[1].tolist() == [0, 0, 1, 1]  # left-padded, as the trainer pads


def test_a_bpe_tokenizer_is_cut_on_ids_not_text(tiny_hf_model):
    from transformers import AutoTokenizer

    bpe = AutoTokenizer.from_pretrained(tiny_hf_model)
    bpe.padding_side = "left"
    prompts = ["Natalia sold clips to 48 of her friends in April.", "How many?"]
    full = bpe(prompts, add_special_tokens=False)["input_ids"]
    enc = encode_prompts(bpe, prompts, max_length=6)
    assert enc.cut == 1
    assert enc.input_ids[0].tolist() == full[0][-6:]
    assert enc.input_ids[1][enc.attention_mask[1].bool()].tolist() == full[1][-6:]


def test_error_mode_and_the_task_check(tok):
    prompts = ["abcdefgh", "ab", "abcde"]
    with pytest.raises(ValueError, match="2 of 3 prompts are longer than "
                       "rollout.max_prompt_length = 4 tokens \\(the longest has 8\\); raise it, "
                       "or set rollout.prompt_truncation=left"):
        encode_prompts(tok, prompts, max_length=4, truncation="error")
    assert check_prompt_lengths(tok, prompts, 4, "left") == 2
    assert check_prompt_lengths(tok, prompts, None, "error") == 0
    assert check_prompt_lengths(tok, prompts, 8, "error") == 0
    with pytest.raises(ValueError, match="2 of 3 prompts are longer"):
        check_prompt_lengths(tok, prompts, 4, "error")
    assert prompt_lengths(tok, prompts) == [8, 2, 5]
    with pytest.raises(ValueError, match="max_prompt_length must be a positive integer or "
                       "null, got 0"):
        encode_prompts(tok, prompts, max_length=0)
    with pytest.raises(ValueError, match="prompt_truncation must be one of left, error, got "
                       "'right'"):
        check_prompt_lengths(tok, prompts, 4, "right")
    with pytest.raises(ValueError, match="no prompts"):
        encode_prompts(tok, [])
    assert TRUNCATION == ("left", "error")
