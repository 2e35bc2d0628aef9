"""The lab: fast testbeds with exact answers where the papers' claims are measured small.

* :mod:`bestk.lab.exact` — closed-form best@k / pass@k / J_N of a categorical policy over
  arms with fixed rewards (differentiable; the reference every lab number is checked against).
* :mod:`bestk.lab.bandit` — exact-enumeration softmax bandits: the exact bias and variance of
  every estimator against the gradient of the objective it claims, plus sampled learning curves.
* :mod:`bestk.lab.digits` — SoftmaxGRPO section 6.1 (ImageNet) on scikit-learn's digits: an MLP
  policy trained by exact maximum likelihood and by each estimator at equal rollouts.
* :mod:`bestk.lab.commands` — ``bestk lab bandit`` / ``bestk lab digits``.

Heavy imports (scikit-learn, matplotlib) happen inside the functions that need them.
"""
