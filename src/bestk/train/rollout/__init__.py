"""Sampling completions from the policy, scoring them, and evaluating on held-out prompts.

* :mod:`~bestk.train.rollout.batch` -- :class:`~bestk.train.rollout.batch.Rollout`, the batch
  of completions every sampler returns;
* :mod:`~bestk.train.rollout.engine` -- the rollout engines (:class:`~bestk.train.rollout.
  engine.RolloutEngine`: ``sample``, ``sync``, ``close``) and their registry;
* :mod:`~bestk.train.rollout.sampler` -- the KV-cache sampling loop over a Hugging Face model
  (temperature, top-k, top-p, stop tokens, seeded generators);
* :mod:`~bestk.train.rollout.settings` -- the sampling settings of a run (config, else the
  model's ``generation_config``);
* :mod:`~bestk.train.rollout.prompts` -- prompt encoding and ``rollout.max_prompt_length``;
* :mod:`~bestk.train.rollout.scoring` -- the task's reward(s) of a batch;
* :mod:`~bestk.train.rollout.evaluate` -- held-out pass@k / best@k curves;
* :mod:`~bestk.train.rollout.sample_log` -- ``samples.jsonl``: what the model saw and said.
"""
