"""Reward functions ``(prompt, completion, **example) -> float`` and their registry.

A reward is named three ways (:func:`get_reward`): a registered name (``exact``), an importable
``module:function`` (a ``module.py`` in the working directory counts, under every entry point),
or a file ``path/to/file.py:function``. Several functions combine with weights into one reward
(:func:`get_rewards`, :class:`WeightedRewards`: TRL's ``reward_funcs`` / ``reward_weights``).

``example`` holds the task's fields for that prompt (``answer``, ``id``, task metadata); a reward
function takes what it needs by keyword and ignores the rest (``**_``). Rewards are floats;
a completion *succeeds* (counts for pass@k) when its reward is ``>= success_threshold`` of the
task (1.0 for every built-in reward, i.e. ``score == 1.0``).

Built in:

* ``exact`` — 1 if the stripped completion equals the stripped answer, else 0.
* ``arithmetic`` — graded closeness of an integer answer: ``1 / (1 + |pred - target|)``
  (1 when exact, 1/2 when off by one, ...; 0 when no integer can be read).
* ``arithmetic_last`` — the same closeness for the *last* integer of the completion, for
  models that answer in a sentence (``35 + 77 = 112.``); unlike ``math_verify`` it does not
  accept an echo of the question (``To calculate 35 + 77, we ...`` reads 77, not 35 + 77).
* ``positional`` — graded string match: share of positions where completion and answer agree
  (over the longer length); 1 only for an exact match.
* ``math_verify`` — 1 if math-verify finds the completion's answer equal to the reference
  (GSM8K's ``#### answer`` convention is read on both sides: :func:`final_answer`).
* ``similarity`` — SoftmaxGRPO's weak reward ``r_sim = 0.6 F1_SQuAD + 0.4 ROUGE-L``
  (SoftmaxGRPO, Appendix B.5; docs/references.md) against the reference answer.
* ``reasoning_gym`` — the reasoning-gym dataset's own ``score_answer`` of the entry (raw score
  in [0, 1]; success is ``score == 1.0``).
"""

from __future__ import annotations

import decimal
import hashlib
import importlib
import importlib.util
import inspect
import math
import numbers
import os
import re
import string
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache, reduce
from pathlib import Path
from types import ModuleType
from typing import Any, SupportsInt

import numpy as np

from bestk._optional import require
from bestk.tasks.guard import user_code

__all__ = [
    "REWARDS",
    "RewardSpec",
    "WeightedRewards",
    "Reward",
    "register_reward",
    "get_reward",
    "get_rewards",
    "reward_parts",
    "reward_number",
    "NUMBER_FORMS",
    "exact_reward",
    "arithmetic_reward",
    "arithmetic_last_reward",
    "positional_reward",
    "math_verify_reward",
    "final_answer",
    "similarity_reward",
    "squad_f1",
    "reasoning_gym_reward",
]

RewardFn = Callable[..., float]


@dataclass(frozen=True)
class RewardSpec:
    """A reward function: the function, whether its values are graded (not only 0/1), the
    optional modules it imports (checked when a task using it loads) and the name its values
    are logged under (the registered name, else the function's ``__name__``)."""

    fn: RewardFn
    graded: bool
    requires: tuple[str, ...] = ()
    name: str = ""


@dataclass(frozen=True)
class WeightedRewards:
    """Several reward functions scored together, with TRL ``GRPOTrainer``'s semantics of
    ``reward_funcs`` / ``reward_weights``: every function scores every completion, a function
    may return ``None`` ("does not apply"), and the reward is the weighted sum over the
    functions that did not, :math:`r = \\sum_{j: r_j \\neq None} w_j r_j` (TRL: ``nansum`` of
    ``weights * rewards_per_func``). Build with :func:`get_rewards`."""

    specs: tuple[RewardSpec, ...]
    weights: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.specs or len(self.specs) != len(self.weights):
            raise ValueError(f"WeightedRewards needs one weight per function, got "
                             f"{len(self.specs)} function(s) and {len(self.weights)} weight(s)")
        names = [s.name for s in self.specs]
        if not all(names) or len(set(names)) != len(names):
            raise ValueError(f"WeightedRewards needs distinct, non-empty function names (each "
                             f"is logged under its own), got {names}")

    @property
    def graded(self) -> bool:
        """True unless the sum can only be 0 or 1 (one binary function with weight 1)."""
        return not (len(self.specs) == 1 and not self.specs[0].graded and self.weights == (1.0,))

    @property
    def requires(self) -> tuple[str, ...]:
        """The optional modules of every function, each once."""
        return tuple(dict.fromkeys(m for s in self.specs for m in s.requires))

    @property
    def names(self) -> tuple[str, ...]:
        """The functions' names, in order (each function's values are logged under it)."""
        return tuple(s.name for s in self.specs)


