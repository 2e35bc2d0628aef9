"""Typed, documented configuration of the embedded trainer (TRL-style dataclasses).

A run is configured by :class:`TrainConfig`; every knob is a named, defaulted field of one of
its sections. The dataclasses are an OmegaConf structured-config schema (as verl's configs
are): configs load from YAML (:func:`load_config`) and take ``--set key=value`` overrides with
dotted keys (:func:`apply_overrides`, an OmegaConf dotlist: values read as YAML
scalars/lists/maps, ``${...}`` interpolations resolved), each value typed against its field by
OmegaConf:

    bestk train --set rollout.n=16 --set estimator_options.tau=0.3 --set model.path=./my-model

Unknown keys, unknown estimators and unknown estimator / task options raise ``ValueError``
naming the key and the valid choices (:func:`validate`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import random
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

import numpy as np
import torch
import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException, ValidationError

from bestk._optional import require
from bestk._options import check_option_names
from bestk.estimators import (
    ESTIMATORS,
    advantages,
    check_estimator_options,
    estimator_info,
    resolve_options,
)
from bestk.kappo.calibration import MIN_BETA, calibrate, load_calibration
from bestk.losses import AGG_MODES, KL_ESTIMATORS
from bestk.tasks import task_options
from bestk.train.algorithms import ALGORITHMS
from bestk.train.reference import calibration_prompt_ids
from bestk.train.reporters import INTEGRATIONS, resolve_report_to

__all__ = [
    "LoRAConfig",
    "ModelConfig",
    "TaskConfig",
    "SFTConfig",
    "RolloutConfig",
    "LossConfig",
    "OptimConfig",
    "EvalConfig",
    "KappoConfig",
    "TrainConfig",
    "CALIBRATION_KINDS",
    "load_config",
    "yaml_error_line",
    "parse_yaml_config",
    "apply_overrides",
    "config_to_dict",
    "config_from_dict",
    "validate",
    "check_names",
    "check_values",
    "check_finite",
    "check_device",
    "check_model_dir",
    "check_dependencies",
    "check_estimator_runs",
    "config_items",
    "resolve_defaults",
    "AUTO_KEYS",
    "check_algorithm",
    "check_kappo_file",
]

#: ``kappo.kind`` values: ``auto`` picks ``binary`` (Algorithm 1 on 0/1 success) for binary
#: tasks and for @k-DPO, ``winrate`` (Algorithm 2 on the raw reward) for graded tasks.
CALIBRATION_KINDS = ("auto", "binary", "winrate")

#: The default run directory (of ``pg``; the other algorithms append ``-<algorithm>``).
DEFAULT_OUT = "runs/bestk"


@dataclass
class LoRAConfig:
    """Low-rank adapters (LoRA, through PEFT) instead of a full fine-tune (``r = 0``)."""

    r: int = 0
    """Adapter rank; 0 = no adapters, every weight trains."""
    alpha: float = 32.0
    """LoRA scaling numerator: the adapter update is scaled by ``alpha / r``."""
    dropout: float = 0.0
    """Dropout on the adapters' input (0 keeps the training forward equal to the sampling
    one, so the PPO ratio of an on-policy step is exactly 1)."""
    target_modules: Any = None
    """Modules that get adapters: a list of names (``[q_proj, v_proj]``), ``all-linear``
    (every linear layer but the output head), or ``None`` = PEFT's default for the
    architecture. (Typed ``Any`` for OmegaConf, which has no unions of a name and a list;
    :func:`check_values` checks it.)"""


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
    chat_template: str = "auto"
    """``auto``: when the tokenizer has a chat template, each prompt is sent as one user
    message through ``apply_chat_template(..., add_generation_prompt=True)`` (instruct
    models); ``none``: the prompt text as is."""
    autocast: str = "auto"
    """Mixed precision of forward passes: ``auto`` = bfloat16 autocast on a CUDA device that
    supports it, none elsewhere; ``bf16`` (CUDA only); ``none``."""
    lora: LoRAConfig = field(default_factory=LoRAConfig)


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
    """Prompts per RL step (each gets ``n`` completions; the group of a prompt is its ``n``).
    For ``dpo``: prompts per step, each contributing ``kappo.dpo_pairs`` bank pairs."""
    n: int | None = None
    """Completions per prompt (the group size ``N`` of the estimators). ``None`` = the
    algorithm's default, filled in by :class:`TrainConfig` (and kept in step with
    ``algorithm`` until set explicitly): 8 for ``pg``, 1 for ``apo`` (A*PO's one on-policy
    completion per prompt); ``dpo`` samples no completions while training (it must be 1)."""
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
class KappoConfig:
    """KAPPO reference calibration and the @k losses (see ``docs/kappo.md``).

    Used by ``algorithm: apo`` (@k-A*PO) and ``dpo`` (@k-DPO), and by ``pg`` with an estimator
    that needs a calibration (``kappo_grpo``) when ``estimator_options`` gives none. Without
    ``calibration`` the run calibrates itself after the SFT warm-up: the frozen reference
    samples ``bank_size`` completions for each of ``bank_prompts`` training prompts
    (``rollout.temperature`` / ``top_p``), and RL then draws from those prompts only.
    """

    k: int = 4
    """The @k objective parameter (an integer >= 1; k = 1 is the plain @1 method)."""
    beta: float = 0.1
    """KL strength beta of the calibration (> 0). A*PO regresses ``beta log pi/pi_ref`` on
    the target; @k-DPO uses ``beta_eff(x) = min(beta / a_k(x), 2)``."""
    bank_size: int = 30
    """Reference completions per bank prompt, M (the paper's 30)."""
    bank_prompts: int | None = 512
    """Training prompts in the bank (a seeded random subset; ``None`` = every training
    prompt). RL draws only from them (@k-DPO: from those with a success and a failure)."""
    kind: str = "auto"
    """``binary`` (Algorithm 1 on the 0/1 success), ``winrate`` (Algorithm 2 on the raw
    reward) or ``auto`` = ``binary`` for binary tasks and for ``dpo``, else ``winrate``."""
    calibration: str | None = None
    """A calibration file from ``bestk calibrate`` to use instead of calibrating in-run (its
    k, beta and kind must match; its prompt ids must be training prompts of the task).
    ``dpo`` still samples a bank of reference completions on its prompts for the pairs."""
    bank: str | None = None
    """A directory holding the reference bank the run would otherwise sample itself
    (``bank.jsonl``, and ``bank_tokens.safetensors`` for ``dpo``): an earlier run's directory
    on the same task, seed and reference policy, or the per-seed bank ``bestk compare`` shares
    between its runs. It must cover exactly the run's bank prompts with ``bank_size`` samples
    each (checked) and come from the run's reference policy (not checkable: the caller's
    promise). The run calibrates it with its own k, beta and kind."""
    dpo_pairs: int = 1
    """@k-DPO: (success, failure) pairs drawn per prompt and step from the bank."""
    dpo_labels: str = "bradley_terry"
    """@k-DPO preference labels: ``bradley_terry`` (P(success > failure) = sigmoid(1), under
    which Eq. 13's minimiser is the pass@k optimum) or ``hard`` (the success always wins:
    plain DPO labels, whose loss has no minimiser; the policy keeps moving towards the
    successes for as long as it trains)."""


@dataclass
class TrainConfig:
    """A complete embedded-trainer run. ``bestk train`` with no arguments uses the defaults."""

    algorithm: str = "pg"
    """``pg`` (PPO-clip on ``bestk.advantages`` of any estimator), ``apo`` (@k-A*PO, KAPPO
    Eq. 14) or ``dpo`` (@k-DPO on reference-bank pairs, KAPPO Eq. 13)."""
    estimator: str = "argmaxrl"
    """Advantage estimator of ``pg`` (a key of ``bestk.ESTIMATORS``)."""
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
    out: str | None = None
    """Run directory. ``None`` = the algorithm's default, filled in like ``rollout.n``:
    ``runs/bestk`` for ``pg``, ``runs/bestk-apo`` / ``runs/bestk-dpo`` for the others (so
    their default runs do not meet in one directory)."""
    checkpoint_every: int = 20
    """Write an atomic checkpoint every this many RL steps (and at the end / on Ctrl-C)."""
    keep_checkpoints: int = 2
    """Checkpoints kept on disk (older ones are deleted)."""
    threads: int | None = 1
    """torch CPU threads (``None`` = torch's default). Tiny models run fastest on one thread,
    and much faster than on several when the machine is shared."""
    device: str = "cpu"
    """``cpu``, ``cuda`` or ``cuda:N``."""
    report_to: Any = "none"
    """Live logging besides ``metrics.jsonl``, as TRL's ``report_to``: ``none`` (TRL's
    default), ``all`` (every supported integration installed), ``tensorboard``, ``wandb``,
    or a list of them (see ``bestk.train.reporters``; typed ``Any`` for OmegaConf, checked by
    :func:`check_values`)."""
    run_name: str | None = None
    """Name of the run in W&B (``None`` = the run directory's name)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    sft: SFTConfig = field(default_factory=lambda: SFTConfig(steps=100))
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    kappo: KappoConfig = field(default_factory=KappoConfig)

    def __post_init__(self) -> None:
        _fill_auto(self)


# -- reading configs: OmegaConf structured configs ---------------------------------------------
# The dataclasses above are the schema. A YAML file, a nested dict or ``--set key=value`` items
# are merged into ``OmegaConf.structured(cfg)``, which types every value against its field
# (and reads values as YAML, resolves ``${...}`` interpolations); ``OmegaConf.to_object`` gives
# the dataclasses back. OmegaConf's errors become the one-line messages below, naming the key.

def config_to_dict(cfg: Any) -> dict[str, Any]:
    """Plain nested dict of a config dataclass (what ``config.yaml`` holds)."""
    return dataclasses.asdict(cfg)


def _fields(cls: type) -> dict[str, Any]:
    hints = get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _is_section(tp: Any) -> bool:
    return dataclasses.is_dataclass(tp) and isinstance(tp, type)


def _is_mapping(tp: Any) -> bool:
    return get_origin(tp) is dict


def _valid_keys(cls: type, prefix: str = "") -> str:
    return ", ".join(f"{prefix}{k}" for k in _fields(cls))


def _field_at(key: str) -> tuple[Any, bool]:
    """The type of the field ``key`` addresses and whether ``key`` goes *inside* a mapping
    field (``task.options.digits``); ``ValueError`` naming the valid keys for an unknown key."""
    cls: Any = TrainConfig
    parts = key.split(".")
    for i, part in enumerate(parts):
        where = ".".join(parts[:i])
        fields = _fields(cls)
        if part not in fields:
            prefix = f"{where}." if where else ""
            raise ValueError(
                f"unknown config key {key!r}; valid keys"
                f"{' under ' + repr(where) if where else ''}: {_valid_keys(cls, prefix)}"
            )
        tp = fields[part]
        if i == len(parts) - 1:
            return tp, False
        if _is_mapping(tp):
            return tp, True
        if not _is_section(tp):
            raise ValueError(f"unknown config key {key!r}: {where + '.' if where else ''}{part} is "
                             "not a section")
        cls = tp
    raise AssertionError(key)  # pragma: no cover


def _expected(tp: Any) -> str:
    """What a value of field type ``tp`` must be, for messages."""
    args = [a for a in get_args(tp) if a is not type(None)] or [tp]
    if args[0] is int:
        return "an integer"
    if args[0] is float:
        return "a number"
    if args[0] is str:
        return "a string"
    return f"a {getattr(args[0], '__name__', args[0])}"


def _assign(conf: DictConfig, key: str, value: Any) -> None:
    """Set ``key`` (dotted) of the structured config ``conf`` to ``value``: a section takes a
    mapping of its keys, a mapping field (``task.options``) is replaced (``null`` = ``{}``), a
    list-of-names field takes a name or a list of names, any other field a value OmegaConf
    converts to the field's type."""
    tp, inside = _field_at(key)
    if _is_section(tp):
        if not isinstance(value, Mapping):
            raise ValueError(f"config key {key!r} is a section; give a mapping")
        for k, v in value.items():
            _assign(conf, f"{key}.{k}", v)
        return
    if _is_mapping(tp) and not inside:
        value = {} if value is None else value
        if not isinstance(value, Mapping):
            raise ValueError(f"config key {key!r} must be a mapping, got {value!r}")
        value = dict(value)
    elif tp is Any and isinstance(value, (list, tuple)):  # report_to, lora.target_modules
        if not all(isinstance(v, str) for v in value):
            raise ValueError(f"config key {key!r} must be a list of names, got {value!r}")
        value = list(value)
    try:
        OmegaConf.update(conf, key, value, merge=False)
    except ValidationError as e:
        if value is None:
            raise ValueError(f"config key {key!r} cannot be null") from None
        raise ValueError(f"config key {key!r} must be {_expected(tp)}, got {value!r}") from e
    except OmegaConfBaseException as e:  # pragma: no cover - anything else OmegaConf refuses
        raise ValueError(f"config key {key!r}: {str(e).splitlines()[0]}") from None


def _structured(cfg: TrainConfig) -> DictConfig:
    """``OmegaConf.structured(cfg)``, with the :data:`AUTO_KEYS` fields that still hold the
    algorithm's default (not set explicitly) back at ``None``, so that :meth:`TrainConfig.
    __post_init__` fills them for the algorithm the merged config ends up with."""
    conf = OmegaConf.structured(cfg, flags={"allow_objects": True})
    auto = cfg.__dict__.get("_auto", {})
    for key in AUTO_KEYS:
        if key in auto and auto[key] == _get_key(cfg, key):
            OmegaConf.update(conf, key, None, merge=False)
    return conf


def _to_config(conf: DictConfig) -> TrainConfig:
    try:
        return OmegaConf.to_object(conf)
    except OmegaConfBaseException as e:  # an interpolation that does not resolve
        key = getattr(e, "full_key", "") or "?"
        raise ValueError(f"config key {key!r}: {str(e).splitlines()[0]}") from None


def config_from_dict(data: Mapping[str, Any] | None, base: TrainConfig | None = None
                     ) -> TrainConfig:
    """A :class:`TrainConfig` from a nested dict merged on ``base`` (default: the defaults);
    unknown keys and values of the wrong type raise ``ValueError`` naming the key."""
    cfg = base or TrainConfig()
    if data is None:
        return cfg
    if not isinstance(data, Mapping):
        raise ValueError(f"a config must be a mapping at the top level, got {type(data).__name__}")
    conf = _structured(cfg)
    for k, v in data.items():
        _assign(conf, str(k), v)
    return _to_config(conf)


def parse_yaml_config(text: str) -> Any:
    """The YAML document ``text`` as plain Python (OmegaConf's YAML reading: ``5e-3`` is a
    number); ``yaml.YAMLError`` if it is not YAML."""
    conf = OmegaConf.create(text) if text.strip() else OmegaConf.create({})
    return OmegaConf.to_container(conf, resolve=False)


def load_config(path: str | Path) -> TrainConfig:
    """Read a YAML config file into a :class:`TrainConfig` (on top of the defaults)."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"config file {str(p)!r} does not exist")
    try:
        data = parse_yaml_config(p.read_text())
    except yaml.YAMLError as e:
        raise ValueError(
            f"config file {str(p)!r} is not valid YAML: {yaml_error_line(e)}"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read config file {str(p)!r}: {e}") from None
    return config_from_dict(data)


def yaml_error_line(e: yaml.YAMLError) -> str:
    """A one-line description of a YAML parse error (problem and line:column)."""
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    mark = getattr(e, "problem_mark", None)
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark else problem


def apply_overrides(cfg: TrainConfig, overrides: list[str] | None) -> TrainConfig:
    """Apply ``key=value`` strings (OmegaConf dotlist: dotted keys, values read as YAML; a
    value that is not YAML stays a string) to ``cfg`` in place; returns ``cfg``."""
    if not overrides:
        return cfg
    conf = _structured(cfg)
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--set expects key=value, got {item!r}")
        try:
            value = OmegaConf.to_container(OmegaConf.from_dotlist([f"{key}={raw}"]))
        except yaml.YAMLError:
            value = raw
        except OmegaConfBaseException:
            raise ValueError(f"--set {item!r}: {key!r} is not a valid dotted key") from None
        else:
            for part in key.split("."):  # down the nested mapping the dotlist made
                value = value[part]
        _assign(conf, key, value)
    new = _to_config(conf)
    for f in dataclasses.fields(TrainConfig):
        setattr(cfg, f.name, getattr(new, f.name))
    cfg.__dict__["_auto"] = new.__dict__["_auto"]
    return cfg


# -- the algorithm's defaults -------------------------------------------------------------------
#: Keys whose ``None`` means "the algorithm's default" (:func:`resolve_defaults`).
AUTO_KEYS = ("rollout.n", "out")


def _auto_value(cfg: TrainConfig, key: str) -> Any:
    spec = ALGORITHMS.get(cfg.algorithm)
    if spec is None:
        return None
    if key == "rollout.n":
        return spec.default_n
    return DEFAULT_OUT if cfg.algorithm == "pg" else f"{DEFAULT_OUT}-{cfg.algorithm}"


def _get_key(cfg: Any, key: str) -> Any:
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _fill_auto(cfg: TrainConfig) -> None:
    """Give each :data:`AUTO_KEYS` field that is ``None``, or still holds the value filled in
    for it before, the default of the current algorithm (remembered in ``cfg._auto``; a value
    set explicitly is left alone)."""
    auto = cfg.__dict__.setdefault("_auto", {})
    for key in AUTO_KEYS:
        current = _get_key(cfg, key)
        if current is None or (key in auto and auto[key] == current):
            value = _auto_value(cfg, key)
            if value is None:  # unknown algorithm: check_names reports it
                continue
            *sections, name = key.split(".")
            setattr(_get_key(cfg, ".".join(sections)) if sections else cfg, name, value)
            auto[key] = value
        else:
            auto.pop(key, None)


def validate(cfg: TrainConfig) -> None:
    """Check every value before any work; raise ``ValueError`` naming the offending key.

    In order: names (algorithm, estimator, its option names, task option names), values
    (types, finite floats, ranges; :func:`check_values`) of the config with its ``None`` =
    "the algorithm's default" fields filled in (:func:`resolve_defaults`; ``cfg`` itself is
    not changed), what the algorithm accepts (:func:`check_algorithm`), the device
    (:func:`check_device`), the optional packages the config needs
    (:func:`check_dependencies`), a local model directory (:func:`check_model_dir`), a KAPPO
    calibration file (:func:`check_kappo_file`), and the estimator options' *values*, by
    running the estimator on a dummy batch shaped like a training batch
    (:func:`check_estimator_runs`; a ``calibration`` path is loaded). Nothing here trains,
    builds a model or writes a file.
    """
    check_names(cfg)
    cfg = resolve_defaults(cfg)
    check_values(cfg)
    check_algorithm(cfg)
    check_device(cfg.device)
    check_dependencies(cfg)
    if cfg.model.path is not None:
        check_model_dir(cfg.model.path)
    check_kappo_file(cfg)
    if cfg.algorithm == "pg":
        check_estimator_runs(cfg)


def resolve_defaults(cfg: TrainConfig) -> TrainConfig:
    """A copy of ``cfg`` whose :data:`AUTO_KEYS` fields hold the current algorithm's defaults
    unless set explicitly: ``rollout.n`` (8 for ``pg``, 1 for ``apo`` and ``dpo``) and
    ``out`` (``runs/bestk``, ``runs/bestk-<algorithm>``). :class:`TrainConfig`,
    :func:`apply_overrides` and :func:`config_from_dict` keep them in step already; this also
    catches an ``algorithm`` (or a ``None``) assigned as an attribute. An unknown algorithm is
    left for :func:`check_names`."""
    out = copy.deepcopy(cfg)
    _fill_auto(out)
    return out


def check_names(cfg: TrainConfig) -> None:
    """The algorithm and estimator are registered; task option names and, for ``pg``, the
    estimator's option names are known (a ``calibration`` the ``kappo`` section supplies
    counts as given)."""
    algorithms = ALGORITHMS
    if cfg.algorithm not in algorithms:
        raise ValueError(
            f"unknown algorithm {cfg.algorithm!r}; valid: {', '.join(algorithms)}"
        )
    if cfg.estimator not in ESTIMATORS:
        raise ValueError(
            f"unknown estimator {cfg.estimator!r}; valid: {', '.join(sorted(ESTIMATORS))}"
        )
    if not isinstance(cfg.estimator_options, dict):
        raise ValueError(
            f"config key 'estimator_options' must be a mapping, got {cfg.estimator_options!r}"
        )
    if cfg.algorithm == "pg":  # the other algorithms refuse estimator_options (their check)
        given = dict(cfg.estimator_options)
        if estimator_info(cfg.estimator).calibrated:
            given.setdefault("calibration", "kappo section")  # calibrated from the kappo section
        check_estimator_options(cfg.estimator, given)
    if not isinstance(cfg.task.options, dict):
        raise ValueError(f"config key 'task.options' must be a mapping, got {cfg.task.options!r}")
    check_option_names("task", cfg.task.name, cfg.task.options, task_options(cfg.task.name))


def check_algorithm(cfg: TrainConfig) -> None:
    """What the algorithm accepts (its own ``check``), and the ``kappo`` section's use: a
    ``kappo.calibration`` file for a run that calibrates nothing, or next to an
    ``estimator_options.calibration``, is refused."""
    spec = ALGORITHMS[cfg.algorithm]
    spec.check(cfg)
    if cfg.kappo.calibration is not None:
        if "calibration" in cfg.estimator_options:
            raise ValueError(
                "give the calibration once: estimator_options.calibration or kappo.calibration"
            )
        if not spec.calibrated(cfg):
            raise ValueError(
                f"config key 'kappo.calibration' is set, but algorithm {cfg.algorithm!r} with "
                f"estimator {cfg.estimator!r} uses no calibration (apo, dpo, or pg with an "
                "estimator that needs one, such as kappo_grpo)"
            )
    if cfg.kappo.bank is not None and not spec.samples_bank(cfg):
        raise ValueError(
            "config key 'kappo.bank' is set, but the run samples no reference bank (it needs a "
            "calibration from the kappo section, or @k-DPO's pairs)"
        )
    if spec.calibrated(cfg) and spec.binary_only and cfg.kappo.kind == "winrate":
        raise ValueError(
            f"algorithm {cfg.algorithm!r} needs a binary calibration (pairs of a success and a "
            "failure); config key 'kappo.kind' is 'winrate'"
        )


def check_kappo_file(cfg: TrainConfig) -> None:
    """A ``kappo.calibration`` file loads, and its k, beta and kind match the ``kappo``
    section (its prompt ids are checked against the task when the trainer loads it)."""
    if cfg.kappo.calibration is None:
        return
    load_kappo_file(cfg)


def load_kappo_file(cfg: TrainConfig) -> Any:
    """The :class:`~bestk.kappo.Calibration` of ``kappo.calibration``, checked against the
    ``kappo`` section (``ValueError`` naming the mismatch)."""
    path = cfg.kappo.calibration
    try:
        cal = load_calibration(path)
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot load kappo.calibration {str(path)!r}: {e}") from None
    k, beta, kind = cfg.kappo.k, cfg.kappo.beta, cfg.kappo.kind
    if cal.k != k or not math.isclose(cal.beta, beta, rel_tol=1e-12, abs_tol=0.0):
        raise ValueError(
            f"kappo.calibration {str(path)!r} was made for k={cal.k}, beta={cal.beta}, but the "
            f"run has kappo.k={k}, kappo.beta={beta}; set them to the file's values or "
            "recalibrate (`bestk calibrate BANK --k K --beta B`)"
        )
    if kind != "auto" and cal.kind != kind:
        raise ValueError(
            f"kappo.calibration {str(path)!r} is a {cal.kind} calibration, but kappo.kind is "
            f"{kind!r}"
        )
    if ALGORITHMS[cfg.algorithm].binary_only and cal.kind != "binary":
        raise ValueError(
            f"algorithm {cfg.algorithm!r} needs a binary calibration; kappo.calibration "
            f"{str(path)!r} is a {cal.kind} one"
        )
    return cal


def config_items(cfg: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """``[(dotted key, value), ...]`` of every leaf field of a config dataclass (mappings such
    as ``task.options`` are leaves)."""
    items: list[tuple[str, Any]] = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            items += config_items(value, f"{prefix}{f.name}.")
        else:
            items.append((f"{prefix}{f.name}", value))
    return items


def check_finite(cfg: TrainConfig) -> None:
    """No float field is NaN or infinite (YAML reads ``1e999`` and ``.inf`` as infinity)."""
    for key, value in config_items(cfg):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"config key {key!r} must be a finite number, got {value!r}")


_MAX_SEED = 2**63 - 1


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _in_choices(*choices: str) -> tuple[Callable[[Any], bool], str]:
    """A membership predicate and its description ("a or b", "a, b or c")."""
    want = " or ".join(choices) if len(choices) < 3 else (
        ", ".join(choices[:-1]) + " or " + choices[-1]
    )
    return (lambda v: v in choices), want


def _value_rules() -> list[tuple[str, Callable[[Any], bool], str]]:
    """``(dotted key, predicate, what it must be)`` for every constrained field."""
    def ge(lo: int) -> Callable[[Any], bool]:
        return lambda v: _is_int(v) and v >= lo

    def opt_ge(lo: int) -> Callable[[Any], bool]:
        return lambda v: v is None or (_is_int(v) and v >= lo)

    def num(pred: Callable[[float], bool]) -> Callable[[Any], bool]:
        return lambda v: _is_num(v) and pred(float(v))

    return [
        ("algorithm", *_in_choices(*ALGORITHMS)),
        ("max_steps", ge(0), "an integer >= 0"),
        ("advantage_reward", *_in_choices("auto", "raw", "success")),
        ("seed", lambda v: _is_int(v) and 0 <= v <= _MAX_SEED, "an integer in [0, 2**63 - 1]"),
        ("checkpoint_every", ge(1), "an integer >= 1"),
        ("keep_checkpoints", ge(1), "an integer >= 1"),
        ("threads", opt_ge(1), "an integer >= 1 or null (torch's default)"),
        ("device", lambda v: isinstance(v, str) and bool(v), "a device name such as cpu"),
        ("model.arch", *_in_choices("qwen2", "llama")),
        ("model.hidden_size", ge(1), "an integer >= 1"),
        ("model.num_layers", ge(1), "an integer >= 1"),
        ("model.num_heads", ge(1), "an integer >= 1"),
        ("model.intermediate_size", ge(1), "an integer >= 1"),
        ("model.max_positions", ge(1), "an integer >= 1"),
        ("model.dtype", *_in_choices("float32", "bfloat16")),
        ("model.chat_template", *_in_choices("auto", "none")),
        ("model.autocast", *_in_choices("auto", "bf16", "none")),
        ("model.lora.r", ge(0), "an integer >= 0 (0 = no adapters)"),
        ("model.lora.alpha", num(lambda v: v > 0), "> 0"),
        ("model.lora.dropout", num(lambda v: 0 <= v < 1), "in [0, 1)"),
        ("model.lora.target_modules",
         lambda v: v is None or (isinstance(v, str) and bool(v)) or (
             isinstance(v, list) and bool(v) and all(isinstance(x, str) and x for x in v)),
         "a list of module names, all-linear or null (PEFT's default)"),
        ("run_name", lambda v: v is None or (isinstance(v, str) and bool(v)),
         "a name or null"),
        ("sft.steps", ge(0), "an integer >= 0"),
        ("sft.batch_size", ge(1), "an integer >= 1"),
        ("sft.lr", num(lambda v: v > 0), "> 0"),
        ("rollout.prompts_per_step", ge(1), "an integer >= 1"),
        ("rollout.n", opt_ge(1), "an integer >= 1 or null (the algorithm's default)"),
        ("rollout.temperature", num(lambda v: v > 0), "> 0"),
        ("rollout.top_p", num(lambda v: 0 < v <= 1), "in (0, 1]"),
        ("rollout.max_new_tokens", opt_ge(1), "an integer >= 1 or null"),
        ("loss.clip_low", num(lambda v: 0 <= v < 1), "in [0, 1)"),
        ("loss.clip_high", num(lambda v: v >= 0), ">= 0"),
        ("loss.agg", lambda v: v in AGG_MODES, " / ".join(AGG_MODES)),
        ("loss.kl_coef", num(lambda v: v >= 0), ">= 0"),
        ("loss.kl_estimator", lambda v: v in KL_ESTIMATORS, " / ".join(KL_ESTIMATORS)),
        ("loss.entropy_coef", num(lambda v: True), "a number"),
        ("loss.ppo_epochs", ge(1), "an integer >= 1"),
        ("loss.minibatches", ge(1), "an integer >= 1"),
        ("optim.lr", num(lambda v: v > 0), "> 0"),
        ("optim.weight_decay", num(lambda v: v >= 0), ">= 0"),
        ("optim.beta1", num(lambda v: 0 <= v < 1), "in [0, 1)"),
        ("optim.beta2", num(lambda v: 0 <= v < 1), "in [0, 1)"),
        ("optim.grad_clip", num(lambda v: v >= 0), ">= 0"),
        ("optim.warmup_steps", ge(0), "an integer >= 0"),
        ("eval.every", ge(1), "an integer >= 1"),
        ("eval.n", ge(1), "an integer >= 1"),
        ("eval.num_prompts", opt_ge(1), "an integer >= 1 or null (all)"),
        ("eval.temperature", num(lambda v: v > 0), "> 0"),
        ("eval.top_p", num(lambda v: 0 < v <= 1), "in (0, 1]"),
        ("kappo.k", ge(1), "an integer >= 1"),
        ("kappo.beta", num(lambda v: v >= MIN_BETA), f"a number >= {MIN_BETA:g}"),
        ("kappo.bank_size", ge(2), "an integer >= 2"),
        ("kappo.bank_prompts", opt_ge(1), "an integer >= 1 or null (every training prompt)"),
        ("kappo.kind", *_in_choices(*CALIBRATION_KINDS)),
        ("kappo.calibration", lambda v: v is None or (isinstance(v, str) and bool(v)),
         "a file path or null"),
        ("kappo.bank", lambda v: v is None or (isinstance(v, str) and bool(v)),
         "a directory path or null"),
        ("kappo.dpo_pairs", ge(1), "an integer >= 1"),
        ("kappo.dpo_labels", *_in_choices("bradley_terry", "hard")),
    ]


def check_values(cfg: TrainConfig) -> None:
    """Types, finiteness and ranges of every field, and the constraints between fields."""
    check_finite(cfg)
    values = dict(config_items(cfg))
    for key, ok, want in _value_rules():
        if not ok(values[key]):
            raise ValueError(f"config key {key!r} must be {want}, got {values[key]!r}")
    if cfg.rollout.prompts_per_step % cfg.loss.minibatches:
        raise ValueError(
            f"config key 'loss.minibatches' ({cfg.loss.minibatches}) must divide "
            f"rollout.prompts_per_step ({cfg.rollout.prompts_per_step}): minibatches hold "
            "whole groups"
        )
    resolve_report_to(cfg.report_to)
    if cfg.model.autocast == "bf16" and not cfg.device.startswith("cuda"):
        raise ValueError(
            f"config key 'model.autocast' is bf16, which needs a CUDA device; device is "
            f"{cfg.device!r} (use auto or none)"
        )
    if cfg.model.path is None and cfg.model.hidden_size % cfg.model.num_heads:
        raise ValueError(
            f"config key 'model.hidden_size' ({cfg.model.hidden_size}) must be divisible by "
            f"model.num_heads ({cfg.model.num_heads})"
        )


def check_device(device: str) -> None:
    """``device`` parses as a torch device and that device is available here."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(
            f"config key 'device' must be a torch device such as cpu, cuda, cuda:1 or mps, "
            f"got {device!r}"
        ) from None
    if dev.type == "cpu":
        return
    backend = torch.backends.mps if dev.type == "mps" else getattr(torch, dev.type, None)
    available = getattr(backend, "is_available", None)
    if available is None:
        raise ValueError(
            f"config key 'device' is {device!r}, which is not a compute device; use cpu, cuda, "
            "cuda:N or mps"
        )
    if not available():
        raise ValueError(
            f"config key 'device' is {device!r}, but no {dev.type} device is available to this "
            f"torch ({torch.__version__})"
        )
    count = getattr(getattr(torch, dev.type, None), "device_count", None)
    if dev.index is not None and count is not None and dev.index >= count():
        raise ValueError(
            f"config key 'device' is {device!r}, but only {count()} {dev.type} device(s) are "
            "visible"
        )


