"""Typed, documented configuration of the embedded trainer (TRL-style dataclasses).

A run is configured by :class:`TrainConfig`; every knob is a named, defaulted field of one of
its sections. Configs load from YAML (:func:`load_config`) and take ``--set key=value``
overrides with dotted keys (:func:`apply_overrides`, values parsed as YAML scalars/lists/maps):

    bestk train --set rollout.n=16 --set estimator_options.tau=0.3 --set model.path=./my-model

Unknown keys, unknown estimators and unknown estimator / task options raise ``ValueError``
naming the key and the valid choices (:func:`validate`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

import yaml

__all__ = [
    "ModelConfig",
    "TaskConfig",
    "SFTConfig",
    "RolloutConfig",
    "LossConfig",
    "OptimConfig",
    "EvalConfig",
    "TrainConfig",
    "load_config",
    "apply_overrides",
    "config_to_dict",
    "config_from_dict",
    "validate",
]


@dataclass
class ModelConfig:
    """The policy network."""

    path: str | None = None
    """Local Hugging Face causal-LM directory (model + tokenizer). ``None``: build the tiny
    default model below with a character tokenizer for the task's alphabet."""
    arch: str = "qwen2"
    """Architecture of the tiny default model: ``qwen2`` or ``llama``."""
    hidden_size: int = 128
    """Width of the tiny default model."""
    num_layers: int = 4
    """Transformer blocks of the tiny default model."""
    num_heads: int = 4
    """Attention heads of the tiny default model."""
    intermediate_size: int = 384
    """MLP width of the tiny default model."""
    max_positions: int = 128
    """Context length of the tiny default model."""
    dtype: str = "float32"
    """Parameter dtype: ``float32`` or ``bfloat16``."""


@dataclass
class TaskConfig:
    """What the policy is trained on (see ``bestk.tasks``)."""

    name: str = "strings"
    """Registered task: ``strings`` (default: reverse digit strings, graded), ``arithmetic``,
    ``reasoning_gym``, ``jsonl``, ``math``, ``similarity``."""
    options: dict[str, Any] = field(default_factory=dict)
    """Task options, e.g. ``{digits: 2}`` or ``{dataset: basic_arithmetic, config: {...}}``."""
    reward: str | None = None
    """Replace the task's reward: a registered reward name or ``module:function``."""


@dataclass
class SFTConfig:
    """Supervised warm-up on the task's reference answers before RL (0 steps = none)."""

    steps: int = 0
    """Optimizer steps of cross-entropy on ``prompt + answer + EOS`` (loss on the answer)."""
    batch_size: int = 64
    """Examples per SFT step."""
    lr: float = 3e-3
    """Peak learning rate of the warm-up (linear warm-up over 10% of steps, then cosine)."""


@dataclass
class RolloutConfig:
    """Sampling of the training completions."""

    prompts_per_step: int = 64
    """Prompts per RL step (each gets ``n`` completions; the group of a prompt is its ``n``)."""
    n: int = 8
    """Completions per prompt (the group size ``N`` of the estimators)."""
    temperature: float = 1.0
    """Sampling temperature (log-probs and entropy use the same temperature)."""
    top_p: float = 1.0
    """Nucleus sampling threshold in (0, 1]."""
    max_new_tokens: int | None = None
    """Completion length cap; ``None`` = the task's answer length bound + 2."""


@dataclass
class LossConfig:
    """Policy loss (``bestk.losses``)."""

    clip_low: float = 0.2
    """PPO ratio floor is ``1 - clip_low``."""
    clip_high: float = 0.28
    """PPO ratio ceiling is ``1 + clip_high`` (DAPO clip-higher)."""
    agg: str = "token-mean"
    """Aggregation: ``token-mean``, ``seq-mean-token-mean`` or ``seq-mean-token-sum``."""
    kl_coef: float = 0.0
    """Weight of the KL-to-reference penalty (0 = no reference model is kept)."""
    kl_estimator: str = "k3"
    """KL estimator: ``k1``, ``k2`` or ``k3``."""
    entropy_coef: float = 0.0
    """Weight of an entropy bonus (subtracted from the loss)."""
    ppo_epochs: int = 1
    """Passes over each rollout batch."""
    minibatches: int = 1
    """Optimizer steps per pass (the rollout batch is split in this many minibatches of whole
    groups; must divide ``rollout.prompts_per_step``)."""


