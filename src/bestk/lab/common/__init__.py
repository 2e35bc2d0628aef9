"""What the lab's testbeds share, below all of them (the bandits, the digits engine, the claims):

* :mod:`~bestk.lab.common.exact` -- closed-form best@k / pass@k / J_N of a categorical policy;
* :mod:`~bestk.lab.common.io` -- atomic outputs, markdown tables, per-seed metric keys;
* :mod:`~bestk.lab.common.optim` -- the lab's optimizer steps.
"""