def check_dependencies(cfg: TrainConfig) -> None:
    """The optional packages this config needs are installed (else
    :class:`bestk._optional.MissingDependency`, an ``ImportError`` naming the extra): the
    ``train`` extra's transformers, tokenizers, safetensors and matplotlib, PEFT for
    ``model.lora``, and each integration of ``report_to``. A task checks its own (the
    ``dataset`` task needs ``datasets``, a reward its scorer) when it loads."""
    for module in ("transformers", "tokenizers", "safetensors", "matplotlib"):
        require(module, extra="train")
    if cfg.model.lora.r > 0:
        require("peft", extra="train")
    for name in resolve_report_to(cfg.report_to):
        module, extra = INTEGRATIONS[name]
        require(module, extra=extra)


#: Files of which a Hugging Face tokenizer directory holds at least one.
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt",
    "spiece.model",
)


def check_model_dir(path: str | Path) -> None:
    """``path`` is a directory holding a Hugging Face model config and a tokenizer."""
    p = Path(path)
    if not p.is_dir():
        raise ValueError(f"model directory {str(path)!r} is not a directory")
    if not (p / "config.json").is_file():
        raise ValueError(
            f"model directory {str(path)!r} holds no Hugging Face model (no config.json)"
        )
    if not any((p / name).is_file() for name in TOKENIZER_FILES):
        raise ValueError(
            f"model directory {str(path)!r} holds no tokenizer (none of "
            f"{', '.join(TOKENIZER_FILES)})"
        )


