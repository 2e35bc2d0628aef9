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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import ValidationError
from pydantic.fields import FieldInfo

from bestk.train.config.schema import (
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

#: The most values aliases may add to a YAML document, each alias counted as a copy of what it
#: names: far above any config, far below what hangs (a 400-byte "billion laughs" holds 10^8).
YAML_ALIAS_LIMIT = 100_000
#: The deepest a YAML document may nest (collections in collections, aliases expanded): far
#: above any config, below where the readers after YAML (OmegaConf) run out of stack.
YAML_DEPTH_LIMIT = 32


class _RefusedYaml(yaml.composer.ComposerError):
    """A YAML document :class:`_YamlLoader` refuses (a ``yaml.YAMLError`` with a line and
    column, reported as an invalid document is)."""


class _YamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader reading floats as YAML 1.2 does (``5e-3``, ``1e4`` are numbers,
    not strings, as OmegaConf reads them), and refusing what no config needs and a hostile one
    uses, while it composes (before any value is built, so nothing can hang or overflow):

    * a key twice in one mapping (one value, never one silently winning), named with its
      dotted path and both lines; ``<<`` merge keys are not keys, and what they merge may be
      overridden;
    * an alias inside the collection it names (a recursive alias: ``a: &x [*x]``);
    * aliases that add more than :data:`YAML_ALIAS_LIMIT` values to the document (a "billion
      laughs": each alias counts as a copy of what it names);
    * nesting deeper than :data:`YAML_DEPTH_LIMIT` levels, aliases expanded.

    Anchors and aliases of scalars and of small collections work as YAML says.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._open: list[str | None] = []  # anchors of the collections being composed
        self._path: list[str] = []  # the keys down to the node being composed
        self._sizes: dict[int, tuple[int, int]] = {}  # collection -> (values, depth) expanded
        self._keys: dict[int, dict[object, int]] = {}  # open mapping -> {key: its line}
        self._added = 0  # values the aliases added so far

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._check_alias(self.peek_event())
            return super().compose_node(parent, index)
        if isinstance(parent, yaml.MappingNode) and index is not None:  # a value; index: its key
            self._check_key(parent, index)
        label = index.value if isinstance(index, yaml.ScalarNode) else str(index)
        self._path.append(label)
        node = super().compose_node(parent, index)
        self._path.pop()
        return node

    def compose_sequence_node(self, anchor: str | None) -> Any:
        return self._collection(super().compose_sequence_node, anchor)

    def compose_mapping_node(self, anchor: str | None) -> Any:
        return self._collection(super().compose_mapping_node, anchor)

    def _collection(self, compose: Callable[[str | None], Any], anchor: str | None) -> Any:
        if len(self._open) >= YAML_DEPTH_LIMIT:
            raise _RefusedYaml(None, None, f"nested more than {YAML_DEPTH_LIMIT} levels deep",
                               self.peek_event().start_mark)
        self._open.append(anchor)
        node = compose(anchor)
        self._open.pop()
        self._keys.pop(id(node), None)
        children = (node.value if isinstance(node, yaml.SequenceNode)
                    else [n for pair in node.value for n in pair])
        sizes = [self._sizes.get(id(c), (1, 0)) for c in children]
        self._sizes[id(node)] = (1 + sum(v for v, _ in sizes),
                                 1 + max((d for _, d in sizes), default=0))
        return node

    def _check_alias(self, event: Any) -> None:
        if event.anchor in self._open:
            raise _RefusedYaml(None, None, f"alias *{event.anchor} is inside the collection it "
                               "names (a recursive alias)", event.start_mark)
        node = self.anchors.get(event.anchor)
        if node is None:
            return  # PyYAML's own error: an undefined alias
        values, depth = self._sizes.get(id(node), (1, 0))
        self._added += values
        if self._added > YAML_ALIAS_LIMIT:
            raise _RefusedYaml(None, None, f"aliases expand the document by more than "
                               f"{YAML_ALIAS_LIMIT} values (an alias bomb?)", event.start_mark)
        if len(self._open) + depth > YAML_DEPTH_LIMIT:
            raise _RefusedYaml(None, None, f"alias *{event.anchor} nests the document more than "
                               f"{YAML_DEPTH_LIMIT} levels deep", event.start_mark)

    def _check_key(self, mapping: Any, key_node: Any) -> None:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            return
        key = self.construct_object(key_node)  # as the mapping will hold it: 1 and 01 are one
        seen = self._keys.setdefault(id(mapping), {})
        if key in seen:
            dotted = ".".join([*self._path[1:], str(key_node.value)])  # [0]: the root
            raise _RefusedYaml(None, None, f"duplicate key {dotted!r} (first at line "
                               f"{seen[key]})", key_node.start_mark)
        seen[key] = key_node.start_mark.line + 1


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
           "check_each_key_once", "last_of_each_key", "dotlist_value", "resolved_from_dict",
           "YAML_ALIAS_LIMIT", "YAML_DEPTH_LIMIT"]


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
    loader = _YamlLoader(raw)
    try:  # what a config file refuses, a value refuses (a duplicate key, an alias bomb)
        loader.get_single_node()
    except _RefusedYaml as e:
        raise ValueError(f"--set {item!r}: {yaml_error_line(e)}") from None
    except yaml.YAMLError:
        pass  # not YAML: a string, below
    finally:
        loader.dispose()
    try:
        value = OmegaConf.to_container(OmegaConf.from_dotlist([f"{key}={raw}"]))
    except yaml.YAMLError:
        return key, raw
    except OmegaConfBaseException:
        raise ValueError(f"--set {item!r}: {key!r} is not a valid dotted key") from None
    for part in key.split("."):  # down the nested mapping the dotlist made
        value = value[part]  # type: ignore[index,call-overload]  # a nested dict here
    return key, value


def _leaves(key: str, value: object) -> list[tuple[str, object]]:
    """The ``(dotted key, value)`` pairs that setting ``key`` to ``value`` writes: a mapping
    for a section is its keys one by one (it merges); anything else is one value (a mapping
    field such as ``task.options`` is replaced as a whole)."""
    _, info, used = field_at(key.split("."))
    if info is None and used == len(key.split(".")) and isinstance(value, Mapping):
        return [pair for k, v in value.items() for pair in _leaves(f"{key}.{k}", v)]
    return [(key, value)]


def check_each_key_once(overrides: Sequence[str], flag: str = "--set ") -> dict[str, object]:
    """The rule of a command line: each config key is given one value. Two ``key=value`` items
    that set the same key are refused (a one-line ``ValueError`` naming the key and both
    items) unless they give the same value (as the config reads it: ``--max-steps 20 --set
    max_steps=20`` is one value); so are a key and a key inside it (``rollout={n: 4}`` and
    ``rollout.n=8``; ``task.options={digits: 2}`` and ``task.options.op=sort``, as a mapping
    field is replaced as a whole), while a section's mapping is its keys one by one
    (``rollout={n: 4}`` and ``rollout.top_p=0.9`` are two keys). ``flag`` is what the message
    puts before an item. Returns ``{dotted key: value}`` of what the items set."""
    given: dict[str, tuple[str, object]] = {}  # dotted key -> (item, value)
    inside: dict[str, str] = {}  # a key holding given keys -> the first of them
    for item in overrides:
        for key, value in _leaves(*dotlist_value(item)):
            parts = key.split(".")
            outer = [k for k in (".".join(parts[:i]) for i in range(1, len(parts))) if k in given]
            if outer:  # a key given before holds this one
                other, both = outer[0], key
            elif key in inside:  # a key given before is inside this one
                other = both = inside[key]
            elif key in given and given[key][1] != value:
                other = both = key
            else:
                given[key] = (item, value)
                for i in range(1, len(parts)):
                    inside.setdefault(".".join(parts[:i]), key)
                continue
            raise ValueError(f"{flag}{given[other][0]} and {flag}{item} both set {both!r}; give "
                             "it once")
    return {k: v for k, (_, v) in given.items()}


def last_of_each_key(overrides: Sequence[str]) -> list[str]:
    """Layered ``key=value`` overrides (a later item wins, as :func:`apply_overrides` applies
    them) as one command line may give them: of the items that name the same key, the last
    alone, in its place. For scripts that build a ``bestk`` command from layers (a testbed's
    base settings, then a run's), since a command line gives each key once
    (:func:`check_each_key_once`)."""
    keys = [item.split("=", 1)[0].strip() for item in overrides]
    return [item for i, item in enumerate(overrides) if keys[i] not in keys[i + 1:]]


def apply_overrides(cfg: TrainConfig, overrides: list[str] | None) -> TrainConfig:
    """Apply ``key=value`` strings (OmegaConf dotlist: dotted keys, values read as YAML; a
    value that is not YAML stays a string) to ``cfg`` in place, all at once (the merged config
    is validated as a whole); returns ``cfg``. They are applied in order (a later item
    overrides an earlier one: layers of overrides, as the tests and ``bestk compare`` build
    them); a command line refuses a key given twice first (:func:`check_each_key_once`)."""
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