#: A task's reward: one function or several with weights.
Reward = RewardSpec | WeightedRewards


def reward_parts(reward: Reward) -> tuple[tuple[RewardSpec, ...],
                                                                 tuple[float, ...] | None]:
    """``(functions, weights)`` of a task's reward; ``weights`` is ``None`` for one plain
    function (its value is the reward as it is, not multiplied by a weight)."""
    if isinstance(reward, WeightedRewards):
        return reward.specs, reward.weights
    return (reward,), None


#: name -> :class:`RewardSpec`. Add with :func:`register_reward`.
REWARDS: dict[str, RewardSpec] = {}


def register_reward(
    name: str, *, graded: bool, requires: tuple[str, ...] = ()
) -> Callable[[RewardFn], RewardFn]:
    """Decorator registering ``fn(prompt, completion, **example) -> float`` under ``name``;
    ``requires`` names the optional modules it imports (e.g. ``("math_verify",)``)."""

    def deco(fn: RewardFn) -> RewardFn:
        REWARDS[name] = RewardSpec(fn, graded, tuple(requires), name)
        return fn

    return deco


def _forms() -> str:
    """The ways to name a reward, for error messages."""
    return (f"a registered reward ({', '.join(sorted(REWARDS))}), 'module:function' (an "
            f"importable module, or module.py in the working directory) or "
            f"'path/to/file.py:function'")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


def _names_missing(e: ModuleNotFoundError, module: str) -> bool:
    """Whether ``e`` says ``module`` itself (or a package above it) does not exist, rather
    than that something it imports is missing."""
    return bool(e.name) and (module == e.name or module.startswith(f"{e.name}."))


def _import_module(module: str, spec: str) -> ModuleType:
    """``importlib.import_module(module)``, falling back to the working directory.

    ``python -m bestk`` searches the working directory but the ``bestk`` console script does
    not (its ``sys.path[0]`` is the script's directory); so when ``module`` is not found, the
    working directory is appended to ``sys.path`` (kept there when the import then succeeds,
    so the module's own imports of its neighbours work) and the import is tried once more.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if not _names_missing(e, module):
            raise ValueError(f"cannot load reward function {spec!r}: {_first_line(e)}") from None
    except Exception as e:  # the module's own code failed while importing
        raise ValueError(f"cannot load reward function {spec!r}: {_first_line(e)}") from None
    cwd = os.getcwd()
    not_found = ValueError(f"cannot load reward function {spec!r}: no module named {module!r} "
                           f"(nor {module.replace('.', '/')}.py in {cwd}); a reward is "
                           f"{_forms()}")
    searched = {os.path.abspath(p or os.curdir) for p in sys.path if isinstance(p, str)}
    if cwd in searched:
        raise not_found
    sys.path.append(cwd)
    importlib.invalidate_caches()
    try:
        return importlib.import_module(module)
    except Exception as e:
        if isinstance(e, ModuleNotFoundError) and _names_missing(e, module):
            sys.path.remove(cwd)
            raise not_found from None
        raise ValueError(f"cannot load reward function {spec!r}: {_first_line(e)}") from None


def _module_from_file(path: str, spec: str) -> ModuleType:
    """The module of the Python file ``path`` (relative to the working directory), executed
    once per process under a name derived from its absolute path (kept in ``sys.modules``)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ValueError(f"cannot load reward function {spec!r}: {path!r} is not a file; a "
                         f"reward is {_forms()}")
    file = file.resolve()
    digest = hashlib.sha1(str(file).encode()).hexdigest()[:12]
    stem = re.sub(r"\W", "_", file.stem)
    name = f"_bestk_reward_{stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    loader_spec = importlib.util.spec_from_file_location(name, file)
    if loader_spec is None or loader_spec.loader is None:
        raise ValueError(f"cannot load reward function {spec!r}: {path!r} is not a Python file")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    try:
        loader_spec.loader.exec_module(module)
    except BaseException as e:
        del sys.modules[name]
        if not isinstance(e, Exception):  # SystemExit, ...: the guard of get_reward's
            raise
        raise ValueError(f"cannot load reward function {spec!r}: {_first_line(e)}") from None
    return module