@dataclass
class OptimConfig:
    """AdamW."""

    lr: float = 3e-4
    """Learning rate of RL (constant after ``warmup_steps``). Adam's first steps move every
    weight by about ``lr``: 1e-3 already wrecks the tiny default model."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    beta1: float = 0.9
    """AdamW beta1."""
    beta2: float = 0.99
    """AdamW beta2."""
    grad_clip: float = 1.0
    """Max global gradient norm (0 = no clipping)."""
    warmup_steps: int = 0
    """Linear learning-rate warm-up of RL in optimizer steps."""


@dataclass
class EvalConfig:
    """Held-out evaluation: ``n`` samples per prompt, unbiased pass@k / best@k for k = 1..n."""

    every: int = 25
    """Evaluate every this many RL steps (and always at the start and the end of RL)."""
    n: int = 8
    """Samples per held-out prompt."""
    num_prompts: int | None = None
    """Held-out prompts used (``None`` = all of the task's)."""
    temperature: float = 1.0
    """Sampling temperature of evaluation."""
    top_p: float = 1.0
    """Nucleus threshold of evaluation."""


@dataclass
class TrainConfig:
    """A complete embedded-trainer run. ``bestk train`` with no arguments uses the defaults."""

    estimator: str = "argmaxrl"
    """Advantage estimator (a key of ``bestk.ESTIMATORS``)."""
    estimator_options: dict[str, Any] = field(default_factory=dict)
    """Options of the estimator, e.g. ``{tau: 0.3}``; ``calibration`` may be a file path."""
    advantage_reward: str = "auto"
    """What the estimator sees: ``raw`` (the task's reward), ``success`` (0/1: reward >= the
    task's success threshold), or ``auto`` = ``success`` for estimators that need binary
    rewards (``maxrl``; ``kappo_grpo`` with a binary calibration), ``raw`` otherwise."""
    max_steps: int = 100
    """RL steps (one rollout batch each)."""
    seed: int = 0
    """Seeds data order, initialisation and sampling."""
    sampling_seed: int | None = None
    """Seed of the rollout- and evaluation-sampling noise only (``None`` = ``seed``). Two runs
    with the same ``seed`` and different ``sampling_seed`` share initial weights, SFT and
    prompts but not the sampled completions: an A/A control (``bestk compare --control``)."""
    out: str = "runs/bestk"
    """Run directory."""
    checkpoint_every: int = 20
    """Write an atomic checkpoint every this many RL steps (and at the end / on Ctrl-C)."""
    keep_checkpoints: int = 2
    """Checkpoints kept on disk (older ones are deleted)."""
    threads: int | None = 1
    """torch CPU threads (``None`` = torch's default). Tiny models run fastest on one thread,
    and much faster than on several when the machine is shared."""
    device: str = "cpu"
    """``cpu``, ``cuda`` or ``cuda:N``."""
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    sft: SFTConfig = field(default_factory=lambda: SFTConfig(steps=100))
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


# ---------------------------------------------------------------------------------------------
def config_to_dict(cfg: Any) -> dict[str, Any]:
    """Plain nested dict of a config dataclass (what ``config.yaml`` holds)."""
    return dataclasses.asdict(cfg)


def _fields(cls: type) -> dict[str, Any]:
    hints = get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _is_section(tp: Any) -> bool:
    return dataclasses.is_dataclass(tp) and isinstance(tp, type)


def _valid_keys(cls: type, prefix: str = "") -> str:
    return ", ".join(f"{prefix}{k}" for k in _fields(cls))


def _set(obj: Any, path: list[str], value: Any, full: str) -> None:
    cls = type(obj)
    fields = _fields(cls)
    key = path[0]
    where = ".".join(full.split(".")[: len(full.split(".")) - len(path)])
    prefix = f"{where}." if where else ""
    if key not in fields:
        raise ValueError(
            f"unknown config key {full!r}; valid keys{' under ' + repr(where) if where else ''}: "
            f"{_valid_keys(cls, prefix)}"
        )
    tp = fields[key]
    current = getattr(obj, key)
    if _is_section(tp):
        if len(path) == 1:
            if not isinstance(value, dict):
                raise ValueError(f"config key {full!r} is a section; give a mapping")
            for k, v in value.items():
                _set(current, [str(k)], v, f"{full}.{k}")
            return
        _set(current, path[1:], value, full)
        return
    if isinstance(current, dict) or key in ("options", "estimator_options"):
        if len(path) == 1:
            if value is None:
                value = {}
            if not isinstance(value, dict):
                raise ValueError(f"config key {full!r} must be a mapping, got {value!r}")
            setattr(obj, key, dict(value))
        else:
            d = current
            for p in path[1:-1]:
                d = d.setdefault(p, {})
            d[path[-1]] = value
        return
    if len(path) > 1:
        raise ValueError(f"unknown config key {full!r}: {prefix}{key} is not a section")
    setattr(obj, key, _coerce(value, tp, full))


def _coerce(value: Any, tp: Any, full: str) -> Any:
    text = str(tp)
    optional = "None" in text
    if value is None:
        if optional:
            return None
        raise ValueError(f"config key {full!r} cannot be null")
    if tp is bool or text == "bool":
        if isinstance(value, bool):
            return value
        raise ValueError(f"config key {full!r} must be true/false, got {value!r}")
    if "int" in text and "float" not in text and "str" not in text:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ValueError(f"config key {full!r} must be an integer, got {value!r}")
        return value
    if "float" in text:
        if isinstance(value, str):
            try:  # YAML 1.1 reads "5e-3" as a string
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"config key {full!r} must be a number, got {value!r}")
        return float(value)
    if "str" in text:
        if not isinstance(value, str):
            return str(value)
        return value
    return value


