"""Estimator registry: each estimator with its properties, and the entry point :func:`advantages`.

An estimator is a plain function ``fn(rewards, groups, *, option=default, ...) -> Tensor``:

* ``rewards`` is a 1-D float64 tensor of the batch's rewards (validated finite, non-empty, and
  0/1 when the estimator's reward domain says so);
* ``groups`` is a :class:`bestk.groups.Groups` of the batch;
* options are keyword-only parameters; their names are the options the user may pass;
* the result is a 1-D float64 tensor of advantages, scaled so that the per-group
  policy-gradient estimate is ``(1/N) * sum_i A_i * grad log pi(y_i | x)``.

:func:`register_estimator` records it with its properties (:class:`EstimatorInfo`): the
objective it is an unbiased gradient of (:mod:`bestk.estimators.objectives`), its reward
domain, whether its group labels must be prompt ids, and which options may be given as file
paths. Every consumer -- the trainer, the verl and TRL adapters, the lab, ``bestk estimators``
and the unbiasedness tests -- reads these properties; none of them tests estimator names.

:func:`advantages` does all input conversion and validation (:func:`bestk._inputs.prepare`),
checks the reward domain and the prompt ids, loads path-valued options, so estimators only
check the values of their own options (raising ``ValueError``).
"""

from __future__ import annotations

import functools
import inspect
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias, overload

import numpy as np
import torch

from bestk._inputs import Numbers, NumbersOut, first_non_binary, prepare, to_output
from bestk._options import check_option_names, load_path_cached
from bestk.estimators.objectives import ByOption, Objective
from bestk.groups import GroupLabels
from bestk.kappo.calibration import Calibration, CalibrationKind
from bestk.kappo.calibration import calibration_kind as calibration_kind_of

__all__ = [
    "ESTIMATORS",
    "REWARD_DOMAINS",
    "EstimatorInfo",
    "register_estimator",
    "estimator_info",
    "on_register",
    "advantages",
    "estimator_options",
    "estimator_table",
    "resolve_options",
    "check_estimator_options",
    "check_option_names",
    "prepare",
    "to_output",
]

EstimatorFn = Callable[..., torch.Tensor]
#: An estimator's options: option name -> value (a number, a name, a loaded file's value such
#: as a KAPPO calibration), as its keyword-only parameters take them.
Options: TypeAlias = Mapping[str, object]
#: A path-valued option's loader: the option's file path -> the value the estimator takes.
PathLoader: TypeAlias = Callable[[str | os.PathLike[str]], object]

#: ``any``: any finite rewards; ``binary``: 0/1 rewards only; ``calibrated``: the estimator
#: takes a KAPPO calibration (option ``calibration``) and its rewards are 0/1 when that
#: calibration is binary, any finite rewards when it is a win-rate one.
REWARD_DOMAINS = ("any", "binary", "calibrated")


