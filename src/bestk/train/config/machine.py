"""The checks of a resolved run config against this machine, needing neither a model nor a
bank: paths that can hold a run's files, the device, threads, the tiny model's memory, and
the bound every batch a run holds must fit in (:func:`refuse_batches`).

The checks that need the algorithm registry (which batches a run holds), the task or the
model are :mod:`bestk.train.validation`'s; they call :func:`refuse_batches`.
"""

from __future__ import annotations

import os

import torch

from bestk.train.config.schema import ResolvedTrainConfig

__all__ = ["check_paths", "check_machine", "check_device", "tiny_model_parameters",
           "refuse_batches", "Batch", "COMPLETION_BYTES", "REWARD_BYTES"]


#: Room the run's own files need under ``out`` (``checkpoints/.step_0000000.safetensors...``).
_RUN_FILE_ROOM = 64


def _path_problem(path: str) -> str | None:
    """Why ``path`` cannot hold a run's files (or be recorded in its ``config.yaml``), or
    ``None``: empty, bytes that are not UTF-8 (a YAML file cannot hold them, so the config
    could never be read back), or longer than the system allows (``PATH_MAX``, ``NAME_MAX``
    for one name)."""
    if not path.strip():
        return "is empty"
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return (f"holds bytes that are not UTF-8 ({os.fsencode(path)[:60]!r}); config.yaml "
                "could not record it")
    full = os.path.abspath(path)
    try:
        path_max = os.pathconf("/", "PC_PATH_MAX")
        name_max = os.pathconf("/", "PC_NAME_MAX")
    except (AttributeError, OSError, ValueError):  # pragma: no cover - Windows
        path_max, name_max = 260, 255
    if len(os.fsencode(full)) + _RUN_FILE_ROOM > path_max:
        return (f"is {len(os.fsencode(full))} bytes long; with the run's files under it, that "
                f"exceeds this system's limit of {path_max} (PATH_MAX)")
    long = [n for n in full.split(os.sep) if len(os.fsencode(n)) > name_max]
    if long:
        return (f"has a name of {len(os.fsencode(long[0]))} bytes, over this system's limit "
                f"of {name_max} (NAME_MAX)")
    return None


def check_paths(cfg: ResolvedTrainConfig) -> None:
    """``out`` and ``model.path`` can be used and recorded (:func:`_path_problem`): refused
    in one line before anything is written or trained (``~`` is expanded by
    :func:`bestk.train.config.resolve.fill_defaults`)."""
    for key, value in (("out", cfg.out), ("model.path", cfg.model.path)):
        if value is None:
            continue
        why = _path_problem(value)
        if why is not None:
            flag = "--out" if key == "out" else f"config key {key!r}"
            shown = value if len(value) <= 60 else value[:57] + "..."
            raise ValueError(f"{flag} {shown!r} {why}; choose another path")


def tiny_model_parameters(cfg: ResolvedTrainConfig) -> int:
    """A lower bound on the parameters of the tiny default model of ``cfg.model`` (no
    ``model.path``): per layer the attention projections :math:`4h^2` (+ Qwen2's biases
    :math:`3h`), the gated MLP :math:`3hI` and two norms :math:`2h`; plus the final norm (the
    embedding, tied to the output, is left out: the vocabulary is the task's)."""
    m = cfg.model
    h, layer = m.hidden_size, 4 * m.hidden_size**2 + 3 * m.hidden_size * m.intermediate_size
    layer += 2 * h + (3 * h if m.arch == "qwen2" else 0)
    return m.num_layers * layer + h


def _memory_bytes(device: str) -> int | None:
    """The memory of ``device`` (physical memory for the CPU), or ``None`` if unknown."""
    dev = torch.device(device)
    try:
        if dev.type == "cuda":
            return int(torch.cuda.get_device_properties(dev.index or 0).total_memory)
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError, RuntimeError):  # pragma: no cover
        return None


def _gib(n: float) -> str:
    """``n`` bytes in MiB, GiB or TiB (one decimal)."""
    if n < 2**30:
        return f"{n / 2**20:,.1f} MiB"
    return f"{n / 2**30:,.1f} GiB" if n < 2**40 else f"{n / 2**40:,.1f} TiB"


