"""The lab: fast testbeds with exact answers where the papers' claims are measured small.

* :mod:`bestk.lab.common.exact` — closed-form best@k / pass@k / J_N of a categorical policy over
  arms with fixed rewards (differentiable; the reference every lab number is checked against).
* :mod:`bestk.lab.bandit` — exact-enumeration softmax bandits: the exact bias and variance of
  every estimator against the gradient of the objective it claims, plus sampled learning curves.
* :mod:`bestk.lab.digits` — an MLP classifier of scikit-learn's digits trained by exact maximum
  likelihood and by each estimator at equal rollouts (the classification engine: slots of
  learner x learning rate x seed trained as one batch, validation sweep, A/A control).
* :mod:`bestk.lab.sparse` — SoftmaxGRPO section 6.1 (ImageNet) small: 1000-class composites.
* :mod:`bestk.lab.common.io` — atomic outputs, markdown tables, per-seed metric keys (statistics:
  :mod:`bestk.stats`; figures: :mod:`bestk.figures`, shared with ``bestk compare``).
* :mod:`bestk.lab.claims` — the claims declared as data and the verdict rule.
* :mod:`bestk.lab.commands` — ``bestk lab bandit`` / ``digits`` / ``sparse`` / ``kappo``.

Heavy imports (scikit-learn, matplotlib) happen inside the functions that need them.
"""
