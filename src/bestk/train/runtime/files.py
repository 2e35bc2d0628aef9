"""Atomic safetensors checkpoints of a training run (model, optimizer, RNG, step state).

One checkpoint is one file ``DIR/checkpoints/step_XXXXXXX.safetensors`` holding

* ``model.<name>``: the policy's parameters and buffers -- or, for a LoRA policy (a PEFT
  model), only its trainable (adapter) parameters: the frozen base weights are those of
  ``model.path`` (or the seeded tiny model), rebuilt when the run resumes, so they are not
  stored again (state ``"weights": "adapters"``),
* ``ref.<name>``: the frozen reference policy (only when a KL penalty is used),
* ``optim.<param index>.<state name>``: AdamW moments and step counts,
* ``master.<param index>``: the float32 master copy of each bfloat16 / float16 trainable
  parameter (:class:`bestk.train.optim.MasterAdamW`; none for a float32 model), which AdamW's
  moments of that index belong to,
* ``rng.torch``: the global torch CPU RNG state,

and, in the safetensors metadata, a JSON ``state`` (step, optimizer param groups, numpy /
python RNG states, anything the trainer adds: ``run``, the identity of the run that wrote it,
which a resume checks with the step, :func:`bestk.train.run.directory.check_checkpoint_identity`;
:func:`checkpoint_state` reads it from the header alone). It is written to a temporary file in
the same directory, flushed and fsync'ed, then moved into place with ``os.replace`` — so a
crash leaves either the previous checkpoint or the new one, never a torn file.
:func:`latest_checkpoint` ignores temporaries.

Every checkpoint has a checksum file ``step_XXXXXXX.sha256`` beside it (``sha256sum`` format:
``<hex digest>  step_XXXXXXX.safetensors``), written before the checkpoint is moved into place,
so a checkpoint never exists without one. :func:`verify_checkpoint` recomputes the digest;
:func:`latest_valid_checkpoint` returns the newest checkpoint that verifies (a truncated file,
overwritten bytes or a missing checksum file all fail, and so does a file whose safetensors
layout is incomplete even when its checksum was recomputed to match) and the ones it skipped,
with why.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bestk._atomic import atomic_path, write_text_atomic
from bestk._optional import require
from bestk.train.runtime.errors import as_os_error

__all__ = [
    "save_checkpoint",
    "load_checkpoint",
    "latest_checkpoint",
    "latest_valid_checkpoint",
    "run_checkpoints",
    "last_run_checkpoint",
    "list_checkpoints",
    "verify_checkpoint",
    "checksum_path",
    "orphan_checksums",
    "file_sha256",
    "safetensors_layout_problem",
    "checkpoint_state",
    "global_rng_kept",
    "as_os_error",
    "adapters_only",
    "load_weights",
]

_NAME = re.compile(r"^step_(\d{7})\.safetensors$")
_SIDECAR = re.compile(r"^step_(\d{7})\.sha256$")
_HEX = re.compile(r"^[0-9a-f]{64}$")


def _tensors_of(module: torch.nn.Module, prefix: str) -> dict[str, torch.Tensor]:
    # clone(): tied weights share storage, which safetensors refuses to save twice.
    return {
        f"{prefix}{k}": v.detach().to("cpu").clone().contiguous()
        for k, v in module.state_dict().items()
    }


def adapters_only(model: torch.nn.Module) -> bool:
    """Whether a checkpoint of ``model`` holds only its trainable parameters: a PEFT model
    (LoRA), whose frozen base is rebuilt from its source on resume."""
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def _trainable_of(module: torch.nn.Module, prefix: str) -> dict[str, torch.Tensor]:
    return {
        f"{prefix}{k}": p.detach().to("cpu").clone().contiguous()
        for k, p in module.named_parameters() if p.requires_grad
    }


def save_checkpoint(
    directory: str | Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    state: Mapping[str, object],
    *,
    ref_model: torch.nn.Module | None = None,
    keep: int = 2,
    masters: Mapping[int, torch.Tensor] | None = None,
) -> Path:
    """Write checkpoint ``step`` atomically into ``directory``; keep the newest ``keep``.

    ``state`` must be JSON-serialisable; the python / numpy RNG states are added to it.
    ``masters``: the optimizer's float32 master weights by parameter index
    (:meth:`bestk.train.optim.MasterAdamW.masters`). Returns the checkpoint's path.
    """
    save_file = require("safetensors.torch", extra="train").save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    adapters = adapters_only(model)
    tensors = _trainable_of(model, "model.") if adapters else _tensors_of(model, "model.")
    if ref_model is not None:
        tensors.update(_tensors_of(ref_model, "ref."))
    opt = optimizer.state_dict()
    for idx, st in opt["state"].items():
        for name, value in st.items():
            t = value if isinstance(value, torch.Tensor) else torch.tensor(value)
            tensors[f"optim.{idx}.{name}"] = t.detach().to("cpu").clone().contiguous()
    for idx, master in (masters or {}).items():
        tensors[f"master.{idx}"] = master.detach().to("cpu").clone().contiguous()
    tensors["rng.torch"] = torch.get_rng_state().clone()
    np_state: Any = np.random.get_state()  # noqa: NPY002  (global state used by user rewards)
    meta_state = dict(state)
    if adapters:
        meta_state["weights"] = "adapters"
    meta_state.update(
        step=int(step),
        optimizer_param_groups=opt["param_groups"],
        rng_numpy=[np_state[0], np_state[1].tolist(), *np_state[2:]],
        rng_python=_py_state_to_json(random.getstate()),
    )
    final = directory / f"step_{int(step):07d}.safetensors"
    with atomic_path(final, suffix=".safetensors") as tmp:
        try:
            save_file(tensors, str(tmp), metadata={"state": json.dumps(meta_state)})
        except Exception as e:  # safetensors reports I/O failures as SafetensorError
            raise as_os_error(e, final) from None
        # The checksum file lands before the checkpoint: a checkpoint never lacks one.
        write_text_atomic(checksum_path(final), f"{file_sha256(tmp)}  {final.name}\n")
    run = meta_state.get("run")  # only the run's own checkpoints rotate: never another's file
    for old in run_checkpoints(directory, run.get("digest") if isinstance(run, dict) else None
                               )[:-keep]:
        old.unlink(missing_ok=True)
        checksum_path(old).unlink(missing_ok=True)
    for side in orphan_checksums(directory):
        side.unlink(missing_ok=True)
    return final


def orphan_checksums(directory: str | Path) -> list[Path]:
    """Checksum files in ``directory`` whose checkpoint never landed (a save killed between
    writing the checksum and moving the checkpoint into place)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return [p for p in directory.iterdir()
            if _SIDECAR.match(p.name) and not p.with_suffix(".safetensors").exists()]


