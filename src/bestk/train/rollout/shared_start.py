"""Share the step-0 evaluation between runs that start alike (``eval.shared_start``).

Every run of a grid evaluates its policy before RL. Runs of one seed that differ only in how
they learn (estimator, learning rate, loss, algorithm) start from the same weights and sample
the same held-out prompts with the same noise, so their step-0 evaluations are equal; on a
pretrained model with vLLM on a CPU one costs minutes. With ``eval.shared_start: DIR`` the
first such run stores its evaluation in ``DIR`` and the others read it.

What identifies a start (:func:`start_key`): the digest of the policy's weights as they are
when RL starts (after any SFT or warm start; :func:`start_digest`: a LoRA adapter whose
``B`` is all zeros adds exactly nothing, so it is left out, and fresh adapters drawn with
different seeds on one base model digest alike), the held-out prompts evaluated (their ids,
prompts and answers), the evaluation noise (``eval.seed``, else the run's
``sampling_seed``) and every config section that shapes the evaluation: ``model``, ``task``,
``sft``, ``threads`` (the reduction order of float sums), ``device``, ``rollout`` (prompt
length limit, new-token cap), ``eval`` (but ``every``) and ``vllm``. The run's ``seed`` is
not a section of the key: what it shapes in an evaluation -- the weights, the held-out split,
the noise -- is in the key itself, so seeds that start from the same weights on the same
prompts with a fixed ``eval.seed`` share one evaluation. Something left out can only make
two starts that would agree miss each other, never make two that differ share. A stored
evaluation is written atomically, with its key inside; a file whose key differs is not
read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bestk._atomic import write_text_atomic
from bestk.train.config import ResolvedTrainConfig
from bestk.train.config.io import config_to_dict
from bestk.train.rollout.evaluate import EvalResult

__all__ = ["START_SECTIONS", "shared_start_evaluation", "start_digest", "start_key",
           "state_digest"]

#: The config sections that shape a step-0 evaluation (``eval.every`` aside).
START_SECTIONS: tuple[str, ...] = ("model", "task", "sft", "threads", "device", "rollout",
                                   "eval", "vllm")


def state_digest(state: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 (16 hex digits) of a state dict's tensors: names, dtypes, shapes and bytes in
    name order, so equal weights give equal digests whatever holds them."""
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().contiguous().cpu()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())  # 0-dim and empty too
    return h.hexdigest()[:16]


def start_digest(model: torch.nn.Module) -> str:
    """:func:`state_digest` of the policy's weights without the LoRA adapters that add nothing:
    each ``lora_B`` (``lora_embedding_B``) tensor that is all zeros is dropped with its ``A``
    partner, since ``W + (alpha / r) B A`` is then ``W`` exactly whatever ``A`` holds."""
    state = model.state_dict()
    drop: set[str] = set()
    for name, t in state.items():
        for b_part, a_part in ((".lora_B.", ".lora_A."),
                               (".lora_embedding_B", ".lora_embedding_A")):
            if b_part in name and not bool(t.detach().ne(0).any()):
                drop.update((name, name.replace(b_part, a_part)))
    return state_digest({k: v for k, v in state.items() if k not in drop})


def start_key(cfg: ResolvedTrainConfig, model: torch.nn.Module, eval_seed: int,
              examples: Sequence[Mapping[str, Any]]) -> str:
    """The key of a run's step-0 evaluation of the held-out ``examples`` with the noise of
    ``eval_seed`` (module docstring)."""
    d = config_to_dict(cfg)
    sections: dict[str, Any] = {k: d[k] for k in START_SECTIONS}
    sections["eval"] = {k: v for k, v in sections["eval"].items()
                        if k not in ("every", "shared_start")}
    prompts = hashlib.sha256(json.dumps(
        [[e.get("id"), e.get("prompt"), e.get("answer")] for e in examples],
        default=str).encode()).hexdigest()[:16]
    blob = json.dumps({"config": sections, "eval_seed": int(eval_seed), "prompts": prompts,
                       "weights": start_digest(model)}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _to_json(key: str, res: EvalResult) -> str:
    return json.dumps({
        "key": key, "metrics": res.metrics, "rewards": res.rewards.tolist(), "texts": res.texts,
        "examples": res.examples, "lengths": res.lengths.tolist(),
        "columns": {k: v.tolist() for k, v in res.columns.items()}})


def _from_json(doc: dict[str, Any]) -> EvalResult:
    return EvalResult(dict(doc["metrics"]), np.asarray(doc["rewards"], dtype=np.float64),
                      list(doc["texts"]), list(doc["examples"]),
                      {k: np.asarray(v, dtype=np.float64) for k, v in doc["columns"].items()},
                      np.asarray(doc["lengths"], dtype=np.float64))


def shared_start_evaluation(cfg: ResolvedTrainConfig, model: torch.nn.Module,
                            eval_seed: int, step: int, sample: Callable[[], EvalResult],
                            examples: Sequence[Mapping[str, Any]]) -> EvalResult:
    """``sample()`` (the evaluation of ``examples`` with the noise of ``eval_seed``), except
    at step 0 with ``eval.shared_start`` set: then the evaluation stored there under
    :func:`start_key` when there is one, else ``sample()`` stored there (atomically) for the
    next run that starts alike."""
    where = cfg.eval.shared_start
    if step != 0 or where is None:
        return sample()
    key = start_key(cfg, model, eval_seed, examples)
    path = Path(where) / f"start-{key}.json"
    if path.is_file():
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            doc = None
        if isinstance(doc, dict) and doc.get("key") == key:
            return _from_json(doc)
    res = sample()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, _to_json(key, res))
    return res