def _is_file_target(target: str) -> bool:
    return target.endswith(".py") or "/" in target or os.sep in target


def _check_signature(fn: Callable[..., object], name: str) -> None:
    """A reward is called ``fn(prompt, completion, **fields)`` (every field of the example:
    ``answer``, ``id``, ...): ``ValueError`` naming ``fn``'s signature when it cannot take that
    (two positional arguments and any keywords), so a wrong function (``os:system``) is refused
    when the task loads rather than after the SFT. A function without an inspectable
    signature is taken as it is."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        sig.bind_partial("prompt", "completion")
        ok = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    except TypeError:
        ok = False
    if not ok:
        shown = str(sig) if len(str(sig)) <= 60 else str(sig)[:57] + "..."
        raise ValueError(
            f"reward function {name!r} has the signature {shown}, but a reward is called as "
            "fn(prompt, completion, **fields) with every field of the example (answer, id, "
            "...); define it as def f(prompt, completion, **fields)"
        )


def get_reward(name: str) -> RewardSpec:
    """A reward function by its name: a registered reward (``exact``), ``module:function``
    (importable, or ``module.py`` in the working directory) or ``path/to/file.py:function``
    (a Python file, relative to the working directory or absolute). A function given by
    module or file is graded and named by its ``__name__`` (as TRL names reward functions);
    ``function`` may be dotted (``Class.method``).

    Raises ``ValueError`` naming the reward and the forms a reward may take when it cannot
    be found or loaded.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a reward is {_forms()}; got {name!r}")
    if name in REWARDS:
        return REWARDS[name]
    if ":" in name:
        target, _, attr = name.rpartition(":")
        if not target or not attr:
            raise ValueError(f"reward {name!r}: a reward is {_forms()}")
        with user_code(f"reward function {name!r}", " while its module was loading",
                       passthrough=(Exception,)):  # its own errors: "cannot load ..." above
            module = (_module_from_file(target, name) if _is_file_target(target)
                      else _import_module(target, name))
        try:
            fn = reduce(getattr, attr.split("."), module)
        except AttributeError:
            raise ValueError(f"cannot load reward function {name!r}: {target!r} has no "
                             f"{attr!r}") from None
        if not callable(fn):
            raise ValueError(f"reward {name!r} is not callable")
        _check_signature(fn, name)
        return RewardSpec(fn, True, (), str(getattr(fn, "__name__", attr)))
    raise ValueError(f"unknown reward {name!r}; valid: {_forms()}")


def get_rewards(
    names: str | Sequence[str], weights: Sequence[float] | None = None
) -> Reward:
    """The reward of ``task.reward`` and ``task.reward_weights``.

    One name without weights is :func:`get_reward` of it (a plain reward, scored as it is).
    A list of names (or weights given) is a :class:`WeightedRewards`: ``weights`` (default
    all 1, as TRL's ``reward_weights``) must have one finite number per function, and the
    functions must have distinct names (each is logged under its own). Errors are one-line
    ``ValueError``s.
    """
    if isinstance(names, str):
        names = [names]
    names = list(names)
    if not names:
        raise ValueError(f"task.reward is an empty list; give one or more rewards, each "
                         f"{_forms()}")
    specs = tuple(get_reward(n) for n in names)
    if weights is None:
        if len(specs) == 1:
            return specs[0]
        weights = [1.0] * len(specs)
    weights = list(weights)
    if len(weights) != len(specs):
        raise ValueError(f"task.reward_weights has {len(weights)} weight(s) for {len(specs)} "
                         f"reward function(s); give one per function")
    ws = []
    for w in weights:
        try:
            ok = not isinstance(w, bool) and math.isfinite(float(w))
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"task.reward_weights must be finite numbers, got {w!r}")
        ws.append(float(w))
    seen: dict[str, str] = {}
    for n, s in zip(names, specs, strict=True):
        if s.name in seen:
            raise ValueError(f"task.reward lists two functions named {s.name!r} ({seen[s.name]!r}"
                             f" and {n!r}); each function's values are logged under its name")
        seen[s.name] = n
    return WeightedRewards(specs, tuple(ws))


