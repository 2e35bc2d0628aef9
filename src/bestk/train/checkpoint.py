"""Atomic safetensors checkpoints of a training run (model, optimizer, RNG, step state).

One checkpoint is one file ``DIR/checkpoints/step_XXXXXXX.safetensors`` holding

* ``model.<name>``: the policy's parameters and buffers,
* ``ref.<name>``: the frozen reference policy (only when a KL penalty is used),
* ``optim.<param index>.<state name>``: AdamW moments and step counts,
* ``rng.torch``: the global torch CPU RNG state,

and, in the safetensors metadata, a JSON ``state`` (step, optimizer param groups, numpy /
python RNG states, anything the trainer adds). It is written to a temporary file in the same
directory, flushed and fsync'ed, then moved into place with ``os.replace`` — so a crash leaves
either the previous checkpoint or the new one, never a torn file. :func:`latest_checkpoint`
ignores temporaries.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bestk._atomic import atomic_path

__all__ = ["save_checkpoint", "load_checkpoint", "latest_checkpoint", "list_checkpoints"]

_NAME = re.compile(r"^step_(\d{7})\.safetensors$")


def _tensors_of(module: torch.nn.Module, prefix: str) -> dict[str, torch.Tensor]:
    # clone(): tied weights share storage, which safetensors refuses to save twice.
    return {
        f"{prefix}{k}": v.detach().to("cpu").clone().contiguous()
        for k, v in module.state_dict().items()
    }


def save_checkpoint(
    directory: str | Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    *,
    ref_model: torch.nn.Module | None = None,
    keep: int = 2,
) -> Path:
    """Write checkpoint ``step`` atomically into ``directory``; keep the newest ``keep``.

    ``state`` must be JSON-serialisable; the python / numpy RNG states are added to it.
    Returns the checkpoint's path.
    """
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = _tensors_of(model, "model.")
    if ref_model is not None:
        tensors.update(_tensors_of(ref_model, "ref."))
    opt = optimizer.state_dict()
    for idx, st in opt["state"].items():
        for name, value in st.items():
            t = value if isinstance(value, torch.Tensor) else torch.tensor(value)
            tensors[f"optim.{idx}.{name}"] = t.detach().to("cpu").clone().contiguous()
    tensors["rng.torch"] = torch.get_rng_state().clone()
    np_state = np.random.get_state()  # noqa: NPY002  (global state used by user rewards)
    meta_state = dict(state)
    meta_state.update(
        step=int(step),
        optimizer_param_groups=opt["param_groups"],
        rng_numpy=[np_state[0], np_state[1].tolist(), *np_state[2:]],
        rng_python=_py_state_to_json(random.getstate()),
    )
    final = directory / f"step_{int(step):07d}.safetensors"
    with atomic_path(final, suffix=".safetensors") as tmp:
        save_file(tensors, str(tmp), metadata={"state": json.dumps(meta_state)})
    for old in list_checkpoints(directory)[:-keep]:
        old.unlink(missing_ok=True)
    return final


def _py_state_to_json(st: tuple) -> list:
    version, internal, gauss = st
    return [version, list(internal), gauss]


def list_checkpoints(directory: str | Path) -> list[Path]:
    """Complete checkpoints in ``directory``, oldest first (temporaries ignored)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [p for p in directory.iterdir() if _NAME.match(p.name)]
    return sorted(found, key=lambda p: int(_NAME.match(p.name).group(1)))


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The newest complete checkpoint in ``directory``, or ``None``."""
    found = list_checkpoints(directory)
    return found[-1] if found else None


def load_checkpoint(
    path: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    ref_model: torch.nn.Module | None = None,
    restore_rng: bool = True,
) -> dict[str, Any]:
    """Load a checkpoint into ``model`` (and ``optimizer`` / ``ref_model``); return its state.

    Restores the torch, numpy and python global RNG states when ``restore_rng``.
    """
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"checkpoint {str(path)!r} does not exist")
    groups: dict[str, dict[str, torch.Tensor]] = {"model.": {}, "ref.": {}, "optim.": {}}
    with safe_open(str(path), framework="pt") as f:
        meta = json.loads(f.metadata()["state"])
        rng_torch = f.get_tensor("rng.torch")
        for key in f.keys():
            for prefix, bucket in groups.items():
                if key.startswith(prefix):
                    bucket[key[len(prefix) :]] = f.get_tensor(key)
    model.load_state_dict(groups["model."])
    if ref_model is not None:
        if not groups["ref."]:
            raise ValueError(f"checkpoint {str(path)!r} has no reference model")
        ref_model.load_state_dict(groups["ref."])
    if optimizer is not None:
        state: dict[int, dict[str, torch.Tensor]] = {}
        for key, value in groups["optim."].items():
            idx, _, name = key.partition(".")
            state.setdefault(int(idx), {})[name] = value
        optimizer.load_state_dict({"state": state, "param_groups": meta["optimizer_param_groups"]})
    if restore_rng:
        torch.set_rng_state(rng_torch)
        st = meta["rng_numpy"]
        np.random.set_state((st[0], np.asarray(st[1], dtype=np.uint32), *st[2:]))  # noqa: NPY002
        v, internal, gauss = meta["rng_python"]
        random.setstate((v, tuple(internal), gauss))
    return meta
