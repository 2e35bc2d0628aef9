"""Adapters that run bestk's estimators inside the distributed RL frameworks people already use.

* :mod:`bestk.integrations.verl` — a verl plugin: importing it registers ``argmaxrl``,
  ``maxrl``, ``softmax_grpo``, ``pkpo`` and ``kappo_grpo`` with
  ``verl.trainer.ppo.core_algos.register_adv_est``. verl loads it by itself through the
  ``verl.plugins`` entry point that bestk's package metadata declares (or through
  ``VERL_USE_EXTERNAL_MODULES=bestk.integrations.verl``), so
  ``algorithm.adv_estimator=argmaxrl`` works in an unmodified verl. Its validation metrics can
  be made unbiased (:mod:`bestk.integrations.verl_validation`: exact best@k, worst@k, maj@k).
* :mod:`bestk.integrations.skyrl` — a SkyRL plug-in: importing it registers every bestk
  estimator with SkyRL's ``AdvantageEstimatorRegistry`` (as ``bestk_<name>`` where SkyRL has
  its own ``grpo`` / ``rloo`` / ``maxrl``); its ``main`` is SkyRL's entry point with bestk's
  config fields, reached with ``trainer.override_entrypoint=bestk.integrations.skyrl``.
* :mod:`bestk.integrations.trl` — ``BestkGRPOTrainer``, a TRL ``GRPOTrainer`` subclass whose
  advantages come from ``bestk.advantages``.

The verl and SkyRL plug-ins share their plumbing (:mod:`bestk.integrations._outcome`). Each
needs its framework installed (``pip install "bestk[verl]"`` / ``"bestk[skyrl]"`` /
``"bestk[trl]"``); this package itself imports none, so ``import bestk.integrations`` is
always cheap.
"""

__all__: list[str] = []
