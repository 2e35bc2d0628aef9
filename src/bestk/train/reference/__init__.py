"""A run's KAPPO reference calibration (``algorithm: apo`` / ``dpo``, or ``pg`` with
``kappo_grpo``).

* :mod:`~bestk.train.reference.plan` -- what the calibration will be, decided before any work
  (:class:`~bestk.train.reference.plan.ReferencePlan`);
* :mod:`~bestk.train.reference.bank` -- the bank of reference samples, its calibration and
  their files in the run directory.
"""
