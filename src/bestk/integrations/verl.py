r"""verl plugin: bestk's @k-aware advantage estimators as verl advantage estimators.

Importing this module registers every estimator of bestk's registry (:data:`bestk.ESTIMATORS`)
with ``verl.trainer.ppo.core_algos.register_adv_est`` under its bestk name -- ``argmaxrl``,
``maxrl``, ``softmax_grpo``, ``pkpo``, ``passk_training``, ``loo_max``, ``reinforce``,
``kappo_grpo``, and any estimator registered later (:func:`bestk.estimators.on_register`),
yours included -- except the names verl already has: verl's own ``grpo`` / ``rloo`` / ... keep
their verl implementations (:data:`VERL_ESTIMATORS` lists what was registered). What each needs
is read from its registry properties: path-valued options (``kappo_grpo``'s ``calibration``
file) are loaded once and cached (by path, modification time and size:
:func:`bestk.estimators.resolve_options`), and an estimator that ``needs_prompt_ids`` gets
verl's ``uid`` as its prompt ids. Each function computes exactly ``bestk.advantages(name,
scores, group=uid, **options)`` (the formulas, their objectives and paper equations are in the
estimators' docstrings, e.g. :func:`bestk.estimators.argmaxrl.argmaxrl`), with verl's
conventions around it:

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
    algorithm.adv_estimator=loo_max +algorithm.bestk.scale=std   # = verl's grpo_passk
    algorithm.adv_estimator=kappo_grpo +algorithm.bestk.calibration=/path/cal.json

verl passes ``algorithm`` to estimators as the raw ``DictConfig``; nothing converts it into the
``AlgoConfig`` dataclass on that path. (If your own code does convert it with
``verl.utils.config.omega_conf_to_dataclass``, the unknown ``bestk`` key is rejected by
OmegaConf; pass the options in a plain mapping instead.) Unknown options, a missing required
option (``pkpo``'s ``k``) and invalid values raise ``ValueError`` naming them. verl's own
``algorithm`` keys do not reach bestk's estimators: ``norm_adv_by_std_in_grpo`` switches verl's
``grpo_passk`` between std-scaled and plain leave-one-out max; with ``loo_max`` the same switch
is ``+algorithm.bestk.scale=std`` / ``none`` (the default), which then gives verl's numbers
(``tests/integrations/test_verl.py``).

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
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from bestk._optional import require
from bestk.estimators import ESTIMATORS, EstimatorInfo, estimator_info, on_register
from bestk.integrations._outcome import (
    check_estimator,
    options_from_config,
    outcome_advantages,
    preflight_cli,
    real_rows,
)
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


def _base_score(result: object, base: Any) -> tuple[dict[str, object], float]:
    """``(info, raw)`` of what the base score function returned: a dict with a ``score``
    (its keys kept) or a number (kept as ``acc``, as verl logs it); ``raw`` the score as a
    float. Anything else is a one-line ``ValueError`` naming ``base``."""
    if isinstance(result, Mapping):
        if "score" not in result:
            raise ValueError(f"base score function {base!r} returned a dict without 'score'")
        info = dict(result)
        raw = info["score"]
    else:
        info = {"acc": result}
        raw = result
    try:
        return info, float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"base score function {base!r} returned a non-number {raw!r}") from None


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
    info, raw = _base_score(result, base)
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
    lines += check_estimator(fn, name, options, n, cfg.algorithm, key="+algorithm.bestk")
    return "\n".join(lines)


def _main(argv: list[str]) -> int:
    return preflight_cli(argv, "usage: python -m bestk.integrations.verl [HYDRA_OVERRIDE ...]",
                         preflight)


if __name__ == "__main__":  # `python -m bestk.integrations.verl OVERRIDES...`
    raise SystemExit(_main(sys.argv[1:]))