#: Bytes a sampled completion holds at the least, whatever the model: its prompt's and its own
#: token ids and attention masks (int64, at least one token each), its sampled log-prob and
#: entropy (float32), its decoded text (a Python ``str``, 49 bytes when empty), its reward and
#: advantage (float64): over 100 bytes, so 64 is a lower bound with room to spare.
COMPLETION_BYTES = 64


#: Bytes of a reward kept for every sample of a reference bank (float64).
REWARD_BYTES = 8

#: A batch the run will hold at once: how many items, bytes each at the least, what it is
#: (for the message) and the keys that set it.
Batch = tuple[int, int, str, str]


def _machine_memory(device: str) -> int | None:
    """The memory a run on ``device`` can use: the CPU's, plus the device's when it is not
    the CPU (``None`` when the system does not say)."""
    have = _memory_bytes("cpu")
    if have is not None and torch.device(device).type != "cpu":
        have += _memory_bytes(device) or 0
    return have


def refuse_batches(device: str, batches: list[Batch]) -> None:
    """The first of ``batches`` whose items cannot fit in the machine's memory
    (:func:`_machine_memory`) at their bytes each is a one-line ``ValueError`` naming the
    keys, the bytes needed and the memory there is."""
    have = _machine_memory(device)
    if have is None:  # pragma: no cover - a system that does not say
        return
    for count, each, what, keys in batches:
        need = count * each
        if need > have:
            raise ValueError(
                f"{what} need at least {_gib(need)} ({each} bytes each, before the model's "
                f"activations), more than the {_gib(have)} of memory of this machine; lower "
                f"{keys}"
            )


def check_machine(cfg: ResolvedTrainConfig) -> None:
    """What this machine can hold: ``threads`` at most its CPUs (torch crashes on absurd
    counts), and the tiny default model's training memory -- weights, gradients and AdamW's
    two moments, :math:`4 \times` the parameters' bytes, at least
    (:func:`tiny_model_parameters`) -- within the device's memory. One-line ``ValueError``s
    naming the machine's limit."""
    cpus = os.cpu_count()
    if cfg.threads is not None and cpus is not None and cfg.threads > cpus:
        raise ValueError(
            f"config key 'threads' is {cfg.threads}, more than this machine's {cpus} CPUs; use "
            f"at most {cpus} (or null for torch's default)"
        )
    if cfg.model.path is not None:
        return
    params = tiny_model_parameters(cfg)
    need = params * (2 if cfg.model.dtype == "bfloat16" else 4) * 4
    have = _memory_bytes(cfg.device)
    if have is not None and need > have:
        m = cfg.model
        raise ValueError(
            f"the model of model.hidden_size={m.hidden_size}, model.num_layers={m.num_layers}, "
            f"model.intermediate_size={m.intermediate_size} has about {params:.3g} parameters: "
            f"training it needs at least {_gib(need)}, more than the {_gib(have)} of memory of "
            f"device {cfg.device!r}; make it smaller"
        )


def check_device(device: str) -> None:
    """``device`` parses as a torch device and that device is available here."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(
            f"config key 'device' must be a torch device such as cpu, cuda, cuda:1 or mps, "
            f"got {device!r}"
        ) from None
    if dev.type == "cpu":
        return
    backend = torch.backends.mps if dev.type == "mps" else getattr(torch, dev.type, None)
    available = getattr(backend, "is_available", None)
    if available is None:
        raise ValueError(
            f"config key 'device' is {device!r}, which is not a compute device; use cpu, cuda, "
            "cuda:N or mps"
        )
    if not available():
        raise ValueError(
            f"config key 'device' is {device!r}, but no {dev.type} device is available to this "
            f"torch ({torch.__version__})"
        )
    count = getattr(getattr(torch, dev.type, None), "device_count", None)
    if dev.index is not None and count is not None and dev.index >= count():
        raise ValueError(
            f"config key 'device' is {device!r}, but only {count()} {dev.type} device(s) are "
            "visible"
        )
