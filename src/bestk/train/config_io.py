"""Reading and writing the trainer's config: YAML files, ``--set`` overrides, nested dicts.

A config is read into a tree of plain values (YAML file: :func:`load_config`; nested dict:
:func:`config_from_dict`; ``--set key=value`` dotted keys: :func:`apply_overrides`, values read
as YAML scalars / lists / maps through OmegaConf's dotlist reader, ``${...}`` interpolations
resolved by OmegaConf against the merged config), then validated as a whole by the schema of
:mod:`bestk.train.config`, whose errors are one line naming the key. :func:`config_to_dict`
is what ``config.yaml`` holds; :func:`resolved_from_dict` reads an already resolved one back.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import ValidationError
from pydantic.fields import FieldInfo

from bestk.train.config import (
    ResolvedTrainConfig,
    TrainConfig,
    _Section,
    error_line,
    field_at,
    is_mapping_field,
    is_section,
    section_class,
    unknown_key,
)


class _YamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader reading floats as YAML 1.2 does (``5e-3``, ``1e4`` are numbers,
    not strings, as OmegaConf reads them)."""


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                   |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
                   |[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                   |[-+]?\.(?:inf|Inf|INF)
                   |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."),
)

__all__ = ["config_to_dict", "config_keys", "check_schema", "config_from_dict",
           "parse_yaml_config", "load_config", "yaml_error_line", "apply_overrides",
           "dotlist_value", "resolved_from_dict"]


# -- reading configs: a tree of plain values, validated by the schema ----------------------------

def config_to_dict(cfg: _Section) -> dict[str, Any]:
    """Plain nested dict of a config (what ``config.yaml`` holds), in field order."""
    return {name: config_to_dict(v) if isinstance(v, _Section) else copy.deepcopy(v)
            for name, v in cfg}


def config_keys(cls: type[_Section] = TrainConfig, prefix: str = "") -> dict[str, FieldInfo]:
    """``{dotted key: FieldInfo}`` of every leaf field of the schema (mappings such as
    ``task.options`` are leaves), in field order."""
    keys: dict[str, FieldInfo] = {}
    for name, info in cls.model_fields.items():
        if is_section(info.annotation):
            keys.update(config_keys(info.annotation, f"{prefix}{name}."))
        else:
            keys[f"{prefix}{name}"] = info
    return keys


def _set(tree: dict[str, Any], key: str, value: object) -> None:
    """Set the dotted ``key`` of the plain config ``tree`` to ``value``: a section merges a
    mapping of its keys, a mapping field (``task.options``) is replaced (a key inside it,
    ``task.options.digits``, is set), any other field takes the value as given (the schema
    checks it)."""
    parts = key.split(".")
    field_key, info, used = field_at(parts)
    if info is None and used < len(parts):
        where = ".".join(parts[:used])
        raise unknown_key(key, section_class(where) if where else TrainConfig, where)
    node = tree
    for part in parts[: used - 1]:
        node = node[part]
    name = parts[used - 1]
    if info is None:  # a whole section
        if not isinstance(value, Mapping):
            raise ValueError(f"config key {key!r} is a section; give a mapping")
        for k, v in value.items():
            _set(tree, f"{key}.{k}", v)
        return
    if used == len(parts):
        node[name] = dict(value) if isinstance(value, Mapping) else value
        return
    if not is_mapping_field(info.annotation):
        raise ValueError(f"unknown config key {key!r}: {field_key} is not a section")
    inner = node[name] = dict(node[name] or {}) if isinstance(node[name], Mapping) else {}
    *path, last = parts[used:]
    for part in path:
        inner[part] = dict(inner[part]) if isinstance(inner.get(part), Mapping) else {}
        inner = inner[part]
    inner[last] = value


def _tree(cfg: TrainConfig) -> dict[str, Any]:
    return config_to_dict(cfg)