@dataclass(frozen=True)
class EstimatorInfo:
    """A registered estimator and its properties (what :func:`register_estimator` records).

    Attributes
    ----------
    name: the registry key.
    fn: the estimator function.
    objective: what ``(1/N) sum_i A_i grad log pi(y_i|x)`` is an unbiased gradient of: an
        :class:`~bestk.estimators.objectives.Objective`, a
        :class:`~bestk.estimators.objectives.ByOption` (it depends on an option), or ``None``
        (not an unbiased gradient of any fixed objective).
    reward_domain: one of :data:`REWARD_DOMAINS`.
    needs_prompt_ids: the group labels must be the prompts' ids (the estimator looks prompts
        up, e.g. in a calibration), not any labels: 1-D rewards with ``group`` are required.
    path_options: option name -> loader: a ``str`` / ``PathLike`` value of that option is
        replaced by ``loader(value)`` (``kappo_grpo``'s ``calibration`` file).
    prompt_weight: for an estimator without an objective, the closed-form prompt weight
        ``prompt_weight(p, n, **options)`` of its expected update on 0/1 rewards
        (``E[(1/N) sum_i A_i S_i] = omega(p) grad p``), if one is known.
    default_options: values of required options for a run that gives none (``bestk
        compare`` of several estimators under one config: ``pkpo``'s ``k``).
    group_bounded: integer options that may not exceed the group size ``N`` (``pkpo``'s
        ``k``: max@k of ``N`` samples); :meth:`fit_group` clamps them.
    min_group: the smallest group size ``N`` at which a sample can get a non-zero advantage
        (below it every advantage is 0, so nothing trains): 1 (REINFORCE: ``A_i = r_i``), 2
        for an estimator that compares a sample with the rest of its group (a baseline, a
        leave-one-out term, a group std), or ``min_group(options)`` of the options (defaults
        filled in) when an option decides (``argmaxrl``'s ``baseline``);
        :meth:`min_group_size` reads it.
    """

    name: str
    fn: EstimatorFn
    objective: Objective | ByOption | None = None
    reward_domain: str = "any"
    needs_prompt_ids: bool = False
    path_options: Mapping[str, PathLoader] = field(default_factory=dict)
    prompt_weight: Callable[..., float] | None = None
    default_options: Options = field(default_factory=dict)
    group_bounded: tuple[str, ...] = ()
    min_group: int | Callable[[Options], int] = 1

    def min_group_size(self, options: Options | None = None) -> int:
        """:attr:`min_group` for ``options`` (defaults filled in)."""
        if callable(self.min_group):
            return int(self.min_group(self.with_defaults(options)))
        return self.min_group

    def fit_group(self, options: Options, n: int) -> dict[str, object]:
        """``options`` with each integer :attr:`group_bounded` option at most ``n``."""
        out = dict(options)
        for key in self.group_bounded:
            value = out.get(key)
            if isinstance(value, int):
                out[key] = min(value, n)
        return out

    @property
    def options(self) -> dict[str, object]:
        """Option names with their defaults (``inspect.Parameter.empty`` when required)."""
        return dict(_keyword_options(self.fn))

    @property
    def summary(self) -> str:
        """The first line of the estimator's docstring."""
        return (inspect.getdoc(self.fn) or "").split("\n", 1)[0].strip()

    def with_defaults(self, options: Options | None = None) -> dict[str, object]:
        """``options`` completed with the defaults of the options not given."""
        out = {k: v for k, v in self.options.items() if v is not inspect.Parameter.empty}
        out.update(options or {})
        return out

    def objective_for(self, options: Options | None = None) -> Objective | None:
        """The objective of the estimator run with ``options`` (defaults filled in), with an
        option-named ``k`` bound to its value; ``None`` if it claims none."""
        opts = self.with_defaults(options)
        obj = self.objective.resolve(opts) if isinstance(self.objective, ByOption) else (
            self.objective)
        return None if obj is None else obj.bind(opts)

    def describe_objective(self) -> str:
        """One line: ``"J_N (baseline=loo, none); J_{N-1} (baseline=mean)"``, ``"best@k"``,
        ``"none"``."""
        if isinstance(self.objective, ByOption):
            return self.objective.describe()
        return "none" if self.objective is None else self.objective.name

    @property
    def calibrated(self) -> bool:
        """Whether it takes a KAPPO calibration (reward domain ``calibrated``)."""
        return self.reward_domain == "calibrated"

    def binary_rewards(self, calibration_kind: str | CalibrationKind | None = None) -> bool:
        """Whether the estimator needs 0/1 rewards (for a ``calibrated`` one: with a calibration
        of ``calibration_kind``, a kind name or :class:`~bestk.kappo.calibration.CalibrationKind`;
        ``None``: no calibration known, so not)."""
        if self.calibrated:
            return calibration_kind is not None and calibration_kind_of(calibration_kind).binary
        return self.reward_domain == "binary"

    def binary_prompt_weight(self, p: float, n: int,
                             options: Options | None = None) -> float | None:
        """The prompt weight ``omega(p)`` of the expected update on 0/1 rewards at group size
        ``n``: from the objective, else from ``prompt_weight``; ``None`` if neither says."""
        obj = self.objective_for(options)
        if obj is not None:
            return obj.binary_weight(p, n)
        if self.prompt_weight is not None:
            return float(self.prompt_weight(p, n, **self.with_defaults(options)))
        return None


