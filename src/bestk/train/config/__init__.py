"""The config room of the trainer: what a run's config is and how it is read.

* :mod:`~bestk.train.config.schema` -- the pydantic schema (:class:`TrainConfig`, its
  sections, :class:`ResolvedTrainConfig`), each rule beside its field;
* :mod:`~bestk.train.config.io` -- YAML files, ``--set`` overrides, ``config.yaml`` in and
  out.

This package imports only the schema (pydantic), so ``from bestk.train.config import
TrainConfig`` stays light.
"""

from bestk.train.config.schema import (
    CALIBRATION_KINDS,
    CHUNKED_FROM_VOCAB,
    DEFAULT_OUT,
    DEFAULT_SFT_STEPS,
    INT64_MAX,
    EvalConfig,
    KappoConfig,
    LoRAConfig,
    LossConfig,
    ModelConfig,
    OptimConfig,
    ResolvedEvalConfig,
    ResolvedRolloutConfig,
    ResolvedSFTConfig,
    ResolvedTrainConfig,
    RolloutConfig,
    SFTConfig,
    TaskConfig,
    TrainConfig,
    VLLMConfig,
    error_line,
    field_at,
    is_mapping_field,
    is_section,
    section_class,
    unknown_key,
)

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
    "CHUNKED_FROM_VOCAB",
]