def _has_interpolation(value: object) -> bool:
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, Mapping):
        return any(_has_interpolation(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_interpolation(v) for v in value)
    return False


def _resolve_interpolations(tree: dict[str, Any]) -> dict[str, Any]:
    """``${...}`` interpolations resolved by OmegaConf against the whole config."""
    if not _has_interpolation(tree):
        return tree
    try:
        conf = OmegaConf.create(tree, flags={"allow_objects": True})
        return OmegaConf.to_container(conf, resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", "") or "?"
        raise ValueError(f"config key {key!r}: {str(e).splitlines()[0]}") from None


def _validated(tree: dict[str, Any]) -> TrainConfig:
    tree = _resolve_interpolations(tree)
    try:
        return TrainConfig.model_validate(tree)
    except ValidationError as e:
        raise ValueError(error_line(e, data=tree)) from None


def check_schema(cfg: TrainConfig) -> None:
    """Validate ``cfg`` as a whole again (a config changed attribute by attribute is checked
    field by field and section by section; this also checks the rules between sections);
    ``ValueError`` naming the key."""
    _validated(config_to_dict(cfg))


def config_from_dict(data: Mapping[str, object] | None, base: TrainConfig | None = None
                     ) -> TrainConfig:
    """A new :class:`TrainConfig` from a nested dict merged on ``base`` (default: the
    defaults); unknown keys and bad values raise ``ValueError`` naming the key."""
    if data is None:
        return base or TrainConfig()
    if not isinstance(data, Mapping):
        raise ValueError(f"a config must be a mapping at the top level, got {type(data).__name__}")
    tree = _tree(base or TrainConfig())
    for k, v in data.items():
        _set(tree, str(k), v)
    return _validated(tree)


def parse_yaml_config(text: str) -> Any:
    """The YAML document ``text`` as plain Python (OmegaConf's YAML reading: ``5e-3`` is a
    number; an empty document is ``{}``); ``yaml.YAMLError`` if it is not YAML. A document
    that is a scalar (``42``, ``hello world``) is returned as it is, for the caller to refuse
    (OmegaConf would fail on a number and read a word as a key)."""
    data = yaml.load(text, Loader=_YamlLoader) if text.strip() else None
    if data is None:
        return {}
    if not isinstance(data, (dict, list)):
        return data
    return OmegaConf.to_container(OmegaConf.create(data), resolve=False)


def _kind(value: object) -> str:
    """``int 42``: a value's type and (short) repr, for messages; ``list`` / ``dict`` alone."""
    if isinstance(value, (list, dict)):
        return type(value).__name__
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


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
    if not isinstance(data, Mapping):
        raise ValueError(f"config file {str(p)!r} must be a mapping at the top level, got "
                         f"{_kind(data)}; write one 'key: value' per line (max_steps: 50)")
    return config_from_dict(data)


def yaml_error_line(e: yaml.YAMLError) -> str:
    """A one-line description of a YAML parse error (problem and line:column)."""
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    mark = getattr(e, "problem_mark", None)
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark else problem


def dotlist_value(item: str) -> tuple[str, object]:
    """``(key, value)`` of a ``key=value`` item, the value read as YAML by OmegaConf's dotlist
    reader (a value that is not YAML stays a string)."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ValueError(f"--set expects key=value, got {item!r}")
    try:
        value = OmegaConf.to_container(OmegaConf.from_dotlist([f"{key}={raw}"]))
    except yaml.YAMLError:
        return key, raw
    except OmegaConfBaseException:
        raise ValueError(f"--set {item!r}: {key!r} is not a valid dotted key") from None
    for part in key.split("."):  # down the nested mapping the dotlist made
        value = value[part]  # type: ignore[index,call-overload]  # a nested dict here
    return key, value


def apply_overrides(cfg: TrainConfig, overrides: list[str] | None) -> TrainConfig:
    """Apply ``key=value`` strings (OmegaConf dotlist: dotted keys, values read as YAML; a
    value that is not YAML stays a string) to ``cfg`` in place, all at once (the merged config
    is validated as a whole); returns ``cfg``."""
    if not overrides:
        return cfg
    tree = _tree(cfg)
    for item in overrides:
        _set(tree, *dotlist_value(item))
    new = _validated(tree)
    cfg.__dict__.update(new.__dict__)  # validated as a whole: no field-by-field assignment
    return cfg

def resolved_from_dict(data: Mapping[str, object],
                       generation_config: SimpleNamespace | None = None) -> ResolvedTrainConfig:
    """The :class:`ResolvedTrainConfig` of a nested dict that is already resolved (a run's
    ``config.yaml``, a job's config): checked by the schema, nothing filled in (a ``None`` where
    a resolved config needs a value is a ``ValueError`` naming the key)."""
    tree = _tree(config_from_dict(data))
    try:
        cfg = ResolvedTrainConfig.model_validate(tree)
    except ValidationError as e:
        raise ValueError(error_line(e, data=tree)) from None
    cfg._generation_config = generation_config
    return cfg
