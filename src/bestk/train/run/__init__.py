"""The run directory and what a run shows.

* :mod:`~bestk.train.run.directory` -- ``config.yaml``, ``metrics.jsonl``, the resume policy
  (new, resume or complete), start-over, the ``.finished`` marker, checkpoint identity;
* :mod:`~bestk.train.run.lock` -- one writer per run directory (``DIR/.lock``);
* :mod:`~bestk.train.run.log` -- the run's log: ``metrics.jsonl`` lines, ``samples.jsonl``
  and the live reporters, in one place;
* :mod:`~bestk.train.run.reporters` -- live logging to TensorBoard / W&B (``report_to``);
* :mod:`~bestk.train.run.report` -- ``report.md`` and its plots, rebuilt from the log;
* :mod:`~bestk.train.run.console` -- the progress bar, the start, step and stop lines;
* :mod:`~bestk.train.run.data` -- a dataset file's digest (no resume on other data);
* :mod:`~bestk.train.run.nesting` -- no run inside a comparison's grid.

Checkpoint files and the stop signal are the runtime's (:mod:`bestk.train.runtime`).
"""