class _Registry(MutableMapping):
    """``ESTIMATORS``: name -> estimator function, a view of the registered
    :class:`EstimatorInfo` (assigning a function registers it with default properties;
    ``del`` / ``pop`` unregister)."""

    def __init__(self) -> None:
        self.info: dict[str, EstimatorInfo] = {}

    def __getitem__(self, name: str) -> EstimatorFn:
        return self.info[name].fn

    def __setitem__(self, name: str, fn: EstimatorFn) -> None:
        register_estimator(name, overwrite=True)(fn)

    def __delitem__(self, name: str) -> None:
        del self.info[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.info)

    def __len__(self) -> int:
        return len(self.info)

    def __repr__(self) -> str:
        return f"ESTIMATORS({sorted(self.info)})"


#: name -> estimator function. Use :func:`register_estimator` to add one (with its
#: properties); :func:`estimator_info` gives the properties.
ESTIMATORS = _Registry()

_LISTENERS: list[Callable[[EstimatorInfo], None]] = []


def on_register(callback: Callable[[EstimatorInfo], None]) -> None:
    """Call ``callback(info)`` for every estimator registered from now on (after it is in
    :data:`ESTIMATORS`). The verl plugin uses it to hand new estimators to verl."""
    _LISTENERS.append(callback)


def _check_properties(name: str, objective: Objective | ByOption | None, reward_domain: str,
                      min_group: int | Callable[[Options], int]) -> None:
    """The properties :func:`register_estimator` is given are well formed: a non-empty name,
    an objective of the known kinds, ``min_group`` an integer >= 1 (or a function of the
    options), a known reward domain. One-line ``ValueError`` naming the estimator."""
    if not isinstance(name, str) or not name:
        raise ValueError("estimator name must be a non-empty string")
    if objective is not None and not isinstance(objective, (Objective, ByOption)):
        raise ValueError(
            f"estimator {name!r}: objective must be an Objective, a ByOption or None, got "
            f"{type(objective).__name__}"
        )
    if not callable(min_group) and (isinstance(min_group, bool) or not isinstance(min_group, int)
                                    or min_group < 1):
        raise ValueError(
            f"estimator {name!r}: min_group must be an integer >= 1 or a function of the "
            f"options, got {min_group!r}"
        )
    if reward_domain not in REWARD_DOMAINS:
        raise ValueError(
            f"estimator {name!r}: reward_domain must be one of {', '.join(REWARD_DOMAINS)}, "
            f"got {reward_domain!r}"
        )


