"""Share the step-0 evaluation between runs that start alike (``eval.shared_start``).

Every run of a grid evaluates its policy before RL. Runs of one seed that differ only in how
they learn (estimator, learning rate, loss, algorithm) start from the same weights and sample
the same held-out prompts with the same noise, so their step-0 evaluations are equal; on a
pretrained model with vLLM on a CPU one costs minutes. With ``eval.shared_start: DIR`` the
first such run stores its evaluation in ``DIR`` and the others read it.

What identifies a start (:func:`start_key`): the digest of the policy's weights as they are
when RL starts (after any SFT or warm start; LoRA adapters included), the evaluation noise
(``sampling_seed``) and every config section that shapes the evaluation: ``model``, ``task``,
``sft``, ``seed``, ``threads`` (the reduction order of float sums), ``device``, ``rollout``
(prompt length limit, new-token cap), ``eval`` (but ``every``) and ``vllm``. Something left
out can only make two starts that would agree miss each other, never make two that differ
share. A stored evaluation is written atomically, with its key inside; a file whose key
differs is not read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bestk._atomic import write_text_atomic
from bestk.train.config import ResolvedTrainConfig
from bestk.train.config_io import config_to_dict
from bestk.train.rollout.evaluate import EvalResult

__all__ = ["START_SECTIONS", "shared_start_evaluation", "start_key", "state_digest"]

#: The config sections that shape a step-0 evaluation (``eval.every`` aside).
START_SECTIONS: tuple[str, ...] = ("model", "task", "sft", "seed", "threads", "device",
                                   "rollout", "eval", "vllm")


def state_digest(state: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 (16 hex digits) of a state dict's tensors: names, dtypes, shapes and bytes in
    name order, so equal weights give equal digests whatever holds them."""
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().contiguous().cpu()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())  # 0-dim and empty too
    return h.hexdigest()[:16]


def start_key(cfg: ResolvedTrainConfig, model: torch.nn.Module, sampling_seed: int) -> str:
    """The key of a run's step-0 evaluation (module docstring)."""
    d = config_to_dict(cfg)
    sections: dict[str, Any] = {k: d[k] for k in START_SECTIONS}
    sections["eval"] = {k: v for k, v in sections["eval"].items()
                        if k not in ("every", "shared_start")}
    blob = json.dumps({"config": sections, "sampling_seed": int(sampling_seed),
                       "weights": state_digest(model.state_dict())}, sort_keys=True, default=str)
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
                            sampling_seed: int, step: int,
                            sample: Callable[[], EvalResult]) -> EvalResult:
    """``sample()``, except at step 0 with ``eval.shared_start`` set: then the evaluation
    stored there under :func:`start_key` when there is one, else ``sample()`` stored there
    (atomically) for the next run that starts alike."""
    where = cfg.eval.shared_start
    if step != 0 or where is None:
        return sample()
    key = start_key(cfg, model, sampling_seed)
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
