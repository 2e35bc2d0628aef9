"""The config room of the trainer: what a run's config is and how it is read.

* :mod:`~bestk.train.config.schema` -- the pydantic schema (:class:`TrainConfig`, its
  sections, :class:`ResolvedTrainConfig`), each rule beside its field;
* :mod:`~bestk.train.config.io` -- YAML files, ``--set`` overrides, ``config.yaml`` in and
  out.

This package imports only the schema (pydantic), so ``from bestk.train.config import
TrainConfig`` stays light.
"""

from bestk.train.config.schema import *  # noqa: F403 - the room's public names are the schema's
from bestk.train.config.schema import CHUNKED_FROM_VOCAB
from bestk.train.config.schema import __all__ as _SCHEMA_NAMES

__all__ = [*_SCHEMA_NAMES, "CHUNKED_FROM_VOCAB"]
