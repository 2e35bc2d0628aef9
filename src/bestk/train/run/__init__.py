"""The run directory and what a run shows.

* :mod:`~bestk.train.run.directory` -- ``config.yaml``, ``metrics.jsonl``, the resume policy
  (new, resume or complete), start-over, the ``.finished`` marker, checkpoint identity;
* :mod:`~bestk.train.run.lock` -- one writer per run directory (``DIR/.lock``);
* :mod:`~bestk.train.run.checkpoint` -- atomic safetensors checkpoints and their checksums;
* :mod:`~bestk.train.run.log` -- the run's log: ``metrics.jsonl`` lines, ``samples.jsonl``
  and the live reporters, in one place;
* :mod:`~bestk.train.run.reporters` -- live logging to TensorBoard / W&B (``report_to``);
* :mod:`~bestk.train.run.report` -- ``report.md`` and its plots, rebuilt from the log;
* :mod:`~bestk.train.run.console` -- the progress bar and Ctrl-C / SIGTERM;
* :mod:`~bestk.train.run.guards` -- the checks that stop a run before a non-finite update.
"""
