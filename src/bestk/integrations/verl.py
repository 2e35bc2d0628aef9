r"""verl plugin: bestk's @k-aware advantage estimators as verl advantage estimators.

Importing this module registers every estimator of bestk's registry
(:data:`bestk.ESTIMATORS`) with ``verl.trainer.ppo.core_algos.register_adv_est`` under its
bestk name -- ``argmaxrl``, ``maxrl``, ``softmax_grpo``, ``pkpo``, ``reinforce``,
``kappo_grpo``, and any estimator registered later (:func:`bestk.estimators.on_register`),
yours included -- except the names verl already has: verl's own ``grpo`` / ``rloo`` / ... keep
their verl implementations (:data:`VERL_ESTIMATORS` lists what was registered). What each
needs is read from its registry properties: path-valued options (``kappo_grpo``'s
``calibration`` file) are loaded once and cached (by path, modification time and
size: :func:`bestk.estimators.resolve_options`), and an estimator that ``needs_prompt_ids``
gets verl's ``uid`` as its prompt ids. Each function computes
exactly ``bestk.advantages(name, scores, group=uid, **options)`` (the formulas, their
objectives and paper equations are in the estimators' docstrings, e.g.
:func:`bestk.estimators.argmaxrl.argmaxrl`), with verl's conventions around it:

* ``scores = token_level_rewards.sum(-1)`` (outcome reward, as verl's GRPO);
* groups are the ``uid`` strings (ragged groups and non-contiguous members are fine; labels are
  factorised with ``numpy.unique`` / ``torch.unique``, no Python loop over rows);
* rows whose ``response_mask`` is all zero are verl's synthetic padding rows
  (``verl.trainer.ppo.padding_utils``): they are left out of every group and get advantage 0, so
  they can neither join a real group nor change its advantages;
* the per-sequence advantage is broadcast over the response tokens:
  ``advantages = A[:, None] * response_mask``; ``returns`` is the same tensor (outcome-only,
  as verl's GRPO / RLOO).

Loading. bestk's package metadata declares this module under the ``verl.plugins`` entry-point
group, which ``import verl`` loads automatically (``VERL_USE_EXTERNAL_PLUGINS``, default
``auto``); ``VERL_USE_EXTERNAL_MODULES=bestk.integrations.verl`` works too. Either way
``algorithm.adv_estimator=argmaxrl`` works in an unmodified verl. verl swallows a plugin's
import error (it logs it at DEBUG level): check a command line before launching with
``python -m bestk.integrations.verl algorithm.adv_estimator=argmaxrl ...`` (:func:`preflight`).

Options. Estimator options are read from ``config.bestk`` where ``config`` is the
``algorithm`` section verl passes to estimators. ``algorithm`` in verl's ``ppo_trainer.yaml``
is a struct config, so a new key needs Hydra's ``+``::

    algorithm.adv_estimator=softmax_grpo +algorithm.bestk.tau=0.1
    algorithm.adv_estimator=pkpo +algorithm.bestk.k=4
    algorithm.adv_estimator=kappo_grpo +algorithm.bestk.calibration=/path/cal.json

verl passes ``algorithm`` to estimators as the raw ``DictConfig``; nothing converts it into the
``AlgoConfig`` dataclass on that path. (If your own code does convert it with
``verl.utils.config.omega_conf_to_dataclass``, the unknown ``bestk`` key is rejected by
OmegaConf; pass the options in a plain mapping instead.) Unknown options, a missing required
option (``pkpo``'s ``k``) and invalid values raise ``ValueError`` naming them.

``kappo_grpo``: ``calibration`` is a path to a file written by ``bestk calibrate`` (loaded
once and cached per path, modification time and size) or a :class:`bestk.kappo.Calibration`; the
group labels (verl's ``uid``) must be the calibration's prompt ids. Stock verl sets ``uid`` to
a fresh ``uuid4`` per prompt, so with stock verl this estimator raises ``ValueError`` naming
the first uid that is not in the calibration. Use the reward side instead:

Validation metrics. verl's validation ``best@k`` / ``worst@k`` / ``maj@k`` come from a
with-replacement bootstrap that reads low (best) and high (worst);
:func:`unbiased_validation_metrics` (:mod:`bestk.integrations.verl_validation`) computes them
exactly and without bias under verl's names. :data:`VALIDATION_OVERRIDE`
(``+ray_kwargs.ray_init.runtime_env.env_vars.BESTK_VERL_VALIDATION=unbiased``) makes this
plugin call :func:`use_unbiased_validation` in verl's trainer process.

KAPPO through the reward (any verl estimator). :func:`kappo_compute_score` is a verl custom
reward function (``reward.custom_reward_function``) that wraps a base score function and
returns KAPPO's prompt-adaptive reward (:func:`bestk.kappo.transform_rewards`: a_k(x)·R for
binary rewards, Cor. 4.4; the win-rate transform T_j for graded ones, Cor. 4.6 / Prop. 4.7),
reading the prompt id from the row's ``extra_info`` (``extra_info.index``, which verl's data
preprocessing writes)::

    reward.custom_reward_function.path=pkg://bestk.integrations.verl
    reward.custom_reward_function.name=kappo_compute_score
    +reward.custom_reward_function.reward_kwargs.calibration=/path/cal.json
    algorithm.adv_estimator=rloo            # or grpo with algorithm.norm_adv_by_std_in_grpo=False

Then verl's own RLOO (or Dr.GRPO) trains @k-GRPO with a KL term: their expected update is
:math:`c\,\nabla E_\pi[\tilde R]` (c = 1 for RLOO, (n-1)/n for Dr.GRPO's centring), whose
KL-regularised optimum is KAPPO's @k optimum. verl's standardised ``grpo`` divides each group
by its std, which cancels the binary multiplier a_k(x) (KAPPO Eq. 139); :func:`preflight`
refuses that combination for a binary calibration.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from bestk._optional import require
from bestk.estimators import (
    ESTIMATORS,
    EstimatorInfo,
    Options,
    advantages,
    check_estimator_options,
    estimator_info,
    on_register,
    resolve_options,
)
from bestk.groups import GroupLabels
from bestk.integrations.verl_validation import (
    VALIDATION_ENV,
    maj_at_k,
    unbiased_validation_metrics,
    use_unbiased_validation,
    validation_from_env,
)
from bestk.kappo.calibration import Calibration, load_calibration
from bestk.kappo.transform import transform_rewards

_core_algos = require("verl.trainer.ppo.core_algos", extra="verl", who="bestk.integrations.verl")

__all__ = [
    "VERL_ESTIMATORS",
    "kappo_compute_score",
    "resolve_score_fn",
    "options_from_config",
    "outcome_advantages",
    "real_rows",
    "register",
    "compose_verl_config",
    "preflight",
    "VALIDATION_ENV",
    "VALIDATION_OVERRIDE",
    "maj_at_k",
    "unbiased_validation_metrics",
    "use_unbiased_validation",
    "validation_from_env",
]

#: The bestk estimators registered with verl: every estimator of bestk's registry whose name
#: verl does not already use for its own (verl keeps its grpo / rloo); filled by
#: :func:`register` and by later registrations.
VERL_ESTIMATORS: list[str] = []


def options_from_config(config: Any) -> dict[str, Any]:
    """Estimator options from verl's ``algorithm`` config: its ``bestk`` section as a dict.

    ``config`` may be ``None``, an OmegaConf ``DictConfig``, verl's ``AlgoConfig`` or any
    mapping. A missing ``bestk`` section means no options (the estimator's defaults).
    """
    if config is None:
        return {}
    if isinstance(config, Mapping) or hasattr(config, "get"):
        section = config.get("bestk", None)
    else:
        section = getattr(config, "bestk", None)
    if section is None:
        return {}
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(section, DictConfig):
            section = OmegaConf.to_container(section, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf ships with verl
        pass
    if not isinstance(section, Mapping):
        raise ValueError(
            "algorithm.bestk must be a mapping of estimator options "
            f"(e.g. +algorithm.bestk.tau=0.1), got {type(section).__name__}: {section!r}"
        )
    return dict(section)


def _select_labels(index: Sequence[Hashable] | np.ndarray | torch.Tensor, keep: torch.Tensor
                   ) -> np.ndarray | torch.Tensor:
    """``index[keep]`` for a numpy array, tensor or sequence of labels."""
    if isinstance(index, torch.Tensor):
        return index[keep.to(index.device)]
    arr = index if isinstance(index, np.ndarray) else np.asarray(index)
    if arr.ndim != 1:  # e.g. a list of tuples: keep each label whole
        arr = np.empty(len(index), dtype=object)
        arr[:] = list(index)
    return arr[keep.cpu().numpy()]


def real_rows(response_mask: torch.Tensor) -> torch.Tensor:
    """``(bs,)`` bool: rows with at least one response token (not verl padding).

    Exact, but cheap in the common case: responses are right-padded, so a real row almost
    always has its first mask entry set; only the other rows are scanned in full.
    """
    real = response_mask[:, 0] != 0
    rest = ~real
    if bool(rest.any()):
        real[rest] = (response_mask[rest] != 0).any(dim=-1)
    return real


def outcome_advantages(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupLabels,
    options: Options | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl-shaped ``(advantages, returns)`` of bestk estimator ``name``.

    Parameters
    ----------
    token_level_rewards, response_mask:
        ``(bs, response_length)`` tensors, as verl passes them.
    index:
        ``(bs,)`` group labels (verl's ``uid`` strings, or ints).
    options:
        Estimator options (see :func:`bestk.estimator_options`).

    Returns
    -------
    ``(advantages, returns)``, both ``(bs, response_length)`` in the rewards' dtype:
    ``A[:, None] * response_mask`` with ``A = bestk.advantages(name, scores, group=index)``
    over the non-padding rows, and 0 on padding rows (all-zero response mask).
    """
    if not isinstance(token_level_rewards, torch.Tensor) or token_level_rewards.ndim != 2:
        raise ValueError(
            "token_level_rewards must be a 2-D (bs, response_length) tensor, got "
            f"{getattr(token_level_rewards, 'shape', type(token_level_rewards).__name__)}"
        )
    if not isinstance(response_mask, torch.Tensor) or tuple(response_mask.shape) != tuple(
        token_level_rewards.shape
    ):
        raise ValueError(
            "response_mask must be a tensor with the shape of token_level_rewards "
            f"{tuple(token_level_rewards.shape)}, got "
            f"{getattr(response_mask, 'shape', type(response_mask).__name__)}"
        )
    if index is None:
        raise ValueError(
            f"bestk estimator {name!r} needs the group labels: verl passes them as `index` "
            "(non_tensor_batch['uid'])"
        )
    bs = token_level_rewards.shape[0]
    n_labels = len(index)
    if n_labels != bs:
        raise ValueError(f"index has {n_labels} labels but the batch has {bs} rows")
    opts = resolve_options(name, options or {})  # path-valued options loaded (cached)

    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        real = real_rows(response_mask)
        if bool(real.all()):
            adv = advantages(name, scores, group=index, **opts)
        else:
            adv = torch.zeros_like(scores)
            if bool(real.any()):
                adv[real] = advantages(
                    name, scores[real], group=_select_labels(index, real), **opts
                )
        # = adv[:, None] * response_mask; converting the mask first is ~1.7x faster on CPU
        # than letting the product promote an int64 mask (copy=True: never write into it).
        token_adv = response_mask.to(dtype=adv.dtype, copy=True).mul_(adv.unsqueeze(-1))
    return token_adv, token_adv


def _make_verl_estimator(name: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    def estimator(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Any = None,
        config: Any = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return outcome_advantages(
            name, token_level_rewards, response_mask, index, options_from_config(config)
        )

    estimator.__name__ = f"compute_bestk_{name}_outcome_advantage"
    estimator.__qualname__ = estimator.__name__
    estimator.__doc__ = (
        f"verl advantage estimator ``{name}`` from bestk: see "
        "``bestk.integrations.verl.outcome_advantages``; options from ``config.bestk``.\n\n"
        + (ESTIMATORS[name].__doc__ or "")
    )
    estimator.__bestk_estimator__ = name  # type: ignore[attr-defined]
    return estimator


def _register_one(info: EstimatorInfo) -> None:
    """Hand one bestk estimator to verl, unless verl has its own under that name."""
    current = _core_algos.ADV_ESTIMATOR_REGISTRY.get(info.name)
    if current is None:
        _core_algos.register_adv_est(info.name)(_make_verl_estimator(info.name))
    elif getattr(current, "__bestk_estimator__", None) != info.name:
        return  # verl's own estimator of that name stays
    if info.name not in VERL_ESTIMATORS:
        VERL_ESTIMATORS.append(info.name)


def register() -> list[str]:
    """Register every estimator of bestk's registry with verl (but the names verl has); also
    done for each estimator registered later. Idempotent (re-imports are fine). Returns
    :data:`VERL_ESTIMATORS`."""
    for name in sorted(ESTIMATORS):
        _register_one(estimator_info(name))
    return list(VERL_ESTIMATORS)


register()
on_register(_register_one)
if validation_from_env():  # BESTK_VERL_VALIDATION=unbiased: in every process that imports verl
    use_unbiased_validation()


# ---------------------------------------------------------------------------------------------
# KAPPO through the reward: a verl custom reward function

_SCORE_FNS: dict[str, Callable[..., Any]] = {}


def resolve_score_fn(spec: Any) -> Callable[..., Any]:
    """The base score function named by ``spec`` (resolved once, then cached).

    ``spec`` is a callable, ``"default"`` (verl's ``default_compute_score``, which dispatches on
    ``data_source``: GSM8K, MATH, ...), ``"package.module:function"``, ``"pkg://package.module:
    function"`` or ``"/path/to/file.py:function"``. The function is called as verl calls a
    custom reward function: ``fn(data_source=..., solution_str=..., ground_truth=...,
    extra_info=..., **kwargs)``, returning a number or a dict with a ``"score"``.
    """
    if callable(spec):
        fn = spec
    elif not isinstance(spec, str) or not spec:
        raise ValueError(
            "base must be 'default', 'module:function', '/path/file.py:function' or a callable, "
            f"got {spec!r}"
        )
    elif spec in _SCORE_FNS:
        return _SCORE_FNS[spec]
    elif spec == "default":
        from verl.utils.reward_score import default_compute_score

        fn = _SCORE_FNS[spec] = default_compute_score
    else:
        module, sep, name = spec.rpartition(":")
        if not sep or not module or not name:
            raise ValueError(
                f"base {spec!r} must look like 'package.module:function' or "
                "'/path/to/file.py:function'"
            )
        from verl.utils.import_utils import load_extern_object

        path = module
        if not (path.startswith(("pkg://", "file://")) or path.endswith(".py")):
            path = "pkg://" + module
        try:
            loaded = load_extern_object(module_path=path, object_name=name)
        except (ImportError, AttributeError, FileNotFoundError, RuntimeError) as e:
            raise ValueError(f"base score function {spec!r} cannot be loaded: {e}") from None
        if not callable(loaded):  # checked before caching: a second call must refuse it too
            raise ValueError(f"base {spec!r} is not callable")
        fn = _SCORE_FNS[spec] = loaded
    if not callable(fn):
        raise ValueError(f"base {spec!r} is not callable")
    if inspect.iscoroutinefunction(fn):
        raise ValueError(
            f"base {spec!r} is an async function; kappo_compute_score wraps synchronous score "
            "functions"
        )
    return fn


def kappo_compute_score(
    data_source: Any,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    *,
    calibration: Calibration | str | os.PathLike[str] | None = None,
    base: Any = "default",
    prompt_id_key: str = "index",
    train_split: str | None = "train",
    **kwargs: Any,
) -> dict[str, object]:
    r"""verl custom reward function: KAPPO's prompt-adaptive reward of a base score.

    Set it with ``reward.custom_reward_function.path=pkg://bestk.integrations.verl``,
    ``reward.custom_reward_function.name=kappo_compute_score`` and the options below as
    ``+reward.custom_reward_function.reward_kwargs.<option>=...`` (verl merges them into every
    call). verl's reward managers call it once per response.

    Parameters
    ----------
    data_source, solution_str, ground_truth, extra_info:
        What verl passes (``extra_info`` is the dataset row's ``extra_info`` dict).
    calibration:
        Path to a ``bestk calibrate`` file (loaded once per path, modification time and size) or a
        :class:`bestk.kappo.Calibration`. Required.
    base:
        The score function to wrap (see :func:`resolve_score_fn`); default ``"default"``, verl's
        ``default_compute_score``.
    prompt_id_key:
        The ``extra_info`` key holding the calibration's prompt id (default ``"index"``, which
        verl's data preprocessing scripts write).
    train_split:
        Rows whose ``extra_info["split"]`` exists and differs from it (verl's validation data,
        ``split="test"``) get the base score unchanged, so validation metrics stay the true
        reward; ``None`` transforms every row.
    **kwargs:
        Forwarded to the base function.

    Returns
    -------
    A dict (verl stores every key but ``score`` as reward extra info): ``score`` -- the
    transformed reward :math:`\hat a_k(x)R` (binary calibration, Cor. 4.4) or :math:`T_j`
    (win-rate, Algorithm 2), or the raw score on a non-training row; ``raw_score`` -- the base
    score; ``acc`` -- the base score when the base returns a number (as verl logs it); the
    base's own keys when it returns a dict.
    """
    if calibration is None:
        raise ValueError(
            "kappo_compute_score needs the calibration: "
            "+reward.custom_reward_function.reward_kwargs.calibration=/path/cal.json"
        )
    cal = load_calibration(calibration)
    fn = resolve_score_fn(base)
    result = fn(
        data_source=data_source,
        solution_str=solution_str,
        ground_truth=ground_truth,
        extra_info=extra_info,
        **kwargs,
    )
    if isinstance(result, Mapping):
        if "score" not in result:
            raise ValueError(f"base score function {base!r} returned a dict without 'score'")
        info = dict(result)
        raw = info["score"]
    else:
        info = {"acc": result}
        raw = result
    try:
        raw = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"base score function {base!r} returned a non-number {raw!r}") from None
    info["raw_score"] = raw
    extra = extra_info if isinstance(extra_info, Mapping) else {}
    split = extra.get("split")
    if train_split is not None and split is not None and split != train_split:
        info["score"] = raw
        return info
    if prompt_id_key not in extra:
        raise ValueError(
            f"extra_info has no {prompt_id_key!r} (the prompt id the calibration is keyed by); "
            "verl's data preprocessing writes extra_info.index, or set "
            "+reward.custom_reward_function.reward_kwargs.prompt_id_key=<key>"
        )
    pid = extra[prompt_id_key]
    info["score"] = float(transform_rewards(cal, [pid], np.array([raw]))[0])
    return info


#: verl's own estimators that divide each group by its reward std (cancelling a per-prompt
#: reward multiplier), each with the ``algorithm`` option that turns the division off.
VERL_STD_NORMALISED: dict[str, str] = {"grpo": "norm_adv_by_std_in_grpo"}

_KAPPO_REWARD_PATHS = ("pkg://bestk.integrations.verl", "pkg://bestk/integrations/verl")


def _check_kappo_reward(cfg: Any, lines: list[str]) -> None:
    """Preflight of :func:`kappo_compute_score` when the config selects it."""
    legacy = cfg.get("custom_reward_function") or {}
    if str(legacy.get("name")) == "kappo_compute_score":
        raise ValueError(
            "set reward.custom_reward_function.path/name (verl 0.9.1's main_ppo ignores the "
            "legacy top-level custom_reward_function)"
        )
    reward = cfg.get("reward") or {}
    crf = reward.get("custom_reward_function") or {}
    path, name = crf.get("path"), crf.get("name")
    if str(name) != "kappo_compute_score":
        return
    if str(path) not in _KAPPO_REWARD_PATHS:
        raise ValueError(
            f"reward.custom_reward_function.name=kappo_compute_score needs "
            f"reward.custom_reward_function.path=pkg://bestk.integrations.verl, got {path!r}"
        )
    kwargs = options_from_config({"bestk": crf.get("reward_kwargs") or {}})
    unknown = set(kwargs) - {"calibration", "base", "prompt_id_key", "train_split"}
    if "calibration" not in kwargs:
        raise ValueError(
            "kappo_compute_score needs "
            "+reward.custom_reward_function.reward_kwargs.calibration=/path/cal.json"
        )
    cal = load_calibration(kwargs["calibration"])
    fn = resolve_score_fn(kwargs.get("base", "default"))
    lines.append(f"reward: kappo_compute_score over {getattr(fn, '__name__', fn)}: {cal!r}")
    if unknown:
        lines.append(f"reward_kwargs forwarded to the base score function: {sorted(unknown)}")
    algo = cfg.algorithm
    name = str(algo.adv_estimator)
    switch = VERL_STD_NORMALISED.get(name)
    if cal.kind_spec.std_cancels and switch is not None and bool(algo.get(switch, True)):
        raise ValueError(
            f"algorithm.adv_estimator={name} divides each group by its reward std, which cancels "
            "the binary KAPPO multiplier a_k(x) (KAPPO Eq. 139): use algorithm.adv_estimator=rloo "
            f"or algorithm.{switch}=False"
        )


#: The override that sets :data:`VALIDATION_ENV` in every Ray worker of a verl run.
VALIDATION_OVERRIDE = f"+ray_kwargs.ray_init.runtime_env.env_vars.{VALIDATION_ENV}=unbiased"


def _validation_line(cfg: Any) -> str:
    """Which validation metrics the run logs: :data:`VALIDATION_ENV` as verl's workers see it
    (the shell's environment, overridden by ``ray_kwargs.ray_init.runtime_env.env_vars``)."""
    from omegaconf import OmegaConf

    ray_env = OmegaConf.select(cfg, "ray_kwargs.ray_init.runtime_env.env_vars") or {}
    env = {**os.environ, **{str(k): str(v) for k, v in ray_env.items()}}
    if validation_from_env(env):
        return f"validation metrics: unbiased, bestk ({VALIDATION_ENV}=unbiased)"
    return f"validation metrics: verl's bootstrap ({VALIDATION_OVERRIDE} for bestk's unbiased ones)"


def compose_verl_config(overrides: list[str] | tuple[str, ...] = ()) -> Any:
    """verl's own ``ppo_trainer`` config composed with Hydra ``overrides`` (no GPU needed)."""
    import verl
    from hydra import compose, initialize_config_dir

    cfg_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=cfg_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def preflight(overrides: list[str] | tuple[str, ...] = ()) -> str:
    """Check a ``verl.trainer.main_ppo`` command line before launching it on GPUs.

    Composes verl's config with ``overrides`` (so misspelt keys and a missing ``+`` fail
    here), looks ``algorithm.adv_estimator`` up in verl's registry (so the plugin must have
    loaded), and for a bestk estimator validates its ``algorithm.bestk`` options by running it
    on a small batch of ``actor_rollout_ref.rollout.n``-sample groups (``kappo_grpo``: loads the
    calibration instead). With :func:`kappo_compute_score` as the custom reward function it
    loads the calibration and the base score function, and refuses a binary calibration with
    verl's std-normalised ``grpo`` (Eq. 139). An estimator that ``needs_prompt_ids`` cannot run
    on made-up uids: its options are checked and its path-valued options loaded instead.
    Returns a one-paragraph summary; raises on any problem.
    """
    cfg = compose_verl_config(overrides)
    name = str(cfg.algorithm.adv_estimator)
    fn = _core_algos.get_adv_estimator_fn(name)
    n = int(cfg.actor_rollout_ref.rollout.n)
    lines = [
        f"algorithm.adv_estimator={name} -> {fn.__module__}.{fn.__name__}",
        f"actor_rollout_ref.rollout.n={n}",
    ]
    _check_kappo_reward(cfg, lines)
    lines.append(_validation_line(cfg))
    if getattr(fn, "__bestk_estimator__", None) is None:
        lines.append("not a bestk estimator: verl's own implementation")
        return "\n".join(lines)
    options = options_from_config(cfg.algorithm)
    lines.append(f"algorithm.bestk={options}")
    info = estimator_info(name)
    if info.needs_prompt_ids:
        missing = [o for o, d in info.options.items()
                   if d is inspect.Parameter.empty and o not in options]
        if missing:
            raise ValueError(f"{name} needs " + " ".join(
                f"+algorithm.bestk.{o}={'PATH' if o in info.path_options else 'VALUE'}"
                for o in missing))
        check_estimator_options(name, options)
        loaded = resolve_options(name, options)
        lines += [f"{o}: {loaded[o]!r}" for o in info.path_options if o in loaded]
        lines.append("its groups must be prompt ids (uid): not run on made-up uids")
        return "\n".join(lines)
    groups = 4
    gen = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 2, (groups * n,), generator=gen).to(torch.float32)
    rewards = torch.zeros(groups * n, 3)
    rewards[:, -1] = scores
    mask = torch.ones(groups * n, 3, dtype=torch.int64)
    uid = np.repeat(np.array([f"uid-{g}" for g in range(groups)], dtype=object), n)
    adv, _ = fn(token_level_rewards=rewards, response_mask=mask, index=uid, config=cfg.algorithm)
    if not bool(torch.isfinite(adv).all()):  # pragma: no cover - bestk.advantages guards this
        raise ValueError(f"{name} produced non-finite advantages")
    lines.append(f"ran on {groups} groups of {n}: advantages finite, shape {tuple(adv.shape)}")
    return "\n".join(lines)


def _main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(
            "usage: python -m bestk.integrations.verl [HYDRA_OVERRIDE ...]\n\n"
            + (preflight.__doc__ or "")
        )
        return 0
    try:
        print(preflight(argv))
    except Exception as e:  # report any problem on one line, exit non-zero
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":  # `python -m bestk.integrations.verl OVERRIDES...`
    raise SystemExit(_main(sys.argv[1:]))
