"""The policy network.

* :mod:`~bestk.train.model.source` -- what ``model.path`` names (a Hugging Face directory or
  a GGUF file), checked without loading anything;
* :mod:`~bestk.train.model.policy` -- building or loading the policy and its tokenizer (the
  tiny default with a character tokenizer, a local model, a GGUF file);
* :mod:`~bestk.train.model.lora` -- LoRA adapters through PEFT, the frozen reference policy,
  the merged weights;
* :mod:`~bestk.train.model.chat` -- chat templates: how a task's prompts are rendered;
* :mod:`~bestk.train.model.logprobs` -- the training forward: log-probabilities and
  entropies of sampled completions;
* :mod:`~bestk.train.model.hf` -- mixed precision, stop tokens, gradient checkpointing, the
  KV-cache arguments, saving ``final/``.
"""