def load_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The state dict in ``path``, a file bestk saved with ``torch.save`` (the SFT weights
    ``bestk compare`` keeps in ``_sft/seedN.pt``, a trainer's ``warm_start``), on the CPU.

    A missing file, or one that does not load as a mapping of tensor names to tensors
    (truncated, overwritten, not a weights file), is a one-line ``ValueError`` naming it, never
    a torch traceback."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"weights file {str(path)!r} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a torn zip, unpickling errors, I/O errors: a damaged file
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"weights file {str(path)!r} is damaged (truncated or overwritten?): "
                         f"{first}") from None
    if not isinstance(state, dict) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise ValueError(f"weights file {str(path)!r} is damaged: it holds no state dict "
                         "(tensor names to tensors)")
    return state


def checksum_path(checkpoint: str | Path) -> Path:
    """The checksum file of a checkpoint: ``step_XXXXXXX.sha256`` beside it."""
    return Path(checkpoint).with_suffix(".sha256")


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_checkpoint(path: str | Path) -> str | None:
    """``None`` when checkpoint ``path`` matches its checksum file and is laid out completely
    (:func:`safetensors_layout_problem`), else why not."""
    path = Path(path)
    side = checksum_path(path)
    if not path.is_file():
        return "file missing"
    if not side.is_file():
        return f"no checksum file {side.name} (deleted, or written before bestk kept checksums)"
    fields = side.read_text(errors="replace").split()
    if not fields or not _HEX.match(fields[0]):
        return f"checksum file {side.name} is malformed"
    if file_sha256(path) != fields[0]:
        return "sha256 mismatch: truncated or overwritten"
    return safetensors_layout_problem(path)