#: What a reward function may return, for messages.
NUMBER_FORMS = "an int, float or bool, or a numpy or torch scalar"


def reward_number(value: object) -> float:
    """A reward function's value as a float: a real number (``int``, ``float``, ``bool``,
    ``Fraction``, ``Decimal``), a one-element numpy array or scalar of a real dtype, or a
    one-element torch tensor of a real dtype (``bfloat16`` included, read through float64).

    Anything else -- text such as ``"0.5"`` (never parsed), a list, ``None``, a complex number
    -- raises ``TypeError`` whose message names the value's type (``"a str, not a number"``).
    Finiteness is the caller's to check."""
    if isinstance(value, (numbers.Real, decimal.Decimal)):
        return float(value)
    torch = sys.modules.get("torch")  # a tensor implies torch is imported
    if torch is not None and isinstance(value, torch.Tensor):
        if value.numel() == 1 and not value.is_complex():
            return float(value.detach().reshape(()).to("cpu", torch.float64).item())
        what = f"torch tensor of dtype {str(value.dtype).removeprefix('torch.')} and shape " \
               f"{tuple(value.shape)}"
    elif isinstance(value, (np.ndarray, np.generic)):
        if value.size == 1 and value.dtype.kind in "biuf":
            return float(np.asarray(value, dtype=np.float64).reshape(()))
        what = f"numpy {'array' if isinstance(value, np.ndarray) else 'scalar'} of dtype " \
               f"{value.dtype} and shape {np.shape(value)}"
    elif value is None:
        raise TypeError(f"None is not a number (a reward is {NUMBER_FORMS}; None, \"does not "
                        "apply\", only from one of several reward functions)")
    else:
        what = type(value).__name__
    raise TypeError(f"a {what}, not a number (a reward is {NUMBER_FORMS})")


@register_reward("exact", graded=False)
def exact_reward(prompt: str, completion: str, *, answer: object, **_: object) -> float:
    """1.0 if ``completion.strip() == str(answer).strip()``, else 0.0."""
    return float(completion.strip() == str(answer).strip())


_INT = re.compile(r"^\s*([+-]?\d+)")


@register_reward("arithmetic", graded=True)
def arithmetic_reward(prompt: str, completion: str, *, answer: SupportsInt | str,
                      **_: object) -> float:
    """Graded closeness ``1 / (1 + |pred - target|)`` of the integer the completion starts with.

    1.0 exactly when the answer is right (so success = ``reward == 1``); 0.0 when the
    completion does not start with an integer.
    """
    m = _INT.match(completion)
    if m is None:
        return 0.0
    try:
        diff = abs(int(m.group(1)) - int(answer))
    except (TypeError, ValueError):
        return 0.0
    return 1.0 / (1.0 + diff)


_LAST_INT = re.compile(r"[+-]?\d+")


@register_reward("arithmetic_last", graded=True)
def arithmetic_last_reward(prompt: str, completion: str, *, answer: SupportsInt | str,
                           **_: object) -> float:
    """Graded closeness ``1 / (1 + |pred - target|)`` of the *last* integer in the completion
    (a sign counts when it directly precedes the digits); 0.0 when it holds none.

    ``"35 + 77 = 112."`` -> 112; ``"To calculate 35 + 77, we need"`` -> 77 (an echo of the
    question is not an answer, as it is to ``math_verify``, which evaluates ``35 + 77``).
    """
    found = _LAST_INT.findall(completion)
    if not found:
        return 0.0
    last = found[-1]
    try:
        diff = abs(int(last) - int(answer))
    except (TypeError, ValueError):
        return 0.0
    return 1.0 / (1.0 + diff)