def _check_signature(name: str, fn: EstimatorFn, objective: Objective | ByOption | None,
                     reward_domain: str, path_options: Mapping[str, PathLoader] | None,
                     default_options: Options | None, group_bounded: Sequence[str]) -> None:
    """``fn`` takes ``(rewards, groups)`` positionally and every option its properties name
    as a keyword-only parameter (a ``calibrated`` domain: a ``calibration`` option)."""
    params = list(inspect.signature(fn).parameters.values())
    positional = [
        p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(positional) != 2:
        raise ValueError(
            f"estimator {name!r} must take (rewards, groups) positionally and options as "
            "keyword-only parameters"
        )
    keywords = {p.name for p in params if p.kind == p.KEYWORD_ONLY}
    named = set(path_options or {}) | set(default_options or {}) | set(group_bounded) | (
        {objective.option} if isinstance(objective, ByOption) else set()) | (
        {objective.k} if isinstance(objective, Objective) and isinstance(objective.k, str)
        else set())
    if named - keywords:
        raise ValueError(
            f"estimator {name!r}: its properties name option(s) "
            f"{', '.join(sorted(named - keywords))} that it does not take"
        )
    if reward_domain == "calibrated" and "calibration" not in keywords:
        raise ValueError(
            f"estimator {name!r}: a 'calibrated' reward domain needs a 'calibration' option"
        )


def register_estimator(
    name: str,
    *,
    objective: Objective | ByOption | None = None,
    reward_domain: str = "any",
    needs_prompt_ids: bool = False,
    path_options: Mapping[str, PathLoader] | None = None,
    prompt_weight: Callable[..., float] | None = None,
    default_options: Options | None = None,
    group_bounded: Sequence[str] = (),
    min_group: int | Callable[[Options], int] = 1,
    overwrite: bool = False,
) -> Callable[[EstimatorFn], EstimatorFn]:
    """Decorator registering ``fn(rewards, groups, *, options...)`` under ``name`` with its
    properties (see :class:`EstimatorInfo`; ``docs/design.md`` walks through adding one).

    Example
    -------
    >>> import bestk
    >>> from bestk.estimators.objectives import best_at
    >>> @bestk.register_estimator("centered", objective=best_at(1, centred=True))
    ... def centered(rewards, groups):
    ...     return groups.center(rewards)[0]        # r_i - mean of its group
    """
    _check_properties(name, objective, reward_domain, min_group)

    def decorator(fn: EstimatorFn) -> EstimatorFn:
        current = ESTIMATORS.info.get(name)
        if current is not None and not overwrite and current.fn is not fn:
            raise ValueError(
                f"estimator {name!r} is already registered; pass overwrite=True to replace it"
            )
        _check_signature(name, fn, objective, reward_domain, path_options, default_options,
                         group_bounded)
        info = EstimatorInfo(
            name, fn, objective, reward_domain, needs_prompt_ids, dict(path_options or {}),
            prompt_weight, dict(default_options or {}), tuple(group_bounded), min_group,
        )
        ESTIMATORS.info[name] = info
        for callback in _LISTENERS:
            callback(info)
        return fn

    return decorator


@functools.cache
def _keyword_options(fn: EstimatorFn) -> tuple[tuple[str, object], ...]:
    return tuple(
        (p.name, p.default)
        for p in inspect.signature(fn).parameters.values()
        if p.kind == p.KEYWORD_ONLY
    )


def estimator_info(name: str) -> EstimatorInfo:
    """The :class:`EstimatorInfo` of estimator ``name`` (``ValueError`` listing the valid names
    for an unknown one)."""
    try:
        return ESTIMATORS.info[name]
    except (KeyError, TypeError):
        valid = ", ".join(sorted(ESTIMATORS))
        raise ValueError(f"unknown estimator {name!r}; valid estimators: {valid}") from None


def estimator_options(name: str) -> dict[str, object]:
    """Option names of estimator ``name`` with their defaults (``inspect.Parameter.empty``
    for a required option)."""
    return estimator_info(name).options


#: How :func:`estimator_table` shows each reward domain.
_DOMAIN_TEXT = {"any": "any", "binary": "0/1", "calibrated": "the calibration's (0/1 if binary)"}


def estimator_table() -> list[tuple[str, str, str, str, str]]:
    """One row per registered estimator (sorted by name): name, the objective it is an unbiased
    gradient of, its rewards, whether its groups must be prompt ids, its options with their
    defaults -- what ``bestk estimators`` prints and ``docs/estimators.md`` shows."""
    rows = []
    for name in sorted(ESTIMATORS):
        info = estimator_info(name)
        opts = ", ".join(
            k if v is inspect.Parameter.empty else f"{k}={v!r}" for k, v in info.options.items()
        )
        rows.append((name, info.describe_objective(), _DOMAIN_TEXT[info.reward_domain],
                     "yes" if info.needs_prompt_ids else "no", opts or "-"))
    return rows


def check_estimator_options(name: str, options: Iterable[str]) -> None:
    """Validate an estimator name and its option *names* (values are checked when it runs)."""
    check_option_names("estimator", name, options, estimator_options(name))


def resolve_options(name: str, options: Options) -> dict[str, Any]:
    """``options`` with each path-valued option of estimator ``name`` that is given as a
    ``str`` / ``PathLike`` loaded by its loader (``kappo_grpo``'s ``calibration`` file).
    Loads are cached by loader, absolute path, modification time and size
    (:func:`bestk._options.load_path_cached`): calling this every step (the trainer, verl, TRL,
    :func:`advantages`) reads each file once, and again after it is rewritten. A file that
    cannot be loaded is a ``ValueError`` ``cannot load OPTION 'PATH': why``. The values are
    the estimator's to read (a loaded calibration is used as one by the trainer), hence ``Any``."""
    info = estimator_info(name)
    out: dict[str, Any] = dict(options)
    for option, loader in info.path_options.items():
        value = out.get(option)
        if isinstance(value, (str, os.PathLike)):
            try:
                out[option] = load_path_cached(loader, value)
            except (OSError, ValueError) as e:
                raise ValueError(f"cannot load {option} {str(value)!r}: {e}") from None
    return out


def _check_domain(info: EstimatorInfo, rewards: torch.Tensor, options: Options,
                  from_labels: bool) -> None:
    if info.needs_prompt_ids and not from_labels:
        raise ValueError(
            f"{info.name} needs the prompt ids: pass 1-D rewards with group=<the prompt id of "
            "each sample> (with group=None or 2-D rewards the groups would be row numbers, not "
            "prompt ids)"
        )
    cal = options.get("calibration")
    kind = cal.kind_spec if isinstance(cal, Calibration) else None
    if info.binary_rewards(kind):
        i = first_non_binary(rewards)
        if i is not None:
            what = f"{info.name} with a binary calibration" if kind else info.name
            raise ValueError(
                f"{what} needs binary 0/1 rewards; reward at index {i} is {rewards[i].item()!r}"
            )


# A tensor's advantages are a tensor (its dtype and device), anything else's a numpy array.
@overload
def advantages(name: str, rewards: torch.Tensor, group: GroupLabels = None,
               **options: object) -> torch.Tensor: ...


@overload
def advantages(name: str, rewards: np.ndarray | Sequence[float] | Sequence[Sequence[float]],
               group: GroupLabels = None, **options: object) -> np.ndarray: ...


def advantages(name: str, rewards: Numbers, group: GroupLabels = None,
               **options: object) -> NumbersOut:
    """Per-sample advantages of estimator ``name``.

    Parameters
    ----------
    name:
        A key of :data:`ESTIMATORS` (``"argmaxrl"``, ``"maxrl"``, ``"softmax_grpo"``,
        ``"grpo"``, ``"rloo"``, ``"reinforce"``, ``"pkpo"``, ``"kappo_grpo"``, or a user one).
    rewards:
        1-D sequence of ``B`` rewards (list, numpy array or tensor), or a 2-D ``(G, N)`` array
        of ``G`` groups of ``N`` samples.
    group:
        For 1-D rewards: length-``B`` group labels (ints or any hashable, e.g. verl uids);
        ``None`` means a single group. Must be ``None`` for 2-D rewards.
    **options:
        Estimator options (see ``docs/estimators.md``); unknown options raise ``ValueError``.
        A path-valued option (``kappo_grpo``'s ``calibration``) may be a file path.

    Returns
    -------
    Advantages with the shape of ``rewards``: a tensor (same dtype and device) for tensor
    input, else a float64 numpy array. Scaled so that ``(1/N) sum_i A_i grad log pi(y_i|x)``
    is the per-group gradient estimate (the GRPO convention). Computed in float64 whatever
    the input dtype; never NaN or inf: advantages beyond the float64 range, or beyond the
    range of a narrower input dtype (float16: +-65504), raise ``ValueError`` naming it.

    Raises
    ------
    ValueError
        Unknown estimator or option, bad option value, rewards that are not a 1-D / 2-D
        array of finite numbers (a 0-d scalar included), labels that do not match, or
        rewards outside the estimator's domain.
    """
    info = estimator_info(name)
    check_estimator_options(name, options)
    options = resolve_options(name, options)
    flat, groups, finish = prepare(rewards, group)
    _check_domain(info, flat, options, groups.from_labels)
    a = info.fn(flat, groups, **options)
    if not isinstance(a, torch.Tensor) or a.shape != flat.shape:
        raise ValueError(
            f"estimator {name!r} returned {type(a).__name__} of shape "
            f"{tuple(getattr(a, 'shape', ()))}, expected a tensor of shape {tuple(flat.shape)}"
        )
    lo, hi = torch.aminmax(a)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        if bool(torch.isnan(a).any()):  # pragma: no cover - estimator bug guard
            raise ValueError(f"estimator {name!r} produced NaN advantages")
        big = float(flat.abs().max())
        raise ValueError(
            f"estimator {name!r}: the advantages exceed the float64 range (+-1.8e308) for "
            f"rewards up to {big:.6g} in magnitude; rescale the rewards"
        )
    return finish(a)
