"""The trainer's runtime, below every other room of :mod:`bestk.train`.

* :mod:`~bestk.train.runtime.files` -- atomic safetensors checkpoints, their checksums and
  weight files;
* :mod:`~bestk.train.runtime.errors` -- the wording of a failed file operation;
* :mod:`~bestk.train.runtime.stop` -- Ctrl-C / SIGTERM (:class:`StopRequest`) and
  :class:`Stopped`.
"""