def _read_header(path: str | Path) -> tuple[int, int, dict[str, Any] | str]:
    """``(file size, header length H, header)`` of a safetensors file, or what is wrong with
    it in place of the header (reads the header only)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return size, 0, f"truncated: {size} bytes, not even a safetensors header"
        n = int.from_bytes(head, "little")
        if n > size - 8:
            return size, n, f"truncated: {size} bytes, but its header alone takes {8 + n}"
        try:
            header = json.loads(f.read(n).decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            header = None
    if not isinstance(header, dict):
        return size, n, "not a bestk checkpoint: unreadable safetensors header or run state"
    return size, n, header


def safetensors_layout_problem(path: str | Path) -> str | None:
    """``None`` when ``path`` is laid out as a complete bestk checkpoint, else what is wrong.

    Reads only the header: an 8-byte little-endian length ``H``, ``H`` bytes of JSON mapping
    each tensor to its ``data_offsets``, with the run ``state`` in ``__metadata__``; the file
    must be exactly ``8 + H + max(end offset)`` bytes. This catches a checkpoint truncated or
    cut into after its checksum was recomputed to match (the checksum then cannot).
    """
    size, n, header = _read_header(path)
    if isinstance(header, str):
        return header
    try:
        end = max((int(v["data_offsets"][1]) for k, v in header.items()
                   if k != "__metadata__"), default=0)
        json.loads(header["__metadata__"]["state"])
    except (ValueError, KeyError, TypeError, IndexError):
        return "not a bestk checkpoint: unreadable safetensors header or run state"
    if size != 8 + n + end:
        return f"truncated or padded: {size} bytes, but its header describes {8 + n + end}"
    return None


def checkpoint_state(path: str | Path) -> dict[str, Any]:
    """The run ``state`` a checkpoint holds (step, the writing run's identity, ...), read from
    its header alone; ``ValueError`` naming the file when it has none."""
    header = _read_header(path)[2]
    try:
        state = json.loads(header["__metadata__"]["state"])  # type: ignore[index]
    except (ValueError, KeyError, TypeError):
        state = None
    if not isinstance(state, dict):
        raise ValueError(f"checkpoint {str(path)!r} holds no readable run state")
    return state


@contextmanager
def global_rng_kept() -> Iterator[None]:
    """The global torch CPU, numpy and python RNG states (those a checkpoint restores) are put
    back after the block: work redone on resume (an evaluation whose record was lost) leaves
    the randomness of the training that follows as the checkpoint left it."""
    torch_state = torch.get_rng_state()
    np_state = np.random.get_state()  # noqa: NPY002
    py_state = random.getstate()
    try:
        yield
    finally:
        torch.set_rng_state(torch_state)
        np.random.set_state(np_state)  # noqa: NPY002
        random.setstate(py_state)


def latest_valid_checkpoint(directory: str | Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """``(newest checkpoint that verifies or None, [(newer damaged checkpoint, why), ...])``."""
    skipped: list[tuple[Path, str]] = []
    for path in reversed(list_checkpoints(directory)):
        why = verify_checkpoint(path)
        if why is None:
            return path, skipped
        skipped.append((path, why))
    return None, skipped


def _load_adapters(model: torch.nn.Module, tensors: dict[str, torch.Tensor], path: Path) -> None:
    """Load an adapters-only checkpoint: exactly the model's trainable parameters."""
    trainable = {k for k, p in model.named_parameters() if p.requires_grad}
    if set(tensors) != trainable:
        extra = sorted(set(tensors) - trainable) or sorted(trainable - set(tensors))
        raise ValueError(f"checkpoint {str(path)!r} does not fit the model's adapters (another "
                         f"model.lora config?): e.g. {extra[0]!r}")
    model.load_state_dict(tensors, strict=False)


def _load_masters(masters: Mapping[int, torch.Tensor], stored: dict[str, torch.Tensor],
                  path: Path) -> None:
    """Copy the stored float32 masters into ``masters`` (each must exist and fit)."""
    for key, value in stored.items():
        target = masters.get(int(key))
        if target is None or target.shape != value.shape:
            raise ValueError(f"checkpoint {str(path)!r} does not fit the optimizer's master "
                             f"weights (another model config?): master.{key}")
        with torch.no_grad():
            target.copy_(value)


def _py_state_to_json(st: tuple[int, tuple[int, ...], float | None]) -> list[object]:
    version, internal, gauss = st
    return [version, list(internal), gauss]


def list_checkpoints(directory: str | Path) -> list[Path]:
    """Complete checkpoints in ``directory``, oldest first (temporaries ignored)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [p for p in directory.iterdir() if _NAME.match(p.name)]
    return sorted(found, key=lambda p: int(p.name[5:12]))  # step_XXXXXXX.safetensors


def run_checkpoints(directory: str | Path, digest: str | None = None) -> list[Path]:
    """The checkpoints in ``directory`` a run wrote, oldest first: laid out completely
    (:func:`safetensors_layout_problem`; the header alone is read, no checksum computed),
    holding the step their name says and recording the run identity ``digest``
    (:func:`bestk.train.run.directory.run_identity`), or none (written before checkpoints
    recorded their run; ``digest`` ``None``: any run). A file named like a checkpoint that is
    not one (a random file) or is another run's (copied from it) is not counted: it is never
    taken for steps done, named as the one to continue from, or rotated away."""
    found = []
    for path in list_checkpoints(directory):
        try:
            if safetensors_layout_problem(path) is not None:
                continue
            state = checkpoint_state(path)
        except (ValueError, OSError):  # not a bestk checkpoint, or gone meanwhile
            continue
        run = state.get("run")
        if state.get("step") != int(path.name[5:12]) or run is not None and digest is not None \
                and not (isinstance(run, dict) and run.get("digest") == digest):
            continue
        found.append(path)
    return found


def last_run_checkpoint(directory: str | Path, digest: str | None = None) -> Path | None:
    """The newest of :func:`run_checkpoints` (``None``: the run wrote none)."""
    found = run_checkpoints(directory, digest)
    return found[-1] if found else None


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
    verify: bool = True,
    masters: Mapping[int, torch.Tensor] | None = None,
) -> dict[str, Any]:
    """Load a checkpoint into ``model`` (and ``optimizer`` / ``ref_model``); return its state.

    ``masters`` (the optimizer's float32 master weights by parameter index) are overwritten
    with the stored ones; a master the checkpoint lacks is left as it is (the optimizer
    re-reads it from its parameter, :meth:`bestk.train.optim.MasterAdamW.sync`).

    With ``verify`` (default) the file must match its checksum file (:func:`verify_checkpoint`);
    a damaged or unreadable checkpoint raises ``ValueError`` naming it. Restores the torch,
    numpy and python global RNG states when ``restore_rng``.
    """
    safe_open = require("safetensors", extra="train").safe_open

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"checkpoint {str(path)!r} does not exist")
    if verify:
        why = verify_checkpoint(path)
        if why is not None:
            raise ValueError(f"checkpoint {str(path)!r} is damaged: {why}")
    groups: dict[str, dict[str, torch.Tensor]] = {"model.": {}, "ref.": {}, "optim.": {},
                                                  "master.": {}}
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = json.loads(f.metadata()["state"])
            rng_torch = f.get_tensor("rng.torch")
            for key in f.keys():
                for prefix, bucket in groups.items():
                    if key.startswith(prefix):
                        bucket[key[len(prefix) :]] = f.get_tensor(key)
    except Exception as e:  # SafetensorError, bad JSON, missing keys: an unreadable file
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(f"checkpoint {str(path)!r} is unreadable: {first}") from None
    try:
        if meta.get("weights") == "adapters":
            _load_adapters(model, groups["model."], path)
        else:
            model.load_state_dict(groups["model."])
        if ref_model is not None:  # a reference without weights of its own needs none
            if not groups["ref."] and ref_model.state_dict():
                raise ValueError(f"checkpoint {str(path)!r} has no reference model")
            ref_model.load_state_dict(groups["ref."])
    except RuntimeError as e:
        first = str(e).splitlines()[0]
        raise ValueError(
            f"checkpoint {str(path)!r} does not fit the model (another model config?): {first}"
        ) from None
    if optimizer is not None:
        state: dict[int, dict[str, torch.Tensor]] = {}
        for key, value in groups["optim."].items():
            idx, _, name = key.partition(".")
            state.setdefault(int(idx), {})[name] = value
        optimizer.load_state_dict({"state": state, "param_groups": meta["optimizer_param_groups"]})
    if masters is not None:
        _load_masters(masters, groups["master."], path)
    if restore_rng:
        torch.set_rng_state(rng_torch)
        st = meta["rng_numpy"]
        np.random.set_state((st[0], np.asarray(st[1], dtype=np.uint32), *st[2:]))  # noqa: NPY002
        v, internal, gauss = meta["rng_python"]
        random.setstate((v, tuple(internal), gauss))
    return meta