def config_from_dict(data: dict[str, Any], base: TrainConfig | None = None) -> TrainConfig:
    """A :class:`TrainConfig` from a nested dict (unknown keys raise ``ValueError``)."""
    cfg = base or TrainConfig()
    if data is None:
        return cfg
    if not isinstance(data, dict):
        raise ValueError(f"a config must be a mapping at the top level, got {type(data).__name__}")
    for k, v in data.items():
        _set(cfg, [str(k)], v, str(k))
    return cfg


def load_config(path: str | Path) -> TrainConfig:
    """Read a YAML config file into a :class:`TrainConfig` (on top of the defaults)."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"config file {str(p)!r} does not exist")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise ValueError(f"config file {str(p)!r} is not valid YAML: {e}") from None
    return config_from_dict(data or {})


def apply_overrides(cfg: TrainConfig, overrides: list[str] | None) -> TrainConfig:
    """Apply ``key=value`` strings (dotted keys; values parsed as YAML) to ``cfg`` in place."""
    for item in overrides or []:
        if "=" not in item:
            raise ValueError(f"--set expects key=value, got {item!r}")
        key, _, raw = item.partition("=")
        key = key.strip()
        if not key:
            raise ValueError(f"--set expects key=value, got {item!r}")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        _set(cfg, key.split("."), value, key)
    return cfg


def validate(cfg: TrainConfig) -> None:
    """Check names and value ranges; raise ``ValueError`` naming the offending key."""
    import bestk
    from bestk.estimators import check_estimator_options, check_option_names
    from bestk.losses import AGG_MODES, KL_ESTIMATORS
    from bestk.tasks import task_options

    if cfg.estimator not in bestk.ESTIMATORS:
        raise ValueError(
            f"unknown estimator {cfg.estimator!r}; valid: {', '.join(sorted(bestk.ESTIMATORS))}"
        )
    check_estimator_options(cfg.estimator, cfg.estimator_options)
    check_option_names("task", cfg.task.name, cfg.task.options, task_options(cfg.task.name))
    checks = [
        ("max_steps", cfg.max_steps >= 0, ">= 0"),
        ("advantage_reward", cfg.advantage_reward in ("auto", "raw", "success"),
         "auto, raw or success"),
        ("checkpoint_every", cfg.checkpoint_every >= 1, ">= 1"),
        ("keep_checkpoints", cfg.keep_checkpoints >= 1, ">= 1"),
        ("model.arch", cfg.model.arch in ("qwen2", "llama"), "qwen2 or llama"),
        ("model.dtype", cfg.model.dtype in ("float32", "bfloat16"), "float32 or bfloat16"),
        ("sft.steps", cfg.sft.steps >= 0, ">= 0"),
        ("sft.batch_size", cfg.sft.batch_size >= 1, ">= 1"),
        ("sft.lr", cfg.sft.lr > 0, "> 0"),
        ("rollout.prompts_per_step", cfg.rollout.prompts_per_step >= 1, ">= 1"),
        ("rollout.n", cfg.rollout.n >= 1, ">= 1"),
        ("rollout.temperature", cfg.rollout.temperature > 0, "> 0"),
        ("rollout.top_p", 0 < cfg.rollout.top_p <= 1, "in (0, 1]"),
        ("rollout.max_new_tokens", (cfg.rollout.max_new_tokens or 1) >= 1, ">= 1"),
        ("loss.clip_low", 0 <= cfg.loss.clip_low < 1, "in [0, 1)"),
        ("loss.clip_high", cfg.loss.clip_high >= 0, ">= 0"),
        ("loss.agg", cfg.loss.agg in AGG_MODES, " / ".join(AGG_MODES)),
        ("loss.kl_coef", cfg.loss.kl_coef >= 0, ">= 0"),
        ("loss.kl_estimator", cfg.loss.kl_estimator in KL_ESTIMATORS, " / ".join(KL_ESTIMATORS)),
        ("loss.ppo_epochs", cfg.loss.ppo_epochs >= 1, ">= 1"),
        ("loss.minibatches", cfg.loss.minibatches >= 1, ">= 1"),
        ("optim.lr", cfg.optim.lr > 0, "> 0"),
        ("optim.grad_clip", cfg.optim.grad_clip >= 0, ">= 0"),
        ("eval.every", cfg.eval.every >= 1, ">= 1"),
        ("eval.n", cfg.eval.n >= 1, ">= 1"),
        ("eval.num_prompts", (cfg.eval.num_prompts or 1) >= 1, ">= 1"),
        ("eval.temperature", cfg.eval.temperature > 0, "> 0"),
        ("eval.top_p", 0 < cfg.eval.top_p <= 1, "in (0, 1]"),
    ]
    for key, ok, want in checks:
        if not ok:
            section, _, name = key.rpartition(".")
            obj = getattr(cfg, section) if section else cfg
            raise ValueError(f"config key {key!r} must be {want}, got {getattr(obj, name)!r}")
    if cfg.rollout.prompts_per_step % cfg.loss.minibatches:
        raise ValueError(
            f"config key 'loss.minibatches' ({cfg.loss.minibatches}) must divide "
            f"rollout.prompts_per_step ({cfg.rollout.prompts_per_step}): minibatches hold "
            "whole groups"
        )