@register_reward("positional", graded=True)
def positional_reward(prompt: str, completion: str, *, answer: object, **_: object) -> float:
    """Graded string match: characters equal at the same position, divided by the longer
    length (``sum_i [c_i == a_i] / max(|c|, |a|)``); 1.0 exactly when ``c == a``.

    Both strings are stripped; two empty strings score 1.
    """
    c, a = completion.strip(), str(answer).strip()
    if not c and not a:
        return 1.0
    same = sum(x == y for x, y in zip(c, a, strict=False))
    return same / max(len(c), len(a))


_GSM8K_MARK = "####"
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def final_answer(text: str) -> str:
    """The final answer of a GSM8K-style text: what follows the last ``####`` on its line,
    stripped, without thousands separators (``1,234`` -> ``1234``); the whole text when there
    is no ``####`` (math-verify then finds a ``\\boxed{}`` or the last expression itself).

    ``"48/2 = 24 clips in May.\\n#### 72"`` -> ``"72"``.
    """
    if _GSM8K_MARK not in text:
        return text
    tail = text.rsplit(_GSM8K_MARK, 1)[1].strip()
    line = tail.splitlines()[0].strip() if tail else ""
    return _THOUSANDS.sub("", line)


@lru_cache(maxsize=4096)
def _parse_gold(answer: str) -> Any:
    parse = require("math_verify", extra="train").parse

    text = answer if ("$" in answer or "\\boxed" in answer) else f"${answer}$"
    return parse(text)


@register_reward("math_verify", graded=False, requires=("math_verify",))
def math_verify_reward(prompt: str, completion: str, *, answer: object,
                       **_: object) -> float:
    """1.0 if math-verify judges the completion's final answer equal to ``answer``, else 0.0.

    Both sides first go through :func:`final_answer` (GSM8K's ``#### 72``: the reference may
    be a whole worked solution). The reference is then parsed as LaTeX (wrapped in ``$...$``
    when it has no delimiters); the completion as free text (``\\boxed{}``, ``$...$``, plain
    numbers).
    """
    mv = require("math_verify", extra="train")
    parse, verify = mv.parse, mv.verify

    gold = _parse_gold(final_answer(str(answer)))
    try:
        pred = parse(final_answer(completion))
        return float(bool(verify(gold, pred)))
    except Exception:  # math-verify raises on malformed LaTeX; an unparseable answer is wrong
        return 0.0


def _normalize_squad(text: str) -> str:
    """SQuAD v1.1 answer normalisation: lower, drop punctuation and articles, fix spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def squad_f1(prediction: str, reference: str) -> float:
    """Token-level F1 of the SQuAD v1.1 evaluation script (normalised bag-of-words overlap).

    Two empty (after normalisation) strings score 1; one empty string scores 0.
    """
    p = _normalize_squad(prediction).split()
    r = _normalize_squad(reference).split()
    if not p or not r:
        return float(p == r)
    common = sum((Counter(p) & Counter(r)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(r)
    return 2 * precision * recall / (precision + recall)


@lru_cache(maxsize=1)
def _rouge_scorer() -> Any:
    rouge_scorer = require("rouge_score.rouge_scorer", extra="train")

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)


@register_reward("similarity", graded=True, requires=("rouge_score",))
def similarity_reward(prompt: str, completion: str, *, answer: object,
                      **_: object) -> float:
    """SoftmaxGRPO's ``r_sim = 0.6 F1_SQuAD + 0.4 ROUGE-L`` (F-measure) against ``answer``."""
    ref = str(answer)
    rouge = _rouge_scorer().score(ref, completion)["rougeL"].fmeasure
    return 0.6 * squad_f1(completion, ref) + 0.4 * float(rouge)


@register_reward("reasoning_gym", graded=True, requires=("reasoning_gym",))
def reasoning_gym_reward(prompt: str, completion: str, *, entry: dict, **_: object) -> float:
    """The reasoning-gym score of ``completion`` for ``entry`` (its dataset's ``score_answer``).

    ``entry`` is the dataset item (``question``, ``answer``, ``metadata`` with
    ``source_dataset``). Scores lie in [0, 1]; 1.0 means correct.
    """
    reasoning_gym = require("reasoning_gym", extra="train")

    score_fn = reasoning_gym.get_score_answer_fn(entry["metadata"]["source_dataset"])
    score = score_fn(completion.strip(), entry)
    return float(score) if score is not None else 0.0