@contextmanager
def _global_rng_preserved() -> Iterator[None]:
    """Leave the python, numpy and torch (CPU) global RNG states as they were."""
    py, npy = random.getstate(), np.random.get_state()  # noqa: NPY002
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            random.setstate(py)
            np.random.set_state(npy)  # noqa: NPY002


def check_estimator_runs(cfg: TrainConfig, options: dict[str, Any] | None = None) -> None:
    """Run ``bestk.advantages`` on a dummy batch of 2 groups of ``rollout.n`` 0/1 rewards with
    the configured options (path-valued ones loaded, :func:`bestk.estimators.resolve_options`,
    unless given), so
    that the estimator's own checks reject bad option values before any work. An estimator
    the ``kappo`` section calibrates gets a dummy calibration of the configured k, beta and
    kind. The global RNG states are left untouched."""
    cfg = resolve_defaults(cfg)
    opts = resolve_options(cfg.estimator, cfg.estimator_options) if options is None else options
    labels: list[Any] = [0, 1]
    if "calibration" not in opts and estimator_info(cfg.estimator).calibrated:
        kind = {"auto": "binary"}.get(cfg.kappo.kind, cfg.kappo.kind)  # auto: a binary dummy
        opts = {**opts, "calibration": calibrate(
            {0: [0.0, 1.0], 1: [0.0, 1.0]}, k=cfg.kappo.k, beta=cfg.kappo.beta, kind=kind)}
    cal = opts.get("calibration")
    if hasattr(cal, "prompt_ids"):
        known = calibration_prompt_ids(cal)
        labels = [known[0], known[min(1, len(known) - 1)]]
    n = cfg.rollout.n
    rewards = torch.tensor([float((i + g) % 2) for g in range(2) for i in range(n)],
                           dtype=torch.float64)
    group = [labels[g] for g in range(2) for _ in range(n)]
    with _global_rng_preserved():
        try:
            advantages(cfg.estimator, rewards, group=group, **opts)
        except (TypeError, ValueError) as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ValueError(
                f"estimator_options of {cfg.estimator!r} {cfg.estimator_options!r} rejected by "
                f"the estimator: {first}"
            ) from None
